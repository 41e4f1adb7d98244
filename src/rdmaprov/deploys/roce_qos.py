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
from rdmaprov.inventory.roce_qos import QosLink, RoceQos, chain_links, qos_devices
from rdmaprov.operations.packages import packages
from rdmaprov.operations.roce_qos import chain_now, link_commands
from rdmaprov.packages import ROCE_FIRMWARE

NAME = "rdmaprov-roce-qos"


def render_script(qos: RoceQos, links: list[QosLink]) -> str:
    """Every link's lines, whatever they are now: at boot nothing is set yet. A line that fails
    (a NIC replaced by one without DCB) does not keep the others from being set, and makes the
    unit fail, so `systemctl status` says so."""
    lines = [
        "#!/bin/sh",
        f"# Managed by rdmaprov: RoCE QoS, profile {qos.profile} (DSCP {qos.dscp} = ToS {qos.tos} on priority "
        f"{qos.priority}; CNPs DSCP {qos.cnp_dscp} on priority {qos.cnp_priority}).",
        "rc=0",
    ]
    at_boot = [link for link in links if link.unknown is None and not link.next_boot]  # firmware keeps its own
    lines += [f"{line} || rc=1" for line in link_commands(at_boot)]
    return "\n".join([*lines, "exit $rc"]) + "\n"


@deploy("roce_qos")
def roce_qos(ctx: NodeContext) -> None:
    node = ctx.node
    qos = node.qos
    named, storage = node.named_devices, node.rdma.storage_hcas
    script, netdevs = None, []
    if qos is not None:
        # read while planning: a SoftRoCE link made later in this apply is named by the inventory;
        # the firmware is not (the boot unit leaves it alone), and chain_now reads it once the tool is in
        state = fact(RoceQosState)
        script = render_script(qos, chain_links(qos, node.fabric, state, named, storage))
        devices = qos_devices(state, named, storage)
        netdevs = sorted({n for d in devices for n in state.netdevs.get(d, ())} | set(node.rdma.netdevs))
    # after the rxe links, and after MLNX_OFED's openibd, which reloads the driver stack
    boot_script("RoCE QoS", NAME, script, netdevs, after=f"{RXE_LINKS}.service openibd.service")
    firmware = qos is not None and qos.reads_firmware(node.fabric)
    packages(name="NIC firmware tool", by_family=ROCE_FIRMWARE if firmware else {})
    chain_now(name="RoCE QoS now", qos=qos, fabric=node.fabric, named=named, storage=list(storage))
