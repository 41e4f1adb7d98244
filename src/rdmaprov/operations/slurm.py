"""Slurm's shared state: the munge key and slurm.conf.

The munge key: made once on the Slurm controller, copied from there to every other Slurm host.

Where the key is made: on the controller, by munge itself (Debian's package creates one when it is
installed; `mungekey` here when there is none), never on the control machine. The control machine
(a laptop, a CI runner) then holds no cluster secret on disk to leak or to lose, a new control
machine needs no state to carry on, and a site that already has a controller keeps its key.

How it travels: only as bytes in this process's memory during an apply. Facts read the key's
sha256, never the key; a node whose digest differs from the controller's gets the key by SFTP,
read on the controller from a copy in a fresh directory only the login user can enter (mode 700,
the copy 400) and written on the node the same way, then installed as munge:munge 0400 and checked
against its sha256. It never appears in a command line, a command's output, a diff, the run's
JSON or a log; `check` only says that it would be copied.
"""

from __future__ import annotations

import hashlib
import re
import shlex
from dataclasses import dataclass
from io import BytesIO
from weakref import WeakKeyDictionary

from gevent.lock import Semaphore
from pyinfra import host
from pyinfra.api import FunctionCommand, State, StringCommand
from pyinfra.context import ctx_host

from rdmaprov.engine.cluster import cluster_fact
from rdmaprov.engine.desired import operation
from rdmaprov.engine.factcache import fact
from rdmaprov.engine.notes import warn
from rdmaprov.engine.pyinfra_state import privileges
from rdmaprov.engine.run_context import context_of
from rdmaprov.facts.files import ManagedFile
from rdmaprov.facts.slurm import MUNGE_KEY, MungeKey, SlurmHardware, SlurmRelease
from rdmaprov.inventory.slurm import SlurmConfig
from rdmaprov.operations.files import file_commands
from rdmaprov.parsers.slurm import conf_node_lines, conf_value
from rdmaprov.parsers.slurm_release import SlurmVersion
from rdmaprov.slurm.conf import SLURM_CONF, SlurmNodeLine, render_slurm_conf

KEY = shlex.quote(MUNGE_KEY)
_INSTALL = f"chown munge:munge {KEY} && chmod 400 {KEY}"
# Per run: the controller's key, read once however many nodes need it (a lock, so only once).
_KEYS: WeakKeyDictionary[State, bytes] = WeakKeyDictionary()
_LOCK = Semaphore()


@operation()
def munge_key_created(controller: bool):
    """On the controller: a munge key (made by munge's own tool when there is none), munge:munge 0400."""
    if not controller:
        host.noop("not the Slurm controller")
        return
    key = fact(MungeKey)
    if key.sha256 is None:
        # The package's postinst may have made one since the fact was read: make it only if absent.
        yield StringCommand(
            f"if [ ! -s {KEY} ]; then mungekey --create --keyfile={KEY} && {_INSTALL} && systemctl restart munge; fi"
        )
    elif (key.mode, key.user, key.group) != ("400", "munge", "munge"):
        yield StringCommand(_INSTALL)
    else:
        host.noop(f"munge key present (sha256 {key.sha256[:12]}…)")


def _run(target, command: str, sudo: bool) -> str:
    """A command on `target` (another host than the operation's, hence its own host context);
    its stdout, or ValueError with its stderr."""
    with ctx_host.use(target):
        ok, output = target.run_shell_command(StringCommand(command), **(privileges(target) if sudo else {}))
    if not ok:
        raise ValueError(f"{command.split()[0]} on {target.name}: {output.stderr.strip() or 'failed'}")
    return "\n".join(output.stdout_lines).strip()


def _private_dir(target) -> str:
    """A fresh directory on `target` only the login user can enter (mktemp -d: mode 700)."""
    return _run(target, "mktemp -d /tmp/rdmaprov-munge.XXXXXXXX", sudo=False)


