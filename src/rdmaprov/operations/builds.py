"""Operations that build an artifact on one node, bring it to the control machine, install it everywhere.

pyinfra runs each operation on every host before the next one starts, so four operations are
four steps across the cluster: `artifact_built` (only the builder of each distinct build does
anything), `artifact_fetched` (the builder's archive comes to the control machine's cache, when
other nodes need it), `artifact_broadcast` (under Slurm: one node sends it to the Slurm nodes by
sbcast), `artifact_installed` (every node: receive, checksum, unpack, switch `current`).

A node's build is described by a *recipe*: a function of its settings (from the inventory, the
operations' arguments) and its facts (distro, GPUs). The builder of a build is the first host,
in inventory order, of those that declared the same build id in this run, so every node, and a
check, agrees on who builds without talking to the others.
"""

from __future__ import annotations

import shlex
import time
from collections.abc import Iterator
from dataclasses import dataclass
from io import BytesIO
from pathlib import Path
from typing import Any

from pyinfra import host
from pyinfra.api import FileDownloadCommand, FileUploadCommand, FunctionCommand, StringCommand
from pyinfra.connectors.util import CommandOutput
from pyinfra.context import ctx_state

from rdmaprov.builds import store
from rdmaprov.builds.fanout import CONTROL, routes, wait_s
from rdmaprov.builds.scripts import (
    SBCAST_SUFFIX,
    SOURCE_TARBALL,
    broadcast_script,
    build_script,
    install_script,
    receive_script,
    switch_current,
)
from rdmaprov.builds.spec import ARTIFACT_DIR, BuildSpec, Recipe, RecipeSettings, S
from rdmaprov.engine.board import Board
from rdmaprov.engine.cluster import cluster_fact
from rdmaprov.engine.desired import executing, operation
from rdmaprov.engine.factcache import fact
from rdmaprov.engine.notes import warn
from rdmaprov.engine.pyinfra_state import privileges
from rdmaprov.engine.run_context import context_of, once_per_run, run_hosts
from rdmaprov.facts.builds import BuildInstalled, CommandWorks, KeptArchive
from rdmaprov.facts.gpu import Gpus
from rdmaprov.facts.system import Os
from rdmaprov.parsers.slurm import parse_scontrol_nodes
from rdmaprov.quoting import fail_command
from rdmaprov.slurm.grant import grant_groups

BUILD_DEADLINES = 4  # a build's deadline, in ssh.command_timeout

# Where the inventory declares Slurm, archives go to its nodes by Slurm's own broadcast (sbcast)
# from a node that holds them, when that node has Slurm's commands and the controller answers
# (not yet on a cluster's first apply: Slurm is the last deploy). A source of a Shipment:
SBCAST = "@sbcast"  # no host name has an @
SLURM_READY = "command -v salloc && command -v sbcast && scontrol ping | grep -q ' is UP'"
SLURM_GRANT_S = 15  # how long Slurm may take to grant the nodes; busy ones get the SSH tree's copy


def declare(recipe: Recipe[S], slot: str, settings: S | None, wanted: bool = True) -> None:
    """Tell the run (while planning) which recipe `slot` uses, and, when `wanted`, that the current
    host wants that build with these settings. Operations receive the recipe's name, which
    fingerprints stably, and find the recipe here."""
    run = context_of(ctx_state.get())
    run.recipes[recipe.name] = recipe
    if wanted and settings is not None:
        run.builds.setdefault(slot, {})[host.name] = settings


@dataclass(frozen=True)
class Placement:
    """This host's build, the builder of that build, and the hosts that do not have it yet."""

    spec: BuildSpec | None
    builder: str = ""
    needing: tuple[str, ...] = ()
    group: tuple[str, ...] = ()  # the hosts of this run that want this same build


def _peer_keys(rec: Recipe[Any], slot: str) -> dict[str, str]:
    """Build id of every host that declared `slot`, from the cluster's facts; worked out once per
    run (each host's operations ask for it: recomputing per host would be quadratic)."""
    run = context_of(ctx_state.get())
    memo = run.build_keys
    if slot in memo:
        return memo[slot]
    declared = run.builds.get(slot, {})
    oses = cluster_fact(Os)
    gpus = cluster_fact(Gpus) if rec.uses_gpus else {}
    keys = {}
    for peer, settings in declared.items():
        if peer not in oses:
            continue  # not reached this run
        try:
            spec = rec.make(settings, oses[peer], gpus.get(peer, []))
        except ValueError:
            continue  # that node's own operation reports its error
        if spec is not None:
            keys[peer] = spec.key
    if run.facts is None or not run.facts.discovering:  # a discovery pass may not have every fact yet
        memo[slot] = keys
    return keys


