"""Facts read in batches: one SSH round trip per host for all the facts a plan needs.

pyinfra reads every fact with its own command, one round trip each, and keeps no cache: a
converged node stack costs dozens of round trips per host. Before the operations are evaluated,
the runner *discovers* which facts they ask for (each operation's generator runs until it asks
for a fact not read yet), reads all of them per host in one combined command, and repeats
until no operation asks for anything new (two or three passes: some facts depend on others,
e.g. authorized_keys lives in the home that SshIdentityFact reports).

Correctness is kept by two rules. A fact whose combined read failed (non-zero exit, a process
error) is read again the ordinary way when it is asked for, so pyinfra's own error handling
applies. And during apply, once an operation has run commands on a host, every later fact on
that host is read live: what was read before the change may no longer be true.
Set RDMAPROV_FACT_BATCH=0 to read every fact the ordinary way (the check's answers are the same).
"""

from __future__ import annotations

import secrets
from collections.abc import Callable, Iterable
from typing import Any, TypeVar

import gevent
from pyinfra import host as current_host
from pyinfra.api import FactBase, State, StringCommand
from pyinfra.api.facts import get_fact
from pyinfra.context import ctx_host, ctx_state

from rdmaprov.engine.pyinfra_state import privileges
from rdmaprov.engine.run_context import context_of

T = TypeVar("T")

Key = tuple[type[FactBase], tuple[tuple[str, Any], ...]]


class FactNeeded(Exception):
    """Raised while discovering: an operation asked for a fact that has not been read yet."""


def _key(cls: type[FactBase], kwargs: dict[str, object]) -> Key:
    return cls, tuple(sorted(kwargs.items()))


class FactCache:
    """Per-run fact values by host, the facts discovery found missing, and hosts changed since."""

    def __init__(self) -> None:
        self.values: dict[str, dict[Key, Any]] = {}
        self.wanted: dict[str, dict[Key, dict[str, object]]] = {}
        self.changed_hosts: set[str] = set()
        self.discovering = False
        self.passes = 0  # discovery passes begun: what a pass saw holds until the next one

    def lookup(self, target, cls: type[FactBase], kwargs: dict[str, object]) -> tuple[bool, Any]:
        """(True, value) when the value can be served without reading the host, else (False, None)."""
        if target.name in self.changed_hosts:
            return False, None
        known = self.values.get(target.name, {})
        key = _key(cls, kwargs)
        return (True, known[key]) if key in known else (False, None)

    def want(self, target, cls: type[FactBase], kwargs: dict[str, object]) -> None:
        """Note the fact for the host's next batch."""
        self.wanted.setdefault(target.name, {})[_key(cls, kwargs)] = kwargs

    def get(self, target, cls: type[FactBase], kwargs: dict[str, object]) -> Any:
        hit, value = self.lookup(target, cls, kwargs)
        if hit:
            return value
        if target.name in self.changed_hosts:
            return target.get_fact(cls, **kwargs)
        if self.discovering:
            self.want(target, cls, kwargs)
            raise FactNeeded(f"{cls.__name__} on {target.name}")
        # Read live before anything changed here (a deploy's own planning): keep it for the run.
        value = target.get_fact(cls, **kwargs)
        self.values.setdefault(target.name, {})[_key(cls, kwargs)] = value
        return value

    def mark_changed(self, name: str) -> None:
        self.changed_hosts.add(name)

    def take_wanted(self) -> dict[str, dict[Key, dict[str, object]]]:
        wanted, self.wanted = self.wanted, {}
        return wanted


def cache_of(state: State | None) -> FactCache | None:
    """The run's batched fact cache (None: facts are read the ordinary way)."""
    return context_of(state).facts if state is not None else None


def read_fact(state: State, target, cls: type[FactBase[T]], kwargs: dict[str, object]) -> T:
    """`cls` on `target`: from this run's batch when it can be, else read by pyinfra (a failure
    raises for this host only, without failing it in pyinfra's state)."""
    cache = cache_of(state)
    if cache is None:
        return get_fact(state, target, cls, kwargs=kwargs, apply_failed_hosts=False)
    return cache.get(target, cls, kwargs)


def fact(cls: type[FactBase[T]], **kwargs: Any) -> T:
    """What operations call instead of host.get_fact: served from this run's batch when it can be."""
    state = ctx_state.get() if ctx_state.isset() else None
    if state is None or cache_of(state) is None:
        return current_host.get_fact(cls, **kwargs)
    return read_fact(state, ctx_host.get(), cls, kwargs)


def mark_current_host_changed() -> None:
    """An operation is about to run commands on the current host (apply only)."""
    state = ctx_state.get() if ctx_state.isset() else None
    cache = cache_of(state)
    if cache is not None and state is not None and state.is_executing:
        cache.mark_changed(ctx_host.get().name)