def _read_key(state: State, controller: str) -> bytes:
    """The controller's key, over SFTP from a private copy (removed at once)."""
    with _LOCK:
        if state in _KEYS:
            return _KEYS[state]
        source = state.inventory.get_host(controller)
        if source not in state.active_hosts:
            raise ValueError(f"the Slurm controller {controller} is not connected in this run")
        folder = _private_dir(source)
        user = shlex.quote(str(source.data.get("ssh_user") or "root"))
        try:
            _run(source, f"install -m 400 -o {user} {KEY} {shlex.quote(folder)}/key", sudo=True)
            buffer = BytesIO()
            with ctx_host.use(source):
                if not source.get_file(f"{folder}/key", buffer):
                    raise ValueError(f"could not read the munge key from {controller}")
        finally:
            _run(source, f"rm -rf {shlex.quote(folder)}", sudo=True)
        data = buffer.getvalue()
        if not data:
            raise ValueError(f"{controller} has no munge key yet ({MUNGE_KEY} is empty)")
        _KEYS[state] = data
        return data


def _copy_key(state: State, host, controller: str) -> bool:
    """Runs on the control machine: the controller's key onto `host`, installed and checked.
    pyinfra hands a callback its state and host only when its parameters bear those two names."""
    try:
        data = _read_key(state, controller)
        folder = _private_dir(host)
        staged = shlex.quote(f"{folder}/key")
        try:
            if not host.put_file(BytesIO(data), f"{folder}/key"):
                raise ValueError("the upload failed")
            digest = hashlib.sha256(data).hexdigest()
            _run(
                host,
                f"echo {shlex.quote(digest + '  ' + folder + '/key')} | sha256sum -c --quiet - && "
                f"install -m 400 -o munge -g munge {staged} {KEY}.rdmaprov-tmp && mv -f {KEY}.rdmaprov-tmp {KEY} && "
                "systemctl restart munge",
                sudo=True,
            )
        finally:
            _run(host, f"rm -rf {shlex.quote(folder)}", sudo=True)
    except (ValueError, OSError) as exc:
        message = f"munge key not copied from {controller}: {exc}"
        context_of(state).notes.warnings.setdefault(host.name, []).append(message)
        return False
    return True


@operation()
def munge_key_shared(controller: str | None, member: bool):
    """On a Slurm host other than the controller: the controller's munge key, munge:munge 0400."""
    if not member or controller is None or controller == host.name:
        host.noop("the key's source, or not a Slurm host")
        return
    keys = cluster_fact(MungeKey)
    if controller not in keys:
        warn(f"munge key: the controller {controller} is not in this run; {host.name}'s key is left as it is")
        host.noop("controller not in this run")
        return
    source, mine = keys[controller], fact(MungeKey)
    if source.sha256 is not None and mine.sha256 == source.sha256:
        if (mine.mode, mine.user, mine.group) != ("400", "munge", "munge"):
            yield StringCommand(_INSTALL)
        else:
            host.noop(f"same munge key as {controller}")
        return
    # Different, or the controller's is made earlier in this very apply.
    yield FunctionCommand(_copy_key, (controller,), {})


@dataclass(frozen=True)
class SlurmMember:
    """One compute node as slurm.conf needs it: inventory host, Slurm name, address, GPU count."""

    host: str
    name: str
    address: str
    gpus: int


@dataclass(frozen=True)
class ConfRelease:
    """The Slurm release slurm.conf is written for, and what it was decided from."""

    written_for: SlurmVersion | None  # None: no key a release might refuse
    oldest_known: SlurmVersion | None  # the oldest release among the hosts whose release is known
    unknown: tuple[str, ...]  # Slurm hosts whose release this run does not know


