"""Run deploys on hosts through pyinfra's API: connect, plan in parallel, execute or only check.

Why not pyinfra's `add_deploy`: it plans hosts one after another, which over SSH costs a full
round trip per fact per host in sequence. We plan each host in its own greenlet instead.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from io import BytesIO
from pathlib import Path
from typing import Protocol

import gevent
from pyinfra.api import FileDownloadCommand, FileUploadCommand, FunctionCommand, State
from pyinfra.api.connect import disconnect_all
from pyinfra.api.exceptions import PyinfraError
from pyinfra.api.operations import run_ops
from pyinfra.api.state import BaseStateCallback, StateStage
from pyinfra.context import ctx_host, ctx_state

from rdmaprov.engine.applied import RECORD_PATH, AppliedRecord, AppliedRecordFact, classify, merged_record, write_record
from rdmaprov.engine.board import Board
from rdmaprov.engine.connection import answered_again, explain
from rdmaprov.engine.context import NodeContext
from rdmaprov.engine.factcache import FactCache, prefetch, read_fact
from rdmaprov.engine.interrupt import Interrupt
from rdmaprov.engine.pyinfra_state import build_state, connect
from rdmaprov.engine.results import HostResult, OpResult, OpStatus, RunResult
from rdmaprov.engine.run_context import EngineSettings, context_of
from rdmaprov.engine.shards import Alone, Lockstep, ShardLink, run_sharded, shard_count
from rdmaprov.inventory.model import Inventory


class Deploy(Protocol):
    """What pyinfra's @deploy makes of `def name(ctx: NodeContext)` (a PyinfraOperation), as the
    engine uses it. pyinfra types the call with its global arguments (_sudo…) first, so the
    context goes by keyword."""

    @property
    def _inner(self) -> Callable[[NodeContext], object]: ...  # the function @deploy wrapped

    def __call__(self, *, ctx: NodeContext, _if: Callable[[], bool] | None = None) -> object: ...


def deploy_name(deploy: Deploy) -> str:
    """The deploy's function name (STACK's keys, --tags, RunOptions.host_deploys)."""
    return deploy._inner.__name__


class Observer(Protocol):
    """Receives progress while a run goes on (the CLI draws it; tests may record it)."""

    def phase(self, name: str, total: int) -> None: ...
    def host_done(self, host: str, phase: str, ok: bool, detail: str = "") -> None: ...
    def op_done(self, host: str, op: str, status: str) -> None: ...
    def note(self, text: str) -> None: ...  # a message for the operator while the run goes on


class NullObserver:
    def phase(self, name: str, total: int) -> None:
        pass

    def host_done(self, host: str, phase: str, ok: bool, detail: str = "") -> None:
        pass

    def op_done(self, host: str, op: str, status: str) -> None:
        pass

    def note(self, text: str) -> None:
        pass


@dataclass
class RunOptions:
    command: str  # "apply" or "check"
    hosts: list[str]
    deploys: list[Deploy]
    # Hosts that run only some of `deploys`, by name (bootstrap: existing nodes only renew SSH
    # trust). The others are still planned there, skipped: pyinfra's API matches operations
    # across hosts by position, so every host must plan the same sequence.
    host_deploys: dict[str, set[str]] = field(default_factory=dict)

    def runs(self, host: str, deploy: Deploy) -> bool:
        return host not in self.host_deploys or deploy_name(deploy) in self.host_deploys[host]


def _never() -> bool:
    """The `_if` of a deploy planned on a host but not run there."""
    return False


def _skipped(state: State, host, op_hash: str) -> bool:
    condition = state.get_op_data_for_host(host, op_hash).global_arguments.get("_if")
    return condition is _never or (isinstance(condition, list) and _never in condition)


@dataclass
class _Plan:
    """What planning learnt per host: each operation's record key and deploy, and the node's last record."""

    keys: dict[tuple[str, str], str] = field(default_factory=dict)
    deploys: dict[tuple[str, str], str] = field(default_factory=dict)
    records: dict[str, AppliedRecord] = field(default_factory=dict)
    # the keys already given on each host: looking them up in `keys` cost every host's keys per host
    taken: dict[str, set[str]] = field(default_factory=dict)


class _Callbacks(BaseStateCallback):
    """Report finished operations as they happen."""

    def __init__(self, observer: Observer, op_name: Callable[[str], str]) -> None:
        self.observer = observer
        self.op_name = op_name

    def operation_host_success(self, state: State, host, op_hash, retry_count: int = 0) -> None:  # type: ignore[override]
        # pyinfra fires this before the operation's result is recorded: changed-or-not comes later.
        self.observer.op_done(host.name, self.op_name(op_hash), "done")

    def operation_host_error(self, state: State, host, op_hash, retry_count: int = 0, max_retries: int = 0) -> None:  # type: ignore[override]
        self.observer.op_done(host.name, self.op_name(op_hash), "failed")


def describe(command) -> str:
    """A command as results show it; an upload by destination, size and content hash."""
    if isinstance(command, FileDownloadCommand):
        return f"download {command.src} to {command.dest} (control machine)"
    if isinstance(command, FunctionCommand):
        # An argument that says what the call does in words (operations/builds.py's Shipment).
        shown = [arg.shown() for arg in command.args if callable(getattr(arg, "shown", None))]
        if shown:
            return shown[0]
        return f"{command.function.__name__.strip('_')} {' '.join(map(str, command.args))} (control machine)"
    if isinstance(command, FileUploadCommand):
        source = command.src
        if isinstance(source, BytesIO):
            data = source.getvalue()
            return f"upload {command.dest} ({len(data)} bytes, sha256 {hashlib.sha256(data).hexdigest()[:16]})"
        return f"upload {command.dest} from {source}"
    return str(command)


def _op_name(state: State, op_hash: str) -> str:
    return " / ".join(sorted(state.op_meta[op_hash].names))


def _each_host(state: State, hosts: list, work: Callable) -> None:
    """Run work(host) for every host at once, each in its own greenlet.

    pyinfra's state context is process-wide and its host context per greenlet: the state is set
    once around all greenlets, or the first to finish would unset it under the others.
    """
    with ctx_state.use(state):
        gevent.joinall([gevent.spawn(work, host) for host in hosts])


def _plan(
    state: State,
    inventory: Inventory,
    options: RunOptions,
    results: dict[str, HostResult],
    observer: Observer,
    peers: ShardLink | Alone,
    reached: int,
) -> tuple[_Plan, int]:
    """Plan every connected host at once; a host whose planning raises is failed with the reason.
    `reached` counts the connected hosts of the whole run; returns the plan and how many hosts of
    the whole run are still active."""
    plan = _Plan()
    context = context_of(state)

    def plan_one(host) -> None:
        ctx = NodeContext(host=inventory.hosts[host.name], inventory=inventory, selected=options.hosts)
        try:
            with ctx_host.use(host):
                for deploy in options.deploys:
                    first = len(host.op_hash_order)
                    ctx.planned_only = not options.runs(host.name, deploy)
                    try:
                        if ctx.planned_only:
                            deploy(ctx=ctx, _if=_never)
                        else:
                            deploy(ctx=ctx)
                    finally:
                        _name_ops(state, host, deploy_name(deploy), host.op_hash_order[first:], plan)
        except Exception as exc:  # a fact or deploy error fails this host only
            error = f"planning failed: {_reason(exc)}"
            results[host.name].status = "failed"
            results[host.name].error = error
            observer.host_done(host.name, "plan", False, error)
        else:
            observer.host_done(host.name, "plan", True)
        finally:
            results[host.name].warnings.extend(ctx.warnings)

    hosts = list(state.inventory.get_active_hosts())
    if reached:
        observer.phase("plan", reached)
    _each_host(state, hosts, plan_one)
    for host in hosts:
        if results[host.name].status == "failed":
            state.active_hosts.discard(host)
            state.failed_hosts.add(host)
    hosts = list(state.inventory.get_active_hosts())
    # Build placement needs every host's declared builds, whichever shard planned it.
    planned = peers.sync(("planned", None), (context.builds, len(hosts)))
    for builds, _ in planned:
        for slot, by_host in builds.items():
            context.builds.setdefault(slot, {}).update(by_host)
    prefetch(state, hosts, lambda host: _discover(state, host), seed={h.name: [(AppliedRecordFact, {})] for h in hosts})
    context.notes.clear()

    def read_record(host) -> None:
        with ctx_host.use(host):
            try:
                record = read_fact(state, host, AppliedRecordFact, {})
            except Exception:
                record = AppliedRecord()  # unreadable: everything counts as new, nothing fails
        plan.records[host.name] = record
        results[host.name].last_applied = record.applied_at

    _each_host(state, hosts, read_record)
    return plan, sum(active for _, active in planned)


def _discover(state: State, host) -> None:
    """Evaluate each planned operation until it asks for a fact not read yet (see factcache)."""
    with ctx_host.use(host):
        for op_hash in host.op_hash_order:
            if _skipped(state, host, op_hash):
                continue
            try:
                for _ in state.get_op_data_for_host(host, op_hash).command_generator():
                    pass
            except Exception:  # FactNeeded, or an error the real evaluation will report
                continue


def _name_ops(state: State, host, deploy: str, op_hashes: list[str], plan: _Plan) -> None:
    """Note each operation's deploy, and key it by its name (numbered when a name repeats)."""
    taken = plan.taken.setdefault(host.name, set())
    for op_hash in op_hashes:
        name, number = _op_name(state, op_hash), 1
        while (key := f"{name} #{number}" if number > 1 else name) in taken:
            number += 1
        taken.add(key)
        plan.keys[(host.name, op_hash)] = key
        plan.deploys[(host.name, op_hash)] = deploy