def placement(name: str, slot: str, settings: RecipeSettings | None) -> Placement:
    """Work out, from every node's settings and facts, who builds this host's build and who needs it."""
    rec = context_of(ctx_state.get()).recipes[name]
    if settings is None:
        return Placement(None)
    own = rec.make(settings, fact(Os), fact(Gpus) if rec.uses_gpus else [])
    if own is None:
        return Placement(None)
    keys = _peer_keys(rec, slot)
    installed = cluster_fact(BuildInstalled, prefix=own.prefix, dirname=own.dirname)
    group = [name for name in run_hosts(ctx_state.get()) if name == host.name or keys.get(name) == own.key]
    needing = tuple(peer for peer in group if peer not in installed or installed[peer].key != own.key)
    return Placement(own, group[0], needing, tuple(group))


def _check_source(spec: BuildSpec) -> None:
    """Fail before building when the builder cannot reach the source (a clear error, not a build log)."""
    source = spec.source
    probes = {
        "git": f"git ls-remote --exit-code {shlex.quote(source.url)} {shlex.quote(source.ref)} >/dev/null || git "
        f"ls-remote {shlex.quote(source.url)} >/dev/null",
        "url": f"curl -fsSIL --max-time 30 -o /dev/null {shlex.quote(source.url)}",
    }
    if source.kind not in probes:
        return
    ok, why = fact(CommandWorks, probe=probes[source.kind])
    if not ok:
        raise ValueError(
            f"{host.name} cannot fetch {source.url}{' ' + source.ref if source.ref else ''} ({why}): "
            f"fix {source.setting or 'the source'}, point it at a mirror the nodes reach, or use a local tarball (kind "
            "file) for air-gapped clusters"
        )


def _source_uploads(spec: BuildSpec) -> Iterator:
    source = spec.source
    if source.kind == "file":
        yield FileUploadCommand(source.path, f"{spec.workdir}/{SOURCE_TARBALL}")
    for name, text in source.files:
        yield FileUploadCommand(BytesIO(text.encode("utf-8")), f"{spec.workdir}/src/{name}")


@operation()
def artifact_built(recipe: str, slot: str, settings: RecipeSettings | None):
    """On the builder of each distinct build that some node still needs: fetch, build, pack, checksum."""
    place = placement(recipe, slot, settings)
    spec = place.spec
    if spec is None:
        host.noop("nothing to build on this node")
        return
    if host.name != place.builder:
        host.noop(f"{spec.name} {spec.version} is built on {place.builder}")
        return
    if not place.needing:
        host.noop(f"{spec.name} {spec.version} is installed on every node that needs it")
        return
    if store.cached(spec.archive):
        host.noop(f"{spec.archive} is in the control machine's cache")
        return
    if fact(KeptArchive, archive=spec.archive):
        host.noop(f"{spec.archive} was built here before")
        return
    _check_source(spec)
    work = shlex.quote(spec.workdir)
    yield StringCommand(f"rm -rf {work}/src && mkdir -p {work}/src")
    yield from _source_uploads(spec)
    # A build may rightly run for long (NCCL for every GPU architecture): four command deadlines.
    ssh = context_of(ctx_state.get()).ssh.get(host.name)
    script = build_script(spec)
    yield StringCommand(script, _timeout=ssh.command_timeout * BUILD_DEADLINES) if ssh else StringCommand(script)


def _commit(state, host, archive: str) -> bool:
    """Runs on the control machine after the download: keep the archive only if its checksum holds."""
    problem = store.commit(archive)
    if problem:
        context_of(state).notes.warnings.setdefault(host.name, []).append(problem)
    return problem is None


@operation()
def artifact_fetched(recipe: str, slot: str, settings: RecipeSettings | None):
    """On the builder: bring the archive into the control machine's cache when other nodes need it."""
    place = placement(recipe, slot, settings)
    spec = place.spec
    if spec is None or host.name != place.builder:
        host.noop("nothing to fetch from this node")
        return
    if not [peer for peer in place.needing if peer != host.name]:
        host.noop(f"no other node needs {spec.archive}")
        return
    if store.cached(spec.archive):
        host.noop(f"{spec.archive} is in the control machine's cache")
        return
    local = store.local_path(spec.archive)
    local.parent.mkdir(parents=True, exist_ok=True)
    yield FileDownloadCommand(spec.remote_archive, f"{local}{store.PART}")
    yield FileDownloadCommand(f"{spec.remote_archive}.sha256", f"{local}.sha256{store.PART}")
    yield FunctionCommand(_commit, (spec.archive,), {})


