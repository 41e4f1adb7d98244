"""RoCE's lossless chain (roce_qos): the RDMA-CM ToS and verbs traffic class on every RoCE device,
and on a RoCE NIC trust DSCP, PFC on the RoCE priority alone, the DSCP → priority entries and
DCQCN, set now and put back at every boot (none of it survives a reboot by itself).
NCCL_IB_TC/NCCL_IB_SL come from the same declaration (nccl_env); the gates send in its class.
"""

from __future__ import annotations

from pyinfra.api import deploy

from rdmaprov.deploys.boot import boot_script
from rdmaprov.deploys.softroce import NAME as RXE_LINKS
from rdmaprov.engine.context import NodeContext
from rdmaprov.engine.factcache import fact
from rdmaprov.facts.rdma import RoceQosState
from rdmaprov.inventory.roce_qos import QosLink, RoceQos, chain_links
from rdmaprov.operations.roce_qos import chain_now, link_commands

NAME = "rdmaprov-roce-qos"


def render_script(qos: RoceQos, links: list[QosLink]) -> str:
    """Every link's lines, whatever they are now: at boot nothing is set yet. No `set -e`: a link
    that fails (a NIC replaced by one without DCB) must not keep the others from being set."""
    lines = [
        "#!/bin/sh",
        f"# Managed by rdmaprov: RoCE QoS, profile {qos.profile} (DSCP {qos.dscp} = ToS {qos.tos} on priority "
        f"{qos.priority}; CNPs DSCP {qos.cnp_dscp} on priority {qos.cnp_priority}).",
    ]
    return "\n".join(lines + link_commands([link for link in links if not link.blocking])) + "\n"


@deploy("roce_qos")
def roce_qos(ctx: NodeContext) -> None:
    node = ctx.node
    qos = node.qos
    declared, storage = node.rdma.compute_devices, node.rdma.storage_hcas
    script, netdevs = None, []
    if qos is not None:
        state = fact(RoceQosState)
        script = render_script(qos, chain_links(qos, node.fabric, state, declared, storage))
        netdevs = list(node.rdma.netdevs) or sorted({n for names in state.netdevs.values() for n in names})
    boot_script("RoCE QoS", NAME, script, netdevs, after=f"{RXE_LINKS}.service")
    chain_now(name="RoCE QoS now", qos=qos, fabric=node.fabric, declared=declared, storage=list(storage))
