"""Run one rdmaprov operation against given facts and collect the commands it would run.

pyinfra's own fixture harness is not in its wheel; this is the small equivalent: a host whose
facts come from a table, inside a real pyinfra context, so operations run unchanged.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from pyinfra.api import FileDownloadCommand, FileUploadCommand, FunctionCommand
from pyinfra.context import ctx_host, ctx_state

from rdmaprov.engine.run_context import EngineSettings, RunNotes, context_of, start_run
from rdmaprov.facts.system import Os
from rdmaprov.parsers.system import parse_os_release

# The apt install command exactly as a Debian/Ubuntu node gets it, up to the package names.
APT_INSTALL = (
    'retry_locked() { what=$1; shift; for try in $(seq 60); do out=$("$@" 2>&1) && return 0; '
    'case "$out" in *"locked by another process"*|*"lock was locked by"*|*"Could not get lock"*) [ "$try" = 60 ] && '
    '{ echo "rdmaprov: gave up after 5 min waiting for the $what lock: $out" >&2; return 1; }; '
    'echo "rdmaprov note: waiting for the $what lock ($try/60, 5 s each): $(echo "$out" | grep -m 1 lock)" >&2; '
    'sleep 5;; *) printf "%s\\n" "$out" >&2; return 1;; esac; done; }; '
    "retry_locked dpkg env DEBIAN_FRONTEND=noninteractive dpkg --configure -a || exit 1; "
    "retry_locked 'package lists' apt-get -o DPkg::Lock::Timeout=300 update -q || exit 1; "
    "DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=300 install -y -q --no-install-recommends "
)

OS_RELEASE = Path(__file__).resolve().parent.parent / "fixtures" / "os-release"


def os_fact(name: str):
    """The Os fact as a node of that distro reports it (from its real /etc/os-release)."""
    return parse_os_release((OS_RELEASE / name).read_text())


class FactHost:
    """A host whose facts are looked up by class (or by (class, kwargs) for per-argument facts)."""

    def __init__(self, name: str, facts: dict[Any, Any]) -> None:
        self.name = name
        self.facts = facts
        self.noops: list[str] = []
        self.current_op_hash = "op"

    def get_fact(self, cls, **kwargs):
        for key in ((cls, tuple(sorted(kwargs.items()))), cls):
            if key in self.facts:
                value = self.facts[key]
                return value(**kwargs) if callable(value) and not isinstance(value, type) else value
        return cls.default() if hasattr(cls, "default") else None

    def noop(self, message: str) -> None:
        self.noops.append(message)


class FactCluster(dict):
    """Stands in for the run's cluster facts, already read: {fact class: {host: value}}, whatever
    the fact's arguments."""

    def __init__(self, values: dict[Any, dict[str, Any]]) -> None:
        super().__init__()
        self.values = values

    def __contains__(self, key: object) -> bool:
        return True

    def __getitem__(self, key: tuple) -> dict[str, Any]:
        return self.values.get(key[0], {})


class Named:
    def __init__(self, name: str) -> None:
        self.name = name


class FactState:
    """The parts of a pyinfra State operations read: the inventory's hosts in order and whether the
    run is executing (apply) or planning; its run context holds notes, cluster facts and the builds
    each host declared."""

    def __init__(
        self,
        cluster: dict[Any, dict[str, Any]] | None = None,
        hosts: list[str] | None = None,
        builds: dict[str, dict[str, Any]] | None = None,
        executing: bool = False,
    ) -> None:
        self.inventory = [Named(n) for n in (hosts or ["node1"])]
        self.is_executing = executing
        run = start_run(self, EngineSettings(fact_batching=False))  # type: ignore[arg-type]
        run.cluster_facts = FactCluster(cluster or {})
        run.builds = builds or {}


def render(command) -> str:
    if isinstance(command, FileUploadCommand):
        if isinstance(command.src, str):
            return f"upload {command.dest} from {command.src}"
        return f"upload {command.dest}:\n{command.src.getvalue().decode(errors='replace')}"
    if isinstance(command, FileDownloadCommand):
        return f"download {command.src} to {command.dest}"
    if isinstance(command, FunctionCommand):
        return f"call {command.function.__name__}{command.args}"
    return str(command)


def run_notes(
    op: Callable,
    facts: dict[Any, Any],
    cluster_facts: dict | None = None,
    host: str = "node1",
    state: FactState | None = None,
    **kwargs,
) -> tuple[list[str], RunNotes]:
    """The commands `op(**kwargs)` yields on `host` with these facts, and the notes it left."""
    fake = FactHost(host, facts)
    state = state or FactState(cluster_facts)
    with ctx_state.use(state), ctx_host.use(fake):
        out = [render(c) for c in op._inner(**kwargs)]
    return out, context_of(state).notes  # type: ignore[arg-type]


def commands(op: Callable, facts: dict[Any, Any], cluster_facts: dict | None = None, **kwargs) -> list[str]:
    """The commands `op(**kwargs)` yields (empty when the facts show a converged node)."""
    return run_notes(op, facts, cluster_facts, **kwargs)[0]


__all__ = ["APT_INSTALL", "FactState", "commands", "run_notes", "os_fact", "Os"]
