"""Facts about the whole cluster, read once per run and shared by every host's operations.

SSH trust needs every node's keys on every node. Read per host inside each operation, that is
n² round trips; here the first operation that asks reads the fact from all connected hosts at
once (one round trip each, in parallel) and every later asker gets the same answer.
"""

from __future__ import annotations

from typing import Any

import gevent
from pyinfra.api import FactBase, State
from pyinfra.context import ctx_host, ctx_state

from rdmaprov.engine.factcache import FactNeeded, read_fact
from rdmaprov.engine.run_context import context_of


def _read_everywhere(state: State, cls: type[FactBase], kwargs: dict[str, Any]) -> dict[str, Any]:
    """The fact from every active host (from the run's batch where read); while discovering,
    FactNeeded once every host's missing read has been noted."""
    found: dict[str, Any] = {}
    needed: list[str] = []

    def read(target) -> None:
        with ctx_host.use(target):
            try:
                found[target.name] = read_fact(state, target, cls, kwargs)
            except FactNeeded:
                needed.append(target.name)
            except Exception:  # a host that cannot answer is simply not known this run
                pass

    hosts = [h for h in state.inventory if h in state.active_hosts]
    gevent.joinall([gevent.spawn(read, h) for h in hosts])
    if needed:
        raise FactNeeded(f"{cls.__name__} on {', '.join(sorted(needed))}")
    return {h.name: found[h.name] for h in hosts if h.name in found}  # inventory order, not answer order


def cluster_fact(cls: type[FactBase], **kwargs: Any) -> dict[str, Any]:
    """`cls` read from every connected host of this run: {host name: fact value}."""
    state = ctx_state.get()
    run = context_of(state)
    key = (cls, tuple(sorted(kwargs.items())))
    with run.cluster_lock:
        if key in run.cluster_facts:
            return run.cluster_facts[key]
        found = _read_everywhere(state, cls, kwargs)
        if run.facts is None or not run.facts.discovering:  # a discovery pass may still lack facts
            run.cluster_facts[key] = found
        return found