def _reason(exc: BaseException) -> str:
    lines = [line for line in str(exc).splitlines() if line.strip()]
    return lines[0].strip() if lines else type(exc).__name__


def _check_ops(state: State, plan: _Plan, results: dict[str, HostResult], observer: Observer) -> None:
    """Plan-only: run each operation's generator once to see the commands it would run, and
    classify each would-be change against the node's applied-state record."""
    notes = context_of(state).notes

    def check_host(host) -> None:
        result = results[host.name]
        record = plan.records.get(host.name, AppliedRecord())
        with ctx_host.use(host):
            for op_hash in host.op_hash_order:
                if _skipped(state, host, op_hash):
                    continue
                name = _op_name(state, op_hash)
                op_data = state.get_op_data_for_host(host, op_hash)
                try:
                    commands = [describe(c) for c in op_data.command_generator()]
                except Exception as exc:
                    result.ops.append(OpResult(name=name, status="failed", stderr=[_reason(exc)]))
                    observer.op_done(host.name, name, "failed")
                    result.status = "failed"
                    result.error = f"{name}: {_reason(exc)}"
                    return
                status: OpStatus = "would_change" if commands else "unchanged"
                diff = notes.diffs.get((host.name, op_hash))
                deploy = plan.deploys[(host.name, op_hash)]  # _name_ops filled it with plan.keys
                recorded = record.ops.get(plan.keys[(host.name, op_hash)])
                desired = notes.desired.get((host.name, op_hash))
                if recorded is not None and recorded != desired and deploy not in result.inputs_changed:
                    result.inputs_changed.append(deploy)
                drift = classify(recorded, desired) if commands else None
                result.ops.append(
                    OpResult(name=name, status=status, commands=commands, diff=diff, deploy=deploy, drift=drift)
                )
                observer.op_done(host.name, name, status)

    _each_host(state, list(state.inventory.get_active_hosts()), check_host)


