"""Facts about the whole cluster, read once per run and shared by every host's operations.

SSH trust needs every node's keys on every node. Read per host inside each operation, that is
n² round trips; here the first operation that asks reads the fact from all connected hosts at
once (one round trip each, in parallel) and every later asker gets the same answer.

While facts are discovered (engine/factcache.py) nothing is read: each pass looks at what the
batches brought so far, once per pass and fact, whoever asks (each host asking afresh made a
pass cost n² lookups: a third of a 128-host check's CPU). When the run is split across processes
(engine/shards.py), the other shards' hosts are asked through the coordinator, so every shard
sees the same cluster as one process would.
"""

from __future__ import annotations

from typing import Any, TypeVar

import gevent
from pyinfra.api import FactBase, State
from pyinfra.context import ctx_host, ctx_state

from rdmaprov.engine.factcache import FactNeeded, cache_of, read_fact
from rdmaprov.engine.run_context import context_of

T = TypeVar("T")


def read_here(
    state: State, cls: type[FactBase], kwargs: dict[str, object], discovering: bool
) -> tuple[dict[str, object], list[str]]:
    """The fact from every active host of `state`: ({host: value}, hosts still to be read).

    Discovering, a value not batched yet is only noted as wanted (that host is "still to be
    read"); otherwise it is read now, all such hosts at once, and a host that cannot answer is
    simply not known this run.
    """
    cache = cache_of(state)
    found: dict[str, object] = {}
    needed: list[str] = []
    live = []
    for target in state.inventory:
        if target not in state.active_hosts:
            continue
        hit, value = cache.lookup(target, cls, kwargs) if cache is not None else (False, None)
        if hit:
            found[target.name] = value
        elif discovering and cache is not None:
            cache.want(target, cls, kwargs)
            needed.append(target.name)
        else:
            live.append(target)

    def read(target) -> None:
        with ctx_host.use(target):
            try:
                found[target.name] = read_fact(state, target, cls, kwargs)
            except Exception:  # a host that cannot answer is simply not known this run
                pass

    if live:
        with ctx_state.use(state):
            gevent.joinall([gevent.spawn(read, target) for target in live])
    order = [h.name for h in state.inventory]  # inventory order, not the order hosts answered
    return {name: found[name] for name in order if name in found}, needed


def cluster_fact(cls: type[FactBase[T]], **kwargs: Any) -> dict[str, T]:
    """`cls` read from every connected host of this run: {host name: fact value}."""
    state = ctx_state.get()
    run = context_of(state)
    cache = run.facts
    key = (cls, tuple(sorted(kwargs.items())))
    with run.cluster_lock:
        if key in run.cluster_facts:
            return run.cluster_facts[key]
        discovering = cache is not None and cache.discovering
        if discovering:
            assert cache is not None
            seen = run.cluster_pass.get(key)
            if seen is None or seen[0] != cache.passes:
                seen = (cache.passes, *_read(state, cls, kwargs, True))
                run.cluster_pass[key] = seen
            found, needed = seen[1], seen[2]
            if needed:
                raise FactNeeded(f"{cls.__name__} on {', '.join(needed)}")
            return found
        found, _ = _read(state, cls, kwargs, False)
        run.cluster_facts[key] = found
        return found


def _read(state: State, cls: type[FactBase], kwargs: dict[str, object], discovering: bool):
    link = context_of(state).link
    if link is None:
        return read_here(state, cls, kwargs, discovering)
    cache = context_of(state).facts
    return link.cluster_read(cls, kwargs, discovering, cache.passes if cache is not None else 0)