@dataclass(frozen=True)
class Broadcast:
    """Slurm's broadcast of one archive: `sender` holds it, `nodes` receive it in one allocation."""

    archive: str
    sender: str
    nodes: tuple[str, ...]

    def shown(self) -> str:
        return f"send {self.archive} to {', '.join(self.nodes)} by Slurm's sbcast (each checks its sha256)"


def _sbcast_item(archive: str) -> str:
    """The Board's item for "a node got `archive` by sbcast" (its own copy is checked after)."""
    return f"{archive} by sbcast"


@dataclass
class Shipment:
    """How one node receives an archive: its sources in order (builds/fanout.py, after Slurm's
    broadcast where there is one), the nodes that held it before shipping began, and, once
    tried, why it could not be received."""

    spec: BuildSpec
    sources: tuple[str, ...]
    holders: tuple[str, ...]
    broadcast: Broadcast | None = None
    problem: str = ""

    def shown(self) -> str:
        sender = self.broadcast.sender if self.broadcast else ""
        names = [
            f"Slurm's sbcast from {sender}" if source == SBCAST else source or "the control machine"
            for source in self.sources
        ]
        return f"receive {self.spec.archive} from {', else '.join(names)} (sha256 checked)"


def _stopped(state, host) -> bool:
    """Whether Ctrl-C's grace ran out for this host (engine/interrupt.py closed its connection)."""
    end = context_of(state).command_ends.get(host.name)
    return end is not None and end.interrupted


def _await(state, host, board: Board, archive: str, source: str, patience: float) -> bool | None:
    """Whether `source` comes to hold `archive` (None: not within `patience` s), in slices so that
    a Ctrl-C whose grace ran out stops the wait as it stops a running command."""
    deadline = time.monotonic() + patience
    while True:
        left = deadline - time.monotonic()
        holds = board.wait(archive, source, max(0.0, min(1.0, left)))
        if holds is not None or left <= 0 or _stopped(state, host):
            return holds


def _receive(state, host, shipment: Shipment) -> bool:  # pyinfra passes these two by their names
    """Runs on the control machine in the receiving node's turn: try each source in order (a node
    once it holds a checked copy, or the control machine's cache) until this node keeps a copy
    whose sha256 is the archive's, then tell the nodes waiting for this one. A failure is told by
    the command that follows, with its reason; only Ctrl-C's stop fails the call itself. The host
    counts as running a command the whole time, so Ctrl-C's grace covers the waits too."""
    context = context_of(state)
    board, inventory, spec = context.board, context.inventory, shipment.spec
    assert board is not None and inventory is not None
    local = store.local_path(spec.archive)
    sha = Path(f"{local}.sha256").read_text().split()[0]
    patience = wait_s(local.stat().st_size)
    sudo = privileges(host)
    tried: list[str] = []
    try:
        for source in shipment.sources:
            context.busy.add(host.name)  # again: each command run here takes it off when it ends
            if _stopped(state, host):
                board.mark(spec.archive, host.name, False)
                return False
            name = source or "the control machine"
            if source == SBCAST:
                assert shipment.broadcast is not None  # SBCAST is a source only where there is one
                name = f"Slurm's sbcast from {shipment.broadcast.sender}"
                sent = _await(state, host, board, _sbcast_item(spec.archive), host.name, patience + SLURM_GRANT_S)
                if not sent:
                    tried.append("Slurm's sbcast did not reach it")
                    continue
                script = receive_script(spec, sha, sent_by=name, suffix=SBCAST_SUFFIX)
                ok, output = host.run_shell_command(StringCommand(script), **sudo)
            elif source == CONTROL:
                # a fresh node has no archive folder yet, and the upload (SFTP, or cp under sudo)
                # creates no folders
                made, _ = host.run_shell_command(StringCommand(f"mkdir -p {ARTIFACT_DIR}"), **sudo)
                sent = made and host.put_file(str(local), f"{spec.remote_archive}.part", **sudo)
                ok, output = (
                    host.run_shell_command(StringCommand(receive_script(spec, sha)), **sudo) if sent else (False, None)
                )
            else:
                holds = (
                    True if source in shipment.holders else _await(state, host, board, spec.archive, source, patience)
                )
                if not holds:
                    why = "could not get it" if holds is False else f"did not hold it within {patience:.0f} s"
                    tried.append(f"{source} {why}")
                    continue
                address = inventory.hosts[source].address
                script = receive_script(spec, sha, source, address, inventory.ssh_trust.user, int(patience))
                ok, output = host.run_shell_command(StringCommand(script), **sudo)
            if ok:
                board.mark(spec.archive, host.name, True)
                if tried:  # a damaged or missing copy elsewhere is worth a look
                    warn(f"{spec.archive}: {'; '.join(tried)}; received it from {name}")
                return True
            said = [line for line in (output.stderr_lines if output else []) if line.startswith("rdmaprov: ")]
            tried.append(said[-1][len("rdmaprov: ") :] if said else f"the copy from {name} failed")
    finally:
        context.busy.discard(host.name)
    board.mark(spec.archive, host.name, False)
    shipment.problem = f"{spec.archive} could not be received: {'; '.join(tried)}"
    return True


