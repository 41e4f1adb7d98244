"""Connected hosts for reads and commands outside the deploys: facts, verify, gates.

The same pyinfra connections (pinned host keys, sudo) as apply; every host is read at once.
A read that keeps no connection (verify without gates, `facts`) runs across processes when there
are many hosts (read_everywhere): an 8-GPU node's report is ~240 KiB, whose transfer and parsing
cost the control machine ~40 ms a host, 80 s of one core for 2,000 nodes.
"""

from __future__ import annotations

import contextlib
import shlex
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, Generic, TypeVar

import gevent
from paramiko import SSHException
from pyinfra.api import FactBase, StringCommand
from pyinfra.api.connect import disconnect_all
from pyinfra.api.facts import get_fact
from pyinfra.api.state import StateStage
from pyinfra.context import ctx_host, ctx_state

from rdmaprov.engine.pyinfra_state import build_state, connect, privileges
from rdmaprov.engine.run_context import context_of
from rdmaprov.inventory.model import Inventory

T = TypeVar("T")
R = TypeVar("R")

# Printed to stderr when coreutils' timeout stopped the command: 124 when TERM ended it, 137 when
# KILL was needed (told from a KILL by anything else, e.g. the OOM killer, by the time it ran).
DEADLINE_MARK = "rdmaprov: stopped at its deadline of"


@dataclass(frozen=True)
class CommandResult:
    ok: bool
    stdout: str
    stderr: str

    @property
    def timed_out(self) -> bool:
        return DEADLINE_MARK in self.stderr


# What paramiko and the socket raise when the host behind a connection stops answering (the
# keepalive deadline in engine/connection.py turns a silent host into one of these).
CONNECTION_ERRORS = (SSHException, EOFError, OSError)


class HostLost(Exception):
    """A host that stopped answering while the session used it: by name, when, and in which
    step. Every later command to it raises the same, so each step it was needed for says why it
    did not run instead of crashing on a dead connection."""

    def __init__(self, host: str, when: str, during: str, cause: str) -> None:
        super().__init__(host, when, during, cause)
        self.host, self.when, self.during, self.cause = host, when, during, cause

    def __str__(self) -> str:
        return f"{self.host} stopped answering at {self.when} during {self.during} ({self.cause})"


class Session:
    """`with Session(inventory, hosts) as s:` — s.unreachable names who could not be reached,
    s.lost who stopped answering since."""

    def __init__(self, inventory: Inventory, hosts: list[str]) -> None:
        self.inventory = inventory
        self.state = build_state(inventory, hosts)
        self.unreachable: dict[str, str] = {}
        self.lost: dict[str, HostLost] = {}
        self.step = "the health checks"  # what the session is doing, for a host lost meanwhile

    @contextlib.contextmanager
    def during(self, step: str) -> Iterator[None]:
        """Name the step under way (a gate, a diagnosis round): steps run one after another, so
        a host lost meanwhile was lost in this one."""
        previous, self.step = self.step, step
        try:
            yield
        finally:
            self.step = previous

    def _lose(self, name: str, cause: str) -> HostLost:
        """Record `name` as lost (its first loss stands) and return the exception to raise."""
        if name not in self.lost:
            when = datetime.now(timezone.utc).strftime("%H:%M:%S UTC")
            self.lost[name] = HostLost(name, when, self.step, cause)
        return self.lost[name]

    def _lost_by(self, name: str, exc: BaseException) -> HostLost:
        """The loss an exception from the connection shows."""
        return self._lose(name, str(exc) or type(exc).__name__)

    def _lost_now(self, name: str) -> HostLost | None:
        """The loss a failed command shows when its connection went (engine/connection.py keeps
        how each command ended); None when the command itself failed."""
        end = context_of(self.state).command_ends.get(name)
        return self._lose(name, end.cause) if end is not None and end.lost else None

    def __enter__(self) -> Session:
        self.unreachable = connect(self.state)
        self.state.set_stage(StateStage.Prepare)
        return self

    def __exit__(self, *exc: object) -> None:
        try:
            self.state.set_stage(StateStage.Disconnect)
            disconnect_all(self.state)
        except Exception:
            pass  # a connection already gone changes no result

    @property
    def connected(self) -> list[str]:
        return [h.name for h in self.state.inventory if h in self.state.active_hosts]

    def _host(self, name: str):
        return self.state.inventory.get_host(name)

    def each(self, names: list[str], work: Callable[[str], T]) -> dict[str, T | Exception]:
        """work(name) for every name at once; an exception is that host's result."""
        with ctx_state.use(self.state):
            return each(names, work)

    def fact(
        self, cls: type[FactBase[T]], arguments: Callable[[str], Mapping[str, Any]] | None = None
    ) -> dict[str, T | Exception]:
        """The fact from every connected host, with `arguments(name)` as that host's fact
        arguments: {name: value or the exception that stopped it}."""

        def read(name: str) -> Any:
            if name in self.lost:
                raise self.lost[name]
            host = self._host(name)
            with ctx_host.use(host):
                kwargs = arguments(name) if arguments else {}
                try:
                    return get_fact(self.state, host, cls, kwargs=kwargs, apply_failed_hosts=False)
                except CONNECTION_ERRORS as exc:
                    raise self._lost_by(name, exc) from None

        return self.each(self.connected, read)

    def run(self, name: str, command: str, timeout_s: int | None = None) -> CommandResult:
        """Run a shell command on one host; `timeout_s` stops it there (coreutils timeout), and
        the result says so. A host that stopped answering raises HostLost, now and for every
        later command."""
        if name in self.lost:
            raise self.lost[name]
        host = self._host(name)
        if timeout_s:
            seconds = int(timeout_s)
            command = (
                f"start=$(date +%s); timeout -k 5 {seconds} sh -c {shlex.quote(command)}; rc=$?; "
                f"if [ $rc = 124 ] || {{ [ $rc = 137 ] && [ $(( $(date +%s) - start )) -ge {seconds} ]; }}; "
                f"then echo '{DEADLINE_MARK} {seconds} s' >&2; fi; exit $rc"
            )
        with ctx_state.use(self.state), ctx_host.use(host):
            try:
                ok, output = host.run_shell_command(StringCommand(command), _success_exit_codes=[0], **privileges(host))
            except CONNECTION_ERRORS as exc:
                raise self._lost_by(name, exc) from None
        lost = None if ok else self._lost_now(name)
        if lost is not None:
            raise lost
        return CommandResult(
            ok,
            "\n".join(output.stdout_lines),
            "\n".join(line.line for line in output.combined_lines if line.buffer_name == "stderr"),
        )


