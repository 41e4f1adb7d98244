"""A run split across processes: the hosts in shards, each shard its own process and pyinfra State.

Why: pyinfra runs in one process, so every host's SSH handshake, fact parsing and planning
shares one core; measured on 256 hosts, a check cost the control machine 25.9 s of CPU on that
one core (median of 3, bench/results/host_scaling_before.json). Shards are forked, so they share
the loaded code and the inventory with the coordinator (copy on write) instead of each holding
its own.

What one process knows about the whole cluster, every shard must know too:
- cluster facts (every node's SSH identity for ssh_trust; each node's OS, GPUs and installed
  builds for build placement) are read from all shards' hosts through the coordinator, once per
  run and the same for every shard (engine/cluster.py);
- the builds each host declared while planning are pooled once planning is done;
- steps that depend on each other across hosts go in lockstep, as pyinfra does across hosts in
  one process: each fact discovery pass, and in an apply each operation, which starts only once
  every shard has finished the one before (trusted keys need every node's new key pair).
The coordinator draws the shards' progress, and is the only process Ctrl-C reaches (shards have
their own process group): it passes each one on once, so every shard stops as a single process
would and reports where each of its hosts stood. Results come back per host and are put in the
run's host order: the JSON is the one a single process gives.
"""

from __future__ import annotations

import gc
import itertools
import logging
import os
import pickle
import signal
import sys
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, NoReturn

import gevent
import gevent.os
import gevent.socket
from gevent.event import AsyncResult, Event
from gevent.lock import Semaphore
from pyinfra.api import FactBase, State
from pyinfra.api.state import BaseStateCallback
from pyinfra.context import ctx_state

from rdmaprov.engine.board import Board
from rdmaprov.engine.cluster import read_here
from rdmaprov.engine.interrupt import stop_watching
from rdmaprov.engine.pyinfra_state import LIBRARY_LOGS

# Hosts per shard before another process pays off: below it, forking and the lockstep cost more
# than the CPU a second core takes over. Measured (bench/RESULTS.md, 2026-12-02, 2 cores): a
# second shard at 32 hosts cost up to 0.5 s of CPU and 31 MiB and gained no time; from 64 hosts
# up it took 7-19 % off check's and no-op apply's wall time for the same CPU.
HOSTS_PER_SHARD = 32

EVENT_BATCH_S = 0.1  # how long a shard's progress may wait to be drawn

Step = tuple[str, Any]  # a lockstep point: (family, detail), e.g. ("op", op hash)
Work = Callable[[list[str], Any, "ShardLink"], Any]  # (hosts, observer, link) -> the shard's result