@dataclass(frozen=True)
class _Plan:
    """How one archive travels this run: who holds it, each receiver's route, Slurm's part."""

    holders: tuple[str, ...]
    routes: dict[str, tuple[str, ...]]
    broadcast: Broadcast | None


def _plan(spec: BuildSpec, place: Placement) -> _Plan:
    """Holders are the nodes keeping a copy that matches the control machine's (in a check, also
    the builder that is yet to build); the nodes to receive it are those that need the build,
    reached this run, and hold no copy. Worked out once per run and archive (each node asks)."""
    state = ctx_state.get()
    kept = cluster_fact(KeptArchive, archive=spec.archive)  # every reached node: its copy's sha256, or ""
    local = Path(f"{store.local_path(spec.archive)}.sha256")
    reference = local.read_text().split()[0] if local.is_file() else None
    to_build = not store.cached(spec.archive)

    def work_out() -> _Plan:
        holders = [
            name
            for name in run_hosts(state)
            if name in kept and (kept[name] and kept[name] in (reference, None) or name == place.builder and to_build)
        ]
        targets = [name for name in place.needing if name in kept and name not in holders]
        senders = [name for name in holders if name in place.group]  # each runs this build's steps
        return _Plan(tuple(holders), routes(holders, targets), _broadcast_plan(spec.archive, senders, targets))

    return once_per_run(f"shipping {spec.archive} {reference} {to_build}", kept, work_out)


def _shipment(spec: BuildSpec, place: Placement) -> Shipment:
    """This node's sources: Slurm's broadcast where it is one of its nodes, then the SSH tree."""
    plan = _plan(spec, place)
    sources = plan.routes.get(host.name, (CONTROL,))
    if plan.broadcast and host.name in plan.broadcast.nodes:
        sources = (SBCAST, *sources)
    return Shipment(spec, sources, plan.holders, plan.broadcast)


def _broadcast_plan(archive: str, senders: list[str], targets: list[str]) -> Broadcast | None:
    """Where the inventory declares Slurm and the first node that holds the archive and wants the
    same build (so it runs artifact_broadcast for it) can use Slurm: the targets that are Slurm
    nodes get it by sbcast from there (the others, and any Slurm does not grant, by the SSH tree)."""
    state = ctx_state.get()
    inventory = context_of(state).inventory
    slurm = inventory.slurm if inventory is not None else None
    if slurm is None or not senders:
        return None
    compute = set(slurm.compute_hosts(run_hosts(state)))
    nodes = tuple(name for name in targets if name in compute)
    if not nodes:
        return None
    ready, _ = cluster_fact(CommandWorks, probe=SLURM_READY).get(senders[0], (False, ""))
    return Broadcast(archive, senders[0], nodes) if ready else None


def _last_said(output: CommandOutput | None) -> str:
    """The last line a failed command wrote to stderr (Slurm's reason)."""
    lines = output.stderr_lines if output else []
    return lines[-1].strip() if lines else "no output"


