"""What the gates run on the nodes: the CPU allreduce probe, built once with the nodes' own mpicc
and shipped to the others (the same build-once mechanism as NCCL)."""

from __future__ import annotations

from dataclasses import dataclass
from importlib import resources

from pyinfra.api import deploy

from rdmaprov.builds.spec import BuildSpec, RecipeSettings, Source
from rdmaprov.deploys.builds import build_and_ship, platform
from rdmaprov.deploys.openmpi import archive_identity, linked_mpi
from rdmaprov.engine.context import NodeContext
from rdmaprov.operations.builds import Recipe
from rdmaprov.parsers.node import Gpu
from rdmaprov.parsers.system import OsInfo
from rdmaprov.paths import PROBE_PREFIX
from rdmaprov.quoting import sh

PROBE_VERSION = "1"


def probe_source() -> str:
    return resources.files("rdmaprov.health.gates").joinpath("probe/allreduce_probe.c").read_text()


@dataclass(frozen=True)
class ProbeSettings(RecipeSettings):
    """The node's MPI, which the probe is compiled with and linked against."""

    mpicc: str
    mpi_env: str  # what the MPI's compiler needs in its environment (a shipped MPI's OPAL_PREFIX)
    mpi_archive: str  # the shipped MPI's sha256, "" for the others


def probe_build(settings: ProbeSettings, os_info: OsInfo, gpus: list[Gpu]) -> BuildSpec:
    return BuildSpec(
        name="allreduce-probe",
        version=PROBE_VERSION,
        source=Source(kind="inline", files=(("allreduce_probe.c", probe_source()),)),
        script=f'mkdir -p "$STAGE/bin" && {settings.mpi_env}{sh(settings.mpicc)} -O2 '
        '-o "$STAGE/bin/allreduce_probe" allreduce_probe.c',
        prefix=PROBE_PREFIX,
        inputs=(platform(os_info), ("mpi", settings.mpicc), *linked_mpi(settings.mpi_archive)),
    )


PROBE = Recipe("allreduce_probe", probe_build)


@deploy("gate_tools")
def gate_tools(ctx: NodeContext) -> None:
    mpi = ctx.node.mpi
    build_and_ship(ctx, PROBE, "allreduce probe", ProbeSettings(mpi.mpicc, mpi.site_env, archive_identity(ctx)))