def _deploy_of(plan: _Plan, host: str, op_hash: str) -> str | None:
    return plan.deploys.get((host, op_hash))


def _record_applied(state: State, inventory: Inventory, plan: _Plan, results: dict[str, HostResult]) -> None:
    """Store on each reached host the fingerprints of the operations this apply completed there."""
    from rdmaprov import __version__

    notes = context_of(state).notes
    digest = hashlib.sha256(Path(inventory.path).read_bytes()).hexdigest()

    def record(host) -> None:
        applied = {}
        for op_hash in host.op_hash_order:
            op_data = state.ops[host].get(op_hash)
            fp = notes.desired.get((host.name, op_hash))
            if op_data and fp and op_data.operation_meta.is_complete() and not op_data.operation_meta.did_error():
                applied[plan.keys[(host.name, op_hash)]] = fp
        if not applied:
            return
        content = merged_record(plan.records.get(host.name, AppliedRecord()), applied, digest, __version__)
        with ctx_host.use(host):
            try:
                written = write_record(host, content)
            except Exception:  # its connection is gone: a second Ctrl-C closed it, or the host was lost
                written = False
            if not written:
                results[host.name].warnings.append(
                    f"could not write {RECORD_PATH}: the next check cannot tell corrective from intentional drift"
                )

    hosts = [h for h in state.inventory if results[h.name].status != "unreachable" and h.name in plan.records]
    _each_host(state, hosts, record)