def _broadcast(state, host, spec: BuildSpec, broadcast: Broadcast) -> bool:  # pyinfra passes these two by name
    """Runs on the control machine in the sender's turn: ask Slurm which nodes it can grant now
    (slurm/grant.py), sbcast the archive to them in one allocation per partition, and tell every
    receiver (the Board) whether its copy came, whatever happens; the others take the SSH tree's
    copy, and the sender's result says which and why."""
    context = context_of(state)
    board, inventory = context.board, context.inventory
    assert board is not None and inventory is not None and inventory.slurm is not None
    by_name = {inventory.slurm.node_name(node): node for node in broadcast.nodes}
    sent: list[str] = []
    refused: dict[str, str] = {}
    context.busy.add(host.name)
    try:
        if _stopped(state, host):
            return False
        sudo = privileges(host)
        ok, output = host.run_shell_command(StringCommand("scontrol -o show node"), **sudo)
        if ok:
            groups, refused = grant_groups(parse_scontrol_nodes("\n".join(output.stdout_lines)), list(by_name))
        else:
            groups, refused = {}, dict.fromkeys(by_name, _last_said(output))
        local = store.local_path(spec.archive)
        minutes = 1 + int(wait_s(local.stat().st_size if local.is_file() else 0) // 60)
        for partition, names in groups.items():
            script = broadcast_script(spec, names, partition, minutes, f"rdmaprov-ship-{spec.key[:12]}", SLURM_GRANT_S)
            ok, output = host.run_shell_command(StringCommand(script), **sudo)
            if ok:
                sent += names
            else:
                refused.update(dict.fromkeys(names, _last_said(output)))
    finally:
        context.busy.discard(host.name)
        for name, node in by_name.items():
            board.mark(_sbcast_item(spec.archive), node, name in sent)
    if refused:
        reasons: dict[str, list[str]] = {}
        for name, why in refused.items():
            reasons.setdefault(why, []).append(by_name[name])
        shown = "; ".join(f"{', '.join(nodes)}: {why}" for why, nodes in reasons.items())
        warn(f"Slurm did not broadcast {spec.archive} to {shown}; they took it over SSH")
    return True


@operation()
def artifact_broadcast(recipe: str, slot: str, settings: RecipeSettings | None):
    """On the node chosen to send each archive, where the inventory declares Slurm: Slurm's
    broadcast to the Slurm nodes that lack it. Before artifact_installed, so that receivers find
    their copy there (pyinfra finishes an operation on every host, in every batch, first)."""
    place = placement(recipe, slot, settings)
    spec = place.spec
    context = context_of(ctx_state.get())
    slurm = context.inventory.slurm if context.inventory is not None else None
    if spec is None or slurm is None or not _fans_out() or not [n for n in place.needing if n != host.name]:
        host.noop("nothing to broadcast from this node")
        return
    broadcast = _plan(spec, place).broadcast
    if broadcast is None or broadcast.sender != host.name:
        host.noop(f"{spec.archive} is not broadcast from this node")
        return
    yield FunctionCommand(_broadcast, (spec, broadcast), {})


def _fans_out() -> bool:
    """Whether nodes pass archives to each other: under rdmaprov (not plain pyinfra), with the
    cluster's SSH trust, which gives every node a key the others accept and their pinned host keys."""
    context = context_of(ctx_state.get())
    return context.board is not None and context.inventory is not None and context.inventory.ssh_trust.enabled


@operation()
def artifact_installed(recipe: str, slot: str, settings: RecipeSettings | None):
    """On every node: receive the archive when it has none (from another node, sha256 checked at
    every hop; builds/fanout.py), unpack it under <prefix>/<version>-<id> and make it current."""
    place = placement(recipe, slot, settings)
    spec = place.spec
    if spec is None:
        host.noop("nothing to install on this node")
        return
    found = fact(BuildInstalled, prefix=spec.prefix, dirname=spec.dirname)
    if found.key == spec.key:
        if found.current == spec.dirname:
            host.noop(f"{spec.name} {spec.version} installed and current")
            return
        yield StringCommand(switch_current(spec))
        return
    # The builder keeps its archive; in a check, one it has yet to build counts as kept too.
    kept = bool(fact(KeptArchive, archive=spec.archive)) or (
        host.name == place.builder and not store.cached(spec.archive)
    )
    if not kept:
        if executing() and not store.cached(spec.archive):
            raise ValueError(
                f"{spec.name} {spec.version} is not available to install: its build on {place.builder} failed or did "
                f"not run (see {place.builder}'s result)"
            )
        if _fans_out():
            shipment = _shipment(spec, place)
            yield FunctionCommand(_receive, (shipment,), {})
            if shipment.problem:  # known once _receive ran: pyinfra runs each command as it comes
                yield StringCommand(fail_command(shipment.problem, "check those nodes' disks and SSH, then rerun"))
                return
        else:
            local = str(store.local_path(spec.archive))
            yield StringCommand(f"mkdir -p {ARTIFACT_DIR}")
            yield FileUploadCommand(local, spec.remote_archive)
            yield FileUploadCommand(f"{local}.sha256", f"{spec.remote_archive}.sha256")
    # Every node keeps its copy: it may pass it on, now or to a node that joins later.
    yield StringCommand(install_script(spec, keep_archive=True))
