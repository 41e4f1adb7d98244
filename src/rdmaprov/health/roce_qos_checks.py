"""RoCE's lossless chain read back link by link against roce_qos (inventory/roce_qos.py says
what each link must be; the same links are what the roce_qos deploy sets).

A node whose trust, PFC mask, ToS or traffic class differs from the declaration fails here by
name, so one node left on `trust pcp` among a fleet on DSCP is named rather than found by a
slow job.
"""

from __future__ import annotations

from rdmaprov.health.findings import Checker
from rdmaprov.inventory.config import NodeConfig
from rdmaprov.inventory.roce_qos import chain_links
from rdmaprov.parsers.node import NodeReport

_BLOCKED = (
    "lossless RoCE needs a NIC with DCB (apply cannot give it one); where only the tool is missing, "
    "install it (iproute2 has dcb, MLNX_OFED or DOCA mlnx_qos) or set roce_qos.tool to the one the node has"
)
_HINT = "run `rdmaprov apply` (the roce_qos deploy sets it now and at every boot)"


def check_roce_qos(c: Checker, node: NodeConfig, report: NodeReport) -> None:
    """Every link of the chain where roce_qos is declared; a not-applicable finding where the
    fabric's QoS is not the hosts' (or SoftRoCE's NICs have no DCB)."""
    qos = node.roce_qos
    if not qos.enabled:
        return
    if (why := qos.scope(node.fabric)) is not None:
        c.not_applicable("roce_qos", "roce.qos", f"profile {qos.profile}", why)
        return
    links = chain_links(qos, node.fabric, report.roce_qos, node.named_devices, node.rdma.storage_hcas)
    if (why := qos.dcb_scope(node.fabric)) is not None:
        c.not_applicable("NICs", "roce.dcb", "trust DSCP, PFC, ECN", why)
    for link in links:
        if link.unknown is not None and link.blocking:
            c.check(link.subject, link.check, False, link.expected, link.unknown, _BLOCKED, apply_fixes=False)
        elif link.unknown is not None:
            c.unknown(link.subject, link.check, link.expected, link.unknown)
        else:
            c.check(link.subject, link.check, link.ok, link.expected, link.found, _HINT)
