"""Can one MPI job span these nodes? Each node's `mpirun --version`, read before the all_reduce gate.

mpirun starts a launcher daemon on every node over SSH (Open MPI 4's ORTE `orted`, Open MPI 5's
PRRTE `prted`) and the ranks then speak that version's wire protocol, so a job across Open MPI 4
and 5 nodes cannot start: the 4.x mpirun finds no `orted` on a 5.x node, and a 5.x one no `prted`
on a 4.x node (seen on the lab: Debian 12 ships Open MPI 4.1, Debian 13 ships 5.0). A cluster
upgraded one release at a time meets this; the gate says so instead of failing on mpirun's words.
"""

from __future__ import annotations

from collections.abc import Callable

from rdmaprov.engine.session import Session
from rdmaprov.parsers.mpi import MpiVersion, parse_mpirun_version
from rdmaprov.quoting import sh


def mpirun_path(session: Session, name: str) -> str:
    """The mpirun a host's jobs use: under its declared prefix, else the distro's on PATH."""
    prefix = session.inventory.hosts[name].node.mpi.install_prefix
    return f"{prefix}/bin/mpirun" if prefix else "mpirun"


def read_mpi_versions(session: Session, hosts: list[str]) -> dict[str, MpiVersion | str]:
    """Each host's MPI, or why it could not be read (no mpirun there), all hosts at once."""

    def read(name: str) -> MpiVersion | str:
        env = session.inventory.hosts[name].node.mpi.site_env
        result = session.run(name, f"{env}{sh(mpirun_path(session, name))} --version", 60)
        version = parse_mpirun_version(result.stdout) if result.ok else None
        if version is None:
            said = (result.stderr or result.stdout).strip().splitlines()
            return f"`{mpirun_path(session, name)} --version` failed{': ' + said[-1] if said else ''}"
        return version

    return {
        name: value if isinstance(value, (MpiVersion, str)) else f"reading it failed: {value}"
        for name, value in session.each(hosts, read).items()
    }


def shown(versions: dict[str, MpiVersion | str]) -> dict[str, str]:
    """Each node's MPI as a gate's details give it ("Open MPI 4.1.4", or why it was not read)."""
    return {host: str(version) for host, version in versions.items()}


def _grouped(versions: dict[str, MpiVersion | str], key: Callable[[MpiVersion], str]) -> list[tuple[str, list[str]]]:
    """The hosts that read a version, grouped by `key` of it in inventory order, each group shown
    by its first host's version: (shown, hosts) per group."""
    groups: dict[str, tuple[str, list[str]]] = {}
    for name, version in versions.items():
        if isinstance(version, MpiVersion):
            groups.setdefault(key(version), (str(version), []))[1].append(name)
    return list(groups.values())


def _listed(groups: list[tuple[str, list[str]]]) -> str:
    return "; ".join(f"{shown} on {', '.join(names)}" for shown, names in groups)


def version_skew(versions: dict[str, MpiVersion | str]) -> str | None:
    """What to say when the nodes run one MPI series at different versions (4.1.4 and 4.1.6): the
    job may well start, but Open MPI promises nothing unless every node runs the same version
    (its README; Open MPI 5's PRRTE refuses daemons of another version outright)."""
    groups = _grouped(versions, str)
    if len(groups) < 2:
        return None
    return (
        f"the nodes run different versions of their MPI ({_listed(groups)}): Open MPI supports a job only with the "
        "same version on every node; install one (mpi.source: archive ships one)"
    )


def mixed_mpi_reason(versions: dict[str, MpiVersion | str]) -> str | None:
    """Why one job cannot span these hosts (mpirun missing, or MPI series that cannot mix), or None."""
    missing = {name: why for name, why in versions.items() if isinstance(why, str)}
    if missing:
        named = "; ".join(f"{name}: {why}" for name, why in missing.items())
        return f"no usable mpirun on {', '.join(missing)} ({named}): run `rdmaprov apply` (openmpi) or fix mpi.prefix"
    groups = _grouped(versions, lambda version: version.series)
    if len(groups) < 2:
        return None
    parts = _listed(groups)
    first = groups[0][1]
    return (
        f"one MPI job cannot span these nodes: {parts}. mpirun starts its own launcher daemon on every node "
        "(Open MPI 4: orted, Open MPI 5: prted) and ranks of different MPI versions cannot talk to each other. "
        f"Gate each group on its own (e.g. `rdmaprov verify --gates --limit {','.join(first)}`), or install one "
        "MPI on every node (mpi.source: archive ships one, or prefix)"
    )
