"""MPI under a prefix: an install rdmaprov does not make (HPC-X, a site build) is checked for, never installed."""

from __future__ import annotations

from pyinfra import host

from rdmaprov.engine.desired import operation
from rdmaprov.engine.factcache import fact
from rdmaprov.facts.files import PathExists


@operation()
def mpirun_present(prefix: str | None, source: str = "prefix"):
    """Fail clearly when the declared prefix has no mpirun (rdmaprov does not install HPC-X)."""
    if prefix is None:
        host.noop("OpenMPI from the distro" if source == "distro" else f"OpenMPI from mpi.source {source}")
        return
    if not fact(PathExists, path=f"{prefix}/bin/mpirun"):
        raise ValueError(
            f"{prefix}/bin/mpirun does not exist on {host.name}; install HPC-X/OpenMPI there or fix mpi.prefix"
        )
    host.noop(f"{prefix}/bin/mpirun present")
    return
    yield  # an operation is a generator even when it has nothing to run