def shard_count(hosts: int, forced: int | None, cpus: int | None = None) -> int:
    """How many processes run `hosts`: `forced` (RDMAPROV_SHARDS) if set, else one per core once
    there are HOSTS_PER_SHARD hosts for each; never more than the hosts."""
    if forced is not None:
        return max(1, min(forced, hosts))
    return max(1, min(cpus or os.cpu_count() or 1, hosts // HOSTS_PER_SHARD))


def split(hosts: list[str], count: int) -> list[list[str]]:
    """`count` runs of consecutive hosts, sizes differing by at most one."""
    size, extra = divmod(len(hosts), count)
    out, start = [], 0
    for index in range(count):
        end = start + size + (index < extra)
        out.append(hosts[start:end])
        start = end
    return out


def _send(sock, lock: Semaphore, message: tuple) -> None:
    data = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
    with lock:
        sock.sendall(len(data).to_bytes(8, "big") + data)


def _receive(sock) -> tuple | None:
    """The next message, or None when the other side is gone."""
    header = _exactly(sock, 8)
    if header is None:
        return None
    body = _exactly(sock, int.from_bytes(header, "big"))
    return pickle.loads(body) if body is not None else None


def _exactly(sock, size: int) -> bytes | None:
    chunks, left = [], size
    while left:
        chunk = sock.recv(min(left, 1 << 20))
        if not chunk:
            return None
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


class ShardLink:
    """A shard's line to the coordinator: lockstep, cluster facts, progress events."""

    def __init__(self, sock, index: int) -> None:
        self.sock = sock
        self.index = index
        self.lock = Semaphore()
        self.state: State | None = None  # set once the shard's State exists: cluster reads use it
        self.board: Board | None = None
        self.waiting: dict[Any, AsyncResult] = {}
        self.ids = itertools.count()
        self.bye = Event()
        # Progress events go in batches: a message per event was a shard's largest cost in a profile.
        self.events: list[tuple[str, tuple]] = []

    def start(self) -> None:
        gevent.spawn(self._listen)
        gevent.spawn(self._flush_events)

    def attach(self, state: State, board: Board) -> None:
        """This shard's State, set for the process's whole life: pyinfra's state context is
        process-wide, and a greenlet answering another shard's cluster read must not unset it
        under the run's own greenlets when it finishes. What this shard's hosts come to hold
        goes to the other shards."""
        self.state = state
        self.board = board
        ctx_state.set(state)
        board.publish = lambda item, host, holds: self.send(("board", item, host, holds))

    def send(self, message: tuple) -> None:
        """Send `message`, after the events that came before it."""
        if self.events:
            events, self.events = self.events, []
            _send(self.sock, self.lock, ("events", events))
        _send(self.sock, self.lock, message)

    def _flush_events(self) -> None:
        while True:
            gevent.sleep(EVENT_BATCH_S)
            if self.events:
                events, self.events = self.events, []
                _send(self.sock, self.lock, ("events", events))

    def _listen(self) -> None:
        while True:
            message = _receive(self.sock)
            if message is None:
                os._exit(1)  # the coordinator is gone: nobody is left to report to
            kind = message[0]
            if kind == "reply":
                self.waiting.pop(message[1]).set(message[2])
            elif kind == "read":
                gevent.spawn(self._serve, *message[1:])
            elif kind == "board" and self.board is not None:
                self.board.receive(*message[1:])
            elif kind == "bye":
                self.bye.set()
                return

    def _serve(self, request: int, cls: type[FactBase], kwargs: dict[str, object], discovering: bool) -> None:
        """Another shard asked for a cluster fact: this shard's hosts' part of it."""
        try:
            answer = read_here(self.state, cls, kwargs, discovering) if self.state is not None else ({}, [])
        except Exception:
            answer = ({}, [])
        self.send(("answer", request, answer))

    def _ask(self, key: Any, message: tuple) -> Any:
        reply: AsyncResult = AsyncResult()
        self.waiting[key] = reply
        self.send(message)
        return reply.get()

    def sync(self, step: Step, payload: Any) -> list[Any]:
        """Wait until every shard reaches `step` (or left its family); every shard's payload."""
        return self._ask(("sync", step), ("sync", step, payload))

    def leave(self, family: str) -> None:
        """This shard passes no more steps of `family` (its operations are done, or it had none)."""
        self.send(("leave", family))

    def cluster_read(
        self, cls: type[FactBase], kwargs: dict[str, object], discovering: bool, passes: int
    ) -> tuple[dict[str, object], list[str]]:
        """engine/cluster.py's read_here over every shard's hosts."""
        request = next(self.ids)
        return self._ask(("cluster", request), ("cluster", request, cls, kwargs, discovering, passes))

    def event(self, method: str, *args: Any) -> None:
        self.events.append((method, args))


class Alone:
    """The lockstep of a run in one process: nobody to wait for."""

    def sync(self, step: Step, payload: Any) -> list[Any]:
        return [payload]

    def leave(self, family: str) -> None:
        pass


class RelayObserver:
    """A shard's Observer: progress goes to the coordinator, which draws it."""

    def __init__(self, link: ShardLink) -> None:
        self.link = link

    def phase(self, name: str, total: int) -> None:
        self.link.event("phase", name, total)

    def host_done(self, host: str, phase: str, ok: bool, detail: str = "") -> None:
        self.link.event("host_done", host, phase, ok, detail)

    def op_done(self, host: str, op: str, status: str) -> None:
        self.link.event("op_done", host, op, status)

    def note(self, text: str) -> None:
        self.link.event("note", text)


class Lockstep(BaseStateCallback):
    """In an apply, each operation starts in a shard once every shard has finished the one before."""

    def __init__(self, link: ShardLink) -> None:
        self.link = link

    def operation_start(self, state: State, op_hash) -> None:  # type: ignore[override]
        self.link.sync(("op", op_hash), None)


@dataclass
class _Shard:
    index: int
    hosts: list[str]
    pid: int
    sock: Any
    lock: Semaphore = field(default_factory=Semaphore)
    result: Any = None
    ended: bool = False  # sent its result, or died
    interrupted: bool = False  # Ctrl-C came outside an apply's operations (KeyboardInterrupt)
    crash: str | None = None
    left: set[str] = field(default_factory=set)
    asked: set[int] = field(default_factory=set)  # cluster reads it has yet to answer


class _Coordinator:
    def __init__(self, shards: list[_Shard], observer: Any) -> None:
        self.shards = shards
        self.observer = observer
        self.arrived: dict[Step, dict[int, Any]] = {}
        self.cluster: dict[tuple, AsyncResult] = {}
        self.answers: dict[int, AsyncResult] = {}
        self.ids = itertools.count()
        self.phases: set[str] = set()
        self.notes: dict[str, int] = {}  # note text -> the shard that showed it first
        self.all_ended = Event()  # every shard sent its result or died: time to say bye

    def send(self, shard: _Shard, message: tuple) -> None:
        try:
            _send(shard.sock, shard.lock, message)
        except OSError:
            pass  # it died; its end is handled by its listener

    def listen(self, shard: _Shard) -> None:
        while True:
            message = _receive(shard.sock)
            if message is None:
                if shard.result is None and not shard.interrupted and shard.crash is None:
                    shard.crash = f"shard {shard.index} ({shard.hosts[0]}…) exited without a result"
                self._ended(shard)
                return
            kind = message[0]
            if kind == "sync":
                self.arrived.setdefault(message[1], {})[shard.index] = message[2]
                self._settle()
            elif kind == "leave":
                shard.left.add(message[1])
                self._settle()
            elif kind == "cluster":
                gevent.spawn(self._cluster, shard, *message[1:])
            elif kind == "answer":
                shard.asked.discard(message[1])
                self.answers.pop(message[1]).set(message[2])
            elif kind == "board":  # what one shard's host holds, every other shard learns
                for other in self.shards:
                    if other is not shard and not other.ended:
                        self.send(other, message)
            elif kind == "events":
                for method, args in message[1]:
                    self._event(shard, method, args)
            elif kind == "result":
                shard.result, shard.crash, shard.interrupted = message[1], message[2], message[3]
                self._ended(shard)

    def _ended(self, shard: _Shard) -> None:
        if shard.ended:
            return
        shard.ended = True
        if all(s.ended for s in self.shards):
            self.all_ended.set()
        for request in list(shard.asked):  # what it will never answer counts as nothing known there
            shard.asked.discard(request)
            self.answers.pop(request).set(({}, []))
        self._settle()

    def _settle(self) -> None:
        """Release every step that each shard has reached, left, or ended without."""
        for step in list(self.arrived):
            arrived = self.arrived[step]
            if all(s.index in arrived or step[0] in s.left or s.ended for s in self.shards):
                del self.arrived[step]
                payloads = [arrived[index] for index in sorted(arrived)]
                for shard in self.shards:
                    if shard.index in arrived and not shard.ended:
                        self.send(shard, ("reply", ("sync", step), payloads))

    def _cluster(
        self, shard: _Shard, request: int, cls: type[FactBase], kwargs: dict, discovering: bool, passes: int
    ) -> None:
        """One read per run of each cluster fact (one per discovery pass while discovering)."""
        key = (cls, tuple(sorted(kwargs.items())), passes if discovering else None)
        memo = self.cluster.get(key)
        if memo is None:
            memo = self.cluster[key] = AsyncResult()
            memo.set(self._read_everywhere(cls, kwargs, discovering))
        self.send(shard, ("reply", ("cluster", request), memo.get()))

    def _read_everywhere(
        self, cls: type[FactBase], kwargs: dict, discovering: bool
    ) -> tuple[dict[str, object], list[str]]:
        pending: list[AsyncResult] = []
        for shard in self.shards:
            if shard.ended and shard.result is None:
                continue  # died or stopped: it has no hosts to read
            request = next(self.ids)
            reply: AsyncResult = AsyncResult()
            self.answers[request] = reply
            shard.asked.add(request)
            pending.append(reply)
            self.send(shard, ("read", request, cls, kwargs, discovering))
        found: dict[str, object] = {}
        needed: list[str] = []
        for reply in pending:
            part, missing = reply.get() or ({}, [])
            found.update(part)
            needed += missing
        return found, needed

    def _event(self, shard: _Shard, method: str, args: tuple) -> None:
        if method == "log":
            print(args[0], file=sys.stderr)
            return
        if method == "phase":
            if args[0] in self.phases:
                return  # every shard starts each phase; the run shows it once, with the run's total
            self.phases.add(args[0])
        elif method == "note":
            first = self.notes.setdefault(args[0], shard.index)
            if first != shard.index:
                return  # the same message from every shard (Ctrl-C's) is shown once
        getattr(self.observer, method)(*args)

    def forward_interrupt(self) -> None:
        for shard in self.shards:
            if not shard.ended:
                try:
                    os.kill(shard.pid, signal.SIGINT)
                except ProcessLookupError:
                    pass


def _running_greenlets() -> list[gevent.Greenlet]:
    """The coordinator's greenlets a fork would copy (rich's progress refresh, timers): in a shard
    they would draw the progress bar or act a second time, so each shard stops them. Found here,
    before the fork: a shard that looked through every object itself would write to each one's
    reference count and so copy the coordinator's whole heap into its own."""
    current = gevent.getcurrent()
    return [g for g in gc.get_objects() if isinstance(g, gevent.Greenlet) and g is not current and not g.dead]


class _RelayLog(logging.Handler):
    """The libraries' logs (-v) from a shard, written by the coordinator."""

    def __init__(self, link: ShardLink, formatter: logging.Formatter | None) -> None:
        super().__init__()
        self.link = link
        self.setFormatter(formatter)

    def emit(self, record: logging.LogRecord) -> None:
        self.link.event("log", self.format(record))


def _child(sock, index: int, hosts: list[str], work: Work, inherited: list[gevent.Greenlet]) -> NoReturn:
    """A shard's whole life: run its hosts, send the result, answer others until told bye."""
    code = 0
    try:
        # Only the coordinator writes to the terminal: stdout carries the run's result (JSON),
        # stderr its progress; a shard reports through its link.
        devnull = os.open(os.devnull, os.O_RDWR)
        for fd in (0, 1, 2):
            os.dup2(devnull, fd)
        for greenlet in inherited:
            greenlet.kill(block=False)
        os.setpgid(0, 0)  # Ctrl-C at the terminal reaches the coordinator alone, which passes it on
        signal.signal(signal.SIGINT, signal.default_int_handler)
        link = ShardLink(sock, index)
        for name in LIBRARY_LOGS:
            log = logging.getLogger(name)
            log.handlers[:] = [
                _RelayLog(link, h.formatter) if isinstance(h, logging.StreamHandler) else h for h in log.handlers
            ]
        link.start()
        message: tuple
        try:
            message = ("result", work(hosts, RelayObserver(link), link), None, False)
        except KeyboardInterrupt:
            message = ("result", None, None, True)
        except BaseException:
            message = ("result", None, traceback.format_exc(), False)
        link.send(message)
        link.bye.wait()
    except BaseException:
        code = 1
    finally:
        os._exit(code)


def run_sharded(hosts: list[str], count: int, observer: Any, work: Work) -> list[Any]:
    """Run `work` on `count` shards of `hosts` at once; their results (picklable) in shard order.

    Raises KeyboardInterrupt when Ctrl-C came outside an apply's operations (as one process
    would), and RuntimeError with a shard's traceback when one crashed.
    """
    shards: list[_Shard] = []
    sys.stdout.flush()
    sys.stderr.flush()
    inherited = _running_greenlets()
    # What exists now stays shared with the shards: their garbage collector leaves it alone
    # instead of writing to every object (and so copying the whole heap into each). With the
    # greenlets found before the fork: 32 hosts in two shards, check, peak PSS of all processes
    # 115 MiB before, 91 MiB after (bench/host_scaling.py --sizes 32 --env RDMAPROV_SHARDS=2).
    gc.freeze()
    try:
        for index, part in enumerate(split(hosts, count)):
            ours, theirs = gevent.socket.socketpair()
            pid = gevent.fork()
            if pid == 0:
                ours.close()
                for earlier in shards:
                    earlier.sock.close()
                _child(theirs, index, part, work, inherited)
            theirs.close()
            shards.append(_Shard(index, part, pid, ours))
    finally:
        gc.unfreeze()
    coordinator = _Coordinator(shards, observer)
    interrupt = gevent.signal_handler(signal.SIGINT, coordinator.forward_interrupt)
    listeners = [gevent.spawn(coordinator.listen, shard) for shard in shards]
    try:
        coordinator.all_ended.wait()  # a shard that sent its result still answers others' cluster reads
    finally:
        stop_watching(interrupt)
        for shard in shards:
            if not shard.ended:  # only when the coordinator itself is stopped: leave no shard behind
                os.kill(shard.pid, signal.SIGKILL)
            coordinator.send(shard, ("bye",))
        gevent.joinall(listeners)
        for shard in shards:
            shard.sock.close()
            gevent.os.waitpid(shard.pid, 0)  # gevent's: its fork watches (and reaps) the child
    crashed = [shard.crash for shard in shards if shard.crash]
    if crashed:
        raise RuntimeError("a shard of this run failed:\n" + "\n".join(crashed))
    if any(shard.interrupted for shard in shards):
        raise KeyboardInterrupt
    return [shard.result for shard in shards if shard.result is not None]