def returned(work: Callable[..., T], *args: Any) -> T | Exception:
    """work(*args), or the exception it raised as its value: for a greenlet whose failure its
    caller reports (gevent prints a greenlet's uncaught error to stderr as a traceback)."""
    try:
        return work(*args)
    except Exception as exc:
        return exc


def each(names: list[str], work: Callable[[str], T]) -> dict[str, T | Exception]:
    """work(name) for every name at once, each in its own greenlet; an exception is that name's
    result. The results come in the order of `names`, not of who answered first, so what is
    built from them (a verdict's words, the JSON) is the same on every run."""
    results: dict[str, T | Exception] = {}

    def one(name: str) -> None:
        results[name] = returned(work, name)

    gevent.joinall([gevent.spawn(one, name) for name in names])
    return {name: results[name] for name in names}


@dataclass
class Readings(Generic[T]):
    """One fact read from many hosts, their connections closed since: what the hosts that
    answered said (or the exception that stopped the read) and why the others were not reached.
    `each` runs work beside them as a Session's does (verify's HTTP checks)."""

    inventory: Inventory
    values: dict[str, T | Exception]
    unreachable: dict[str, str]

    def each(self, names: list[str], work: Callable[[str], R]) -> dict[str, R | Exception]:
        return each(names, work)


def read_everywhere(
    inventory: Inventory,
    hosts: list[str],
    cls: type[FactBase[T]],
    arguments: Callable[[str], Mapping[str, Any]] | None = None,
) -> Readings[T]:
    """`cls` (with `arguments(name)` as each host's fact arguments) from every host, in one
    process per core once there are many (engine/shards.py)."""
    from rdmaprov.engine.run_context import EngineSettings
    from rdmaprov.engine.runner import NullObserver
    from rdmaprov.engine.shards import run_sharded, shard_count

    def read(part: list[str], *_: Any) -> tuple[dict[str, T | Exception], dict[str, str]]:
        with Session(inventory, part) as session:
            return session.fact(cls, arguments), dict(session.unreachable)

    count = shard_count(len(hosts), EngineSettings.from_environment().shards)
    if count == 1:
        return Readings(inventory, *read(hosts))

    def shard(part: list[str], *_: Any) -> tuple[dict[str, T | Exception], dict[str, str]]:
        values, unreachable = read(part)
        # What stopped a read, as its message: any exception type then crosses the process boundary.
        return {n: Exception(str(v)) if isinstance(v, Exception) else v for n, v in values.items()}, unreachable

    values: dict[str, T | Exception] = {}
    unreachable: dict[str, str] = {}
    for part_values, part_unreachable in run_sharded(hosts, count, NullObserver(), shard):
        values.update(part_values)
        unreachable.update(part_unreachable)
    return Readings(
        inventory, {n: values[n] for n in hosts if n in values}, {n: unreachable[n] for n in hosts if n in unreachable}
    )