def _collect_applied(state: State, plan: _Plan, results: dict[str, HostResult]) -> None:
    ends = context_of(state).command_ends
    for host in state.inventory:
        result = results.get(host.name)
        if result is None or result.status == "unreachable":
            continue
        host_failed = host in state.failed_hosts
        blamed = False
        for op_hash in host.op_hash_order:
            op_data = state.ops[host].get(op_hash)
            if op_data is None or _skipped(state, host, op_hash):
                continue
            meta = op_data.operation_meta
            name = _op_name(state, op_hash)
            if not meta.is_complete():
                # The first unfinished operation of a failed host is where it broke (a fact
                # failed before the operation could record a result).
                if host_failed and not blamed and result.failed == 0:
                    blamed = True
                    end = ends.get(host.name)
                    cause = end.cause if end and end.cause else ""
                    result.ops.append(
                        OpResult(
                            name=name,
                            status="failed",
                            stderr=[
                                "a fact or command failed while preparing this operation"
                                + (f": {cause}" if cause else " (rerun with -v for pyinfra's log)")
                            ],
                            deploy=_deploy_of(plan, host.name, op_hash),
                        )
                    )
                    if result.error is None:
                        result.error = (
                            f"{name} failed: {cause}" if cause else f"{name} failed while reading the node's state"
                        )
                    continue
                result.ops.append(OpResult(name=name, status="skipped", deploy=_deploy_of(plan, host.name, op_hash)))
                continue
            commands = [describe(c) for c in (meta._commands or [])]
            status: OpStatus = "failed" if meta.did_error() else ("changed" if meta.did_change() else "unchanged")
            diff = context_of(state).notes.diffs.get((host.name, op_hash))
            op = OpResult(
                name=name,
                status=status,
                commands=commands,
                stdout=list(meta.stdout_lines),
                stderr=list(meta.stderr_lines),
                diff=diff if status == "changed" else None,
                deploy=_deploy_of(plan, host.name, op_hash),
            )
            result.ops.append(op)
            if status == "failed" and result.error is None:
                why = explain(ends.get(host.name), op.stdout + op.stderr)
                result.error = f"{name} failed" + (f": {why}" if why else "")


def _mark_interrupted(state: State, running: set, results: dict[str, HostResult]) -> None:
    """Hosts that Ctrl-C caught with work left: interrupted, naming the operation it stopped at."""
    ends = context_of(state).command_ends
    for host in running:
        result = results[host.name]
        end = ends.get(host.name)
        if end is not None and end.interrupted:  # its running command was stopped
            result.status = "interrupted"
            continue
        left = next((op for op in result.ops if op.status == "skipped"), None)
        if left is not None and not result.failed:
            result.status = "interrupted"
            result.error = f"interrupted before {left.name}"


def _settle_lost(state: State, results: dict[str, HostResult], run_started: float) -> None:
    """A host whose connection was lost mid-run: say whether it came back (and rebooted); one
    that did not is unreachable, not merely failed."""
    context = context_of(state)

    def settle(host) -> None:
        result = results[host.name]
        end = context.command_ends.get(host.name)
        if result.status == "unreachable" or end is None or not end.lost:
            return
        back, what = answered_again(host, context.ssh[host.name], run_started)
        result.error = f"{result.error or host.name}; {what}"
        result.status = "failed" if back else "unreachable"

    _each_host(state, list(state.inventory), settle)


def _report_applied(state: State, results: dict[str, HostResult], observer: Observer) -> None:
    """Each host of this run that went through the apply phase, finished or not. pyinfra runs
    every host's operations in step, so the hosts finish together: one line each at the end."""
    for host in state.inventory:
        result = results[host.name]
        if result.status in ("unreachable", "skipped") and not result.ops:
            continue
        ok = result.failed == 0 and result.status not in ("failed", "unreachable", "interrupted")
        observer.host_done(host.name, "apply", ok, result.error or result.status)


def run(inventory: Inventory, options: RunOptions, observer: Observer | None = None) -> RunResult:
    """Connect to the selected hosts, plan the deploys on each, then apply them or only check;
    across several processes when there are many hosts (engine/shards.py)."""
    observer = observer or NullObserver()
    # pyinfra signals "the last host failed" by raising in a greenlet; it is a result, not a crash.
    hub = gevent.get_hub()
    if PyinfraError not in hub.NOT_ERROR:
        hub.NOT_ERROR = tuple(hub.NOT_ERROR) + (PyinfraError,)
    started = time.monotonic()
    started_at = datetime.now(timezone.utc).isoformat(timespec="seconds")
    count = shard_count(len(options.hosts), EngineSettings.from_environment().shards)
    if count == 1:
        result = _run_hosts(inventory, options, options.hosts, observer, None)
    else:
        parts = run_sharded(
            options.hosts,
            count,
            observer,
            lambda hosts, relay, link: _run_hosts(inventory, options, hosts, relay, link),
        )
        by_name = {host.name: host for part in parts for host in part.hosts}
        result = RunResult(options.command, str(inventory.path), inventory.name, started_at)
        result.hosts = [by_name[name] for name in options.hosts]
        result.interrupted = any(part.interrupted for part in parts)
    result.started_at = started_at
    result.duration_s = time.monotonic() - started
    return result


