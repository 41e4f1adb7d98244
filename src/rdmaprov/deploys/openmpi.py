"""OpenMPI for the all_reduce gate and for users' jobs: from the distro, or an existing prefix.

HPC-X and site builds live under a prefix; rdmaprov then only checks that `bin/mpirun` is there
and puts the prefix on login shells' PATH (the gate itself passes `--prefix` to mpirun, because
non-interactive SSH shells read no profile).
"""

from __future__ import annotations

from pyinfra import host
from pyinfra.api import deploy

from rdmaprov.engine.context import NodeContext
from rdmaprov.engine.desired import operation
from rdmaprov.engine.factcache import fact
from rdmaprov.facts.files import PathExists
from rdmaprov.inventory.config import MpiConfig
from rdmaprov.operations.files import managed_file
from rdmaprov.operations.packages import packages
from rdmaprov.packages import BUILD_TOOLS, OPENMPI
from rdmaprov.quoting import sh_single

PROFILE = "/etc/profile.d/rdmaprov-mpi.sh"


def mpi_package_sets(mpi: MpiConfig) -> dict[str, list[str]]:
    """Distro OpenMPI plus the compilers mpicc needs; nothing for a prefix install."""
    if mpi.source != "distro":
        return {}
    return {family: OPENMPI[family] + BUILD_TOOLS[family] for family in OPENMPI}


def render_profile(prefix: str) -> str:
    return (
        "# Managed by rdmaprov: OpenMPI installed under a prefix.\n"
        f'export PATH={sh_single(prefix + "/bin")}:"$PATH"\n'
        f"export LD_LIBRARY_PATH={sh_single(prefix + '/lib')}${{LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}}\n"
    )


@operation()
def mpirun_present(prefix: str | None):
    """Fail clearly when the declared prefix has no mpirun (rdmaprov does not install HPC-X)."""
    if prefix is None:
        host.noop("OpenMPI from the distro")
        return
    if not fact(PathExists, path=f"{prefix}/bin/mpirun"):
        raise ValueError(
            f"{prefix}/bin/mpirun does not exist on {host.name}; install HPC-X/OpenMPI there or fix mpi.prefix"
        )
    host.noop(f"{prefix}/bin/mpirun present")
    return
    yield  # an operation is a generator even when it has nothing to run


@deploy("openmpi")
def openmpi(ctx: NodeContext) -> None:
    prefix = ctx.node.mpi.install_prefix
    packages(name="OpenMPI packages", by_family=mpi_package_sets(ctx.node.mpi))
    mpirun_present(name="mpirun under prefix", prefix=prefix)
    managed_file(name="OpenMPI prefix on PATH", path=PROFILE, content=render_profile(prefix) if prefix else None)