def _batch_command(facts: list[tuple[Key, str]], nonce: str) -> str:
    """One shell script printing each fact's output between markers, with its exit status."""
    parts = []
    for index, (_, command) in enumerate(facts):
        parts.append(f"echo '@@{nonce} {index}'; ( {command}\n) 2>/dev/null; echo \"@@{nonce} rc $?\"")
    return "; ".join(parts)


def parse_batch(lines: Iterable[str], count: int, nonce: str) -> dict[int, tuple[int, list[str]]]:
    """{fact index: (exit status, stdout lines)} from a batch's output; a cut-off fact is absent."""
    found: dict[int, tuple[int, list[str]]] = {}
    index: int | None = None
    body: list[str] = []
    status = f"@@{nonce} rc "
    for line in lines:
        cut = line.find(status)
        if cut > 0 and index is not None:  # the fact's last line had no newline: it ends where the status starts
            body.append(line[:cut])
            line = line[cut:]
        if line.startswith(f"@@{nonce} "):
            tag = line[len(nonce) + 3 :].strip()
            if tag.startswith("rc "):
                if index is not None and 0 <= index < count:
                    found[index] = (int(tag[3:]), body)
                index, body = None, []
            else:
                index, body = int(tag), []
        elif index is not None:
            body.append(line)
    return found


def _batchable(cls: type[FactBase], kwargs: dict[str, object]) -> str | None:
    """The fact's shell command when it can share a batch (plain shell, no required binary)."""
    fact_obj = cls()
    if fact_obj.shell_executable or fact_obj.requires_command(**kwargs):
        return None
    command = fact_obj.command(**kwargs) if callable(fact_obj.command) else fact_obj.command
    return command if isinstance(command, str) else None


def read_batch(state: State, target, wanted: dict[Key, dict[str, object]], cache: FactCache) -> None:
    """Read `wanted` facts on `target` in one command; store those that read cleanly."""
    facts: list[tuple[Key, str]] = []
    for key, kwargs in wanted.items():
        command = _batchable(key[0], kwargs)
        if command is None:
            cache.values.setdefault(target.name, {})[key] = target.get_fact(key[0], **kwargs)
        else:
            facts.append((key, command))
    if not facts:
        return
    nonce = secrets.token_hex(6)
    with ctx_host.use(target):
        ok, output = target.run_shell_command(StringCommand(_batch_command(facts, nonce)), **privileges(target))
    results = parse_batch(output.stdout_lines, len(facts), nonce)
    store = cache.values.setdefault(target.name, {})
    for index, (key, _) in enumerate(facts):
        status, lines = results.get(index, (1, []))
        if status != 0:
            continue  # read again the ordinary way when asked, with pyinfra's error handling
        fact_obj = key[0]()
        try:
            store[key] = fact_obj.process(lines) if lines else fact_obj.default()
        except Exception:
            continue


def prefetch(
    state: State,
    hosts: list,
    evaluate: Callable[[Any], None],
    seed: dict[str, list[tuple[type[FactBase], dict]]],
    passes: int = 4,
) -> None:
    """Discover and batch-read the facts `evaluate(host)` asks for, pass by pass, all hosts at once.

    A run split across processes (engine/shards.py) takes each step in lockstep with the other
    shards: a pass may note facts wanted on this shard's hosts for another shard's cluster fact,
    so wanted facts are taken only once every shard has evaluated, and the next pass begins
    only once every shard has read.
    """
    cache = cache_of(state)
    if cache is None:
        return
    link = context_of(state).link
    for name, items in seed.items():
        for cls, kwargs in items:
            cache.wanted.setdefault(name, {})[_key(cls, kwargs)] = kwargs
    by_name = {h.name: h for h in hosts}
    for number in range(passes):
        cache.passes += 1
        cache.discovering = True
        try:
            with ctx_state.use(state):
                gevent.joinall([gevent.spawn(evaluate, h) for h in hosts])
        finally:
            cache.discovering = False
        if link is not None:
            link.sync(("discovered", number), None)
        wanted = {name: items for name, items in cache.take_wanted().items() if name in by_name}
        if not (any(link.sync(("wanted", number), bool(wanted))) if link is not None else wanted):
            return

        def read(name: str, wanted: dict[str, dict[Key, dict[str, object]]] = wanted) -> None:
            try:
                read_batch(state, by_name[name], wanted[name], cache)
            except Exception:
                pass  # unread facts are read the ordinary way later, where errors are reported

        with ctx_state.use(state):
            gevent.joinall([gevent.spawn(read, name) for name in wanted])
        if link is not None:
            link.sync(("read", number), None)