def _parallel(inventory: Inventory, options: RunOptions, hosts: list[str]) -> int:
    """This process's share of `cluster.parallel` (hosts worked on at once in the whole run)."""
    if not inventory.parallel:
        return len(hosts)
    return max(1, round(inventory.parallel * len(hosts) / len(options.hosts)))


def _run_hosts(
    inventory: Inventory, options: RunOptions, hosts: list[str], observer: Observer, link: ShardLink | None
) -> RunResult:
    """The run on `hosts`: all of the run's, or one shard's when `link` ties it to the others."""
    started = time.monotonic()
    run_result = RunResult(
        command=options.command,
        inventory=str(inventory.path),
        cluster=inventory.name,
        started_at=datetime.now(timezone.utc).isoformat(timespec="seconds"),
    )
    results = {name: HostResult(name=name, address=inventory.hosts[name].address) for name in hosts}
    state = _run_state(inventory, options, hosts, observer, link)
    peers = link or Alone()
    try:
        observer.phase("connect", len(options.hosts))
        unreachable = connect(state)
        for host in state.inventory:
            if host.name in unreachable:
                results[host.name].status = "unreachable"
                results[host.name].error = unreachable[host.name]
            observer.host_done(host.name, "connect", host.name not in unreachable, results[host.name].error or "")
        reached = sum(peers.sync(("connected", None), len(state.active_hosts)))

        state.set_stage(StateStage.Prepare)
        plan, active = _plan(state, inventory, options, results, observer, peers, reached)
        if options.command == "check":
            if active:
                observer.phase("check", active)
            if state.active_hosts:
                _check_ops(state, plan, results, observer)
        elif active:
            observer.phase("apply", active)
            run_result.interrupted = _apply(state, inventory, plan, results, observer, link, started)
        if options.command == "check" or not active:
            peers.sync(("finished", None), None)  # no shard disconnects while another may still read its hosts
    finally:
        try:
            state.set_stage(StateStage.Disconnect)
            disconnect_all(state)
        except Exception:
            pass  # a dropped connection at the end changes nothing about the results

    context = context_of(state)
    for result in results.values():
        for warning in context.notes.warnings.get(result.name, []):
            if warning not in result.warnings:
                result.warnings.append(warning)
        result.reboot_required = context.notes.reboots.get(result.name, [])
        result.round_trips = context.round_trips.get(result.name, 0)
        result.settle()
    run_result.hosts = [results[name] for name in hosts]
    run_result.duration_s = time.monotonic() - started
    return run_result


def _run_state(
    inventory: Inventory, options: RunOptions, hosts: list[str], observer: Observer, link: ShardLink | None
) -> State:
    """The pyinfra State of this run, its run context filled in and its progress reported."""
    state = build_state(inventory, hosts, _parallel(inventory, options, hosts))
    context = context_of(state)
    context.hosts = list(options.hosts)
    context.inventory = inventory
    context.board = Board()
    context.link = link
    if link is not None:
        link.attach(state, context.board)
    context.notify = observer.note
    if context.settings.fact_batching:
        context.facts = FactCache()
    state.add_callback_handler(_Callbacks(observer, lambda op_hash: _op_name(state, op_hash)))
    return state


def _apply(
    state: State,
    inventory: Inventory,
    plan: _Plan,
    results: dict[str, HostResult],
    observer: Observer,
    link: ShardLink | None,
    started: float,
) -> bool:
    """Run the planned operations and collect what each host did; whether Ctrl-C stopped it."""
    peers = link or Alone()
    here = bool(state.active_hosts)
    state.set_stage(StateStage.Execute)
    with Interrupt(state, observer.note) as interrupt:
        try:
            if here:
                if link is not None:
                    state.add_callback_handler(Lockstep(link))
                run_ops(state)
        except PyinfraError:
            pass  # the last active host failed; each failure is collected below
        finally:
            peers.leave("op")
        if here:
            _collect_applied(state, plan, results)
            _record_applied(state, inventory, plan, results)
        if interrupt.requested:
            _mark_interrupted(state, interrupt.running, results)
        elif here:
            _settle_lost(state, results, started)
        _report_applied(state, results, observer)
        # Still inside: a Ctrl-C while other shards finish their operations stops them,
        # and this run reports it, as one process running them all would.
        peers.sync(("finished", None), None)
    return interrupt.requested
