"""Deploys: one per concern, composed in the order a node is built up.

Every deploy runs on every selected host and decides inside its operations whether anything
applies there, so all hosts share one operation sequence (pyinfra matches ops by position).
"""

from __future__ import annotations

from rdmaprov.deploys.builds import builds
from rdmaprov.deploys.containers import containers
from rdmaprov.deploys.erdma import erdma
from rdmaprov.deploys.exporter import exporter
from rdmaprov.deploys.gate_tools import gate_tools
from rdmaprov.deploys.gpu_driver import gpu_driver
from rdmaprov.deploys.limits import limits
from rdmaprov.deploys.mtu import mtu
from rdmaprov.deploys.nccl import nccl
from rdmaprov.deploys.nccl_env import nccl_env
from rdmaprov.deploys.netns_mode import netns_mode
from rdmaprov.deploys.node_check import node_check
from rdmaprov.deploys.openmpi import openmpi
from rdmaprov.deploys.package_sources import package_sources
from rdmaprov.deploys.rdma_userspace import rdma_userspace
from rdmaprov.deploys.roce_qos import roce_qos
from rdmaprov.deploys.slurm import slurm
from rdmaprov.deploys.softroce import softroce
from rdmaprov.deploys.ssh_trust import ssh_trust
from rdmaprov.engine.runner import Deploy
from rdmaprov.errors import UserError

STACK: dict[str, Deploy] = {
    "package_sources": package_sources,
    "erdma": erdma,
    "rdma_userspace": rdma_userspace,
    "gpu_driver": gpu_driver,
    "openmpi": openmpi,
    "mtu": mtu,
    "softroce": softroce,
    "roce_qos": roce_qos,
    "netns_mode": netns_mode,
    "ssh_trust": ssh_trust,
    "limits": limits,
    "nccl_env": nccl_env,
    "containers": containers,
    "nccl": nccl,
    "gate_tools": gate_tools,
    "builds": builds,
    "exporter": exporter,
    "node_check": node_check,
    "slurm": slurm,
}


def select_deploys(tags: list[str] | None) -> list[Deploy]:
    """The deploys to run, in stack order; `tags` restricts them by name."""
    if not tags:
        return list(STACK.values())
    wanted = {t.strip() for raw in tags for t in raw.split(",") if t.strip()}
    unknown = sorted(wanted - set(STACK))
    if unknown:
        raise UserError(f"--tags: unknown deploy(s) {', '.join(unknown)} (known: {', '.join(STACK)})")
    return [fn for name, fn in STACK.items() if name in wanted]
