"""What the gates run on the nodes: the CPU allreduce probe, compiled with the node's own mpicc."""

from __future__ import annotations

from importlib import resources
from typing import Any

from pyinfra.api import deploy

from rdmaprov.deploys.openmpi import mpi_prefix
from rdmaprov.engine.context import NodeContext
from rdmaprov.operations.build import built
from rdmaprov.operations.files import managed_file

PROBE_DIR = "/opt/rdmaprov/probe"
PROBE_SOURCE = f"{PROBE_DIR}/allreduce_probe.c"
PROBE_BINARY = f"{PROBE_DIR}/allreduce_probe"


def probe_source() -> str:
    return resources.files("rdmaprov.gates").joinpath("probe/allreduce_probe.c").read_text()


def mpicc(node: dict[str, Any]) -> str:
    prefix = mpi_prefix(node)
    return f"{prefix}/bin/mpicc" if prefix else "mpicc"


@deploy("gate_tools")
def gate_tools(ctx: NodeContext) -> None:
    managed_file(name="allreduce probe source", path=PROBE_SOURCE, content=probe_source())
    build = f"{mpicc(ctx.node)} -O2 -o {PROBE_BINARY} {PROBE_SOURCE}"
    built(name="allreduce probe built", binary=PROBE_BINARY, source=PROBE_SOURCE, build=build)
