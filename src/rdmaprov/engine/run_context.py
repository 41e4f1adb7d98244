"""Everything one run keeps while it goes on, in one place.

pyinfra calls our operations itself, so no argument of ours reaches them: what they share for a
run (notes, the batched fact cache, cluster-wide facts, build declarations, round-trip counts and
the settings read from the environment) is found from pyinfra's current State. Each State has one
RunContext, held in this module's table rather than as attributes set on pyinfra's object. A State
nobody started a run for (plain pyinfra running deploy/site.py) gets a plain one on first use: no
fact batching, but the same notes, so warnings and reboot notes are not lost.
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar
from weakref import WeakKeyDictionary

from gevent.lock import Semaphore
from pyinfra.api import State
from pyinfra.context import ctx_state

from rdmaprov.builds.spec import Recipe, RecipeSettings
from rdmaprov.errors import UserError

T = TypeVar("T")

if TYPE_CHECKING:
    from rdmaprov.engine.board import Board
    from rdmaprov.engine.connection import CommandEnd
    from rdmaprov.engine.factcache import FactCache
    from rdmaprov.engine.shards import ShardLink
    from rdmaprov.inventory.model import Inventory, SSHSettings


@dataclass(frozen=True)
class EngineSettings:
    """The engine's switches, read once from the environment when a run starts."""

    # RDMAPROV_FACT_BATCH=0 reads every fact on its own, as plain pyinfra does.
    fact_batching: bool = True
    # RDMAPROV_SHARDS=N runs the hosts in N processes (1: one process); unset: engine/shards.py decides.
    shards: int | None = None

    @classmethod
    def from_environment(cls) -> EngineSettings:
        shards = os.environ.get("RDMAPROV_SHARDS", "").strip()
        if shards and not (shards.isdigit() and int(shards) > 0):
            raise UserError(
                f"RDMAPROV_SHARDS={shards}: give a number of processes (1: all hosts in one) or leave it unset "
                "(one per core once there are enough hosts)"
            )
        return cls(
            fact_batching=os.environ.get("RDMAPROV_FACT_BATCH", "1") != "0", shards=int(shards) if shards else None
        )


@dataclass
class RunNotes:
    """What operations report besides their commands: diffs and desired-state fingerprints by
    (host, op hash), warnings and reboot reasons by host."""

    diffs: dict[tuple[str, str], str] = field(default_factory=dict)
    desired: dict[tuple[str, str], str] = field(default_factory=dict)
    warnings: dict[str, list[str]] = field(default_factory=dict)
    reboots: dict[str, list[str]] = field(default_factory=dict)
    # Arguments every node's operation shares, by id, with their JSON (engine/desired.fingerprint)
    encoded: dict[int, tuple[object, str]] = field(default_factory=dict)

    def clear(self) -> None:
        """Forget what fact discovery's trial evaluations noted: the real evaluation notes it again."""
        for table in (self.diffs, self.desired, self.warnings, self.reboots):
            table.clear()


@dataclass
class RunContext:
    settings: EngineSettings = field(default_factory=EngineSettings)
    notes: RunNotes = field(default_factory=RunNotes)
    facts: FactCache | None = None  # the batched fact cache (engine/factcache.py), when batching
    # Facts read from every host at once (engine/cluster.py), by (fact, arguments); while facts
    # are discovered, what the current pass saw: (pass, {host: value}, hosts still to be read).
    cluster_facts: dict[tuple, dict[str, Any]] = field(default_factory=dict)
    cluster_pass: dict[tuple, tuple[int, dict[str, Any], list[str]]] = field(default_factory=dict)
    cluster_lock: Semaphore = field(default_factory=Semaphore)
    # Every host of the run, in its order; a shard's State holds only its own (engine/shards.py).
    hosts: list[str] = field(default_factory=list)
    link: ShardLink | None = None  # the other shards of a run split across processes
    inventory: Inventory | None = None  # the run's inventory (None under plain pyinfra)
    board: Board | None = None  # who holds which build archive (builds/fanout.py), once shipping starts
    # What an operation works out once for every host of the run (operations/ssh.py's trust blocks).
    shared: dict[str, Any] = field(default_factory=dict)
    # Builds each host declared while planning ({slot: {host: settings}}) and, once worked out,
    # every declaring host's build id ({slot: {host: build id}}): operations/builds.py.
    builds: dict[str, dict[str, RecipeSettings]] = field(default_factory=dict)
    build_keys: dict[str, dict[str, str]] = field(default_factory=dict)
    recipes: dict[str, Recipe[Any]] = field(default_factory=dict)  # by name; each takes its own settings class
    round_trips: Counter[str] = field(default_factory=Counter)
    ssh: dict[str, SSHSettings] = field(default_factory=dict)  # each host's, for its connection
    # How each host's last failed command ended (engine/connection.py), for the reason shown.
    command_ends: dict[str, CommandEnd] = field(default_factory=dict)
    busy: set[str] = field(default_factory=set)  # hosts running a command right now
    # Where notes that node-side scripts print while they work go (the run's observer).
    notify: Callable[[str], None] = field(default=lambda text: None)


_CONTEXTS: WeakKeyDictionary[State, RunContext] = WeakKeyDictionary()


def start_run(state: State, settings: EngineSettings | None = None) -> RunContext:
    """A fresh context for a run on `state` (settings from the environment unless given)."""
    context = RunContext(settings=settings or EngineSettings.from_environment())
    _CONTEXTS[state] = context
    return context


def run_hosts(state: State) -> list[str]:
    """Every host of the run on `state`, in order (plain pyinfra: the State's own)."""
    return context_of(state).hosts or [host.name for host in state.inventory]


def context_of(state: State) -> RunContext:
    """The context of the run on `state`; a plain one if no run was started on it."""
    context = _CONTEXTS.get(state)
    if context is None:
        context = _CONTEXTS[state] = RunContext()
    return context


def once_per_run(key: str, source: object, compute: Callable[[], T]) -> T:
    """What `compute` works out from `source`, once per run for every host (the cluster-wide
    blocks: worked out on each host again, they cost n² for the cluster). Worked out again when
    `source` is another object (a fact read again); holding it keeps its id from being reused."""
    memo = context_of(ctx_state.get()).shared
    seen = memo.get(key)
    if seen is None or seen[0] is not source:
        seen = memo[key] = (source, compute())
    return seen[1]