def conf_release(slurm: SlurmConfig, hosts: list[str]) -> ConfRelease:
    """The release of the oldest Slurm daemon (installed, else what its install brings: slurm.conf
    is one file for all, so it holds no key the oldest daemon would refuse). Where some host's
    release is not known this run (a --limit run, a node down, no Slurm package to be had), the
    file's own choice stands: written for the oldest known release where the file already holds
    HealthCheckTimeout, else for none. One absent node must not take the key out of every host's
    file, nor restart every daemon for it; a known older release still does."""
    found = cluster_fact(SlurmRelease)
    daemons = slurm.daemon_hosts(hosts)
    versions = [found[h].version for h in daemons if h in found]
    oldest = min((v for v in versions if v is not None), default=None)
    unknown = tuple(h for h in daemons if h not in found or found[h].version is None)
    has_key = conf_value(fact(ManagedFile, path=SLURM_CONF).text, "HealthCheckTimeout") is not None
    return ConfRelease(oldest if not unknown or has_key else None, oldest, unknown)


def _release_notes(slurm: SlurmConfig, release: ConfRelease) -> None:
    """Warnings for what the release kept out of slurm.conf."""
    check = slurm.health_check
    if release.unknown and release.written_for is None and check.timing(release.oldest_known).timeout_s is not None:
        warn(
            f"slurm.conf: the Slurm release of {', '.join(release.unknown)} is not known this run; written with no "
            "key an older release would refuse (HealthCheckTimeout waits until every Slurm host is known)"
        )
    version = release.written_for
    if check.timeout_s is not None and version is not None and check.timing(version).timeout_s is None:
        warn(
            f"slurm.conf: health_check.timeout_s {check.timeout_s} is not written: Slurm {version} has no "
            f"HealthCheckTimeout (26.05 and later) and kills the check at {check.timing(version).kill_s} s"
        )


def _controller_from_file(text: str) -> tuple[str, str] | None:
    """SlurmctldHost=HOST(ADDRESS) of the current file, for a run that did not reach the controller."""
    value = conf_value(text, "SlurmctldHost")
    match = re.match(r"([^()]+)\(([^()]+)\)$", value or "")
    return (match.group(1), match.group(2)) if match else None


@operation()
def slurm_conf(
    member: bool,
    slurm: SlurmConfig | None,
    controller: str | None,
    controller_address: str,
    nodes: list[SlurmMember],
    after_change: str,
):
    """/etc/slurm/slurm.conf, the same on every Slurm host: the nodes' hardware read in this run
    (a node not reached keeps its line as the file has it), the inventory's partitions, the node
    check as HealthCheckProgram."""
    if not member or slurm is None or controller is None:
        host.noop("not a Slurm host of this inventory")
        return
    hardware = cluster_fact(SlurmHardware)
    current = fact(ManagedFile, path=SLURM_CONF)
    kept = conf_node_lines(current.text)
    lines, unknown = [], []
    for node in nodes:
        found = hardware.get(node.host)
        if found is None and node.name not in kept:
            unknown.append(node.host)
        elif found is None:
            warn(f"slurm.conf: {node.host} was not reached this run; its node line is kept as the file has it")
        lines.append(SlurmNodeLine(node.name, node.address, found, node.gpus, kept.get(node.name)))
    ctl = hardware.get(controller)
    where = (ctl.hostname, controller_address) if ctl else _controller_from_file(current.text)
    if where is None:
        unknown.insert(0, controller)
    if unknown:
        warn(f"slurm.conf left as it is: the hardware of {', '.join(unknown)} is not known (not reached this run)")
        host.noop("slurm.conf: not every node is known")
        return
    assert where is not None
    by_host = {n.host: n.name for n in nodes}
    partitions = [(p.name, [by_host[h] for h in p.hosts], p.default, p.max_time) for p in slurm.partitions]
    release = conf_release(slurm, [n.host for n in nodes])
    _release_notes(slurm, release)
    content = render_slurm_conf(slurm, where, lines, partitions, version=release.written_for)
    yield from file_commands(SLURM_CONF, current, content, "644", "root", "root", after_change)
