"""NIC MTU where the inventory asks for it, now and after every reboot.

eRDMA has a hard rule (a wrong MTU corrupts data with NCCL's LL128 protocol): 8500 when the VPC
carries jumbo frames, 1400 when it does not. Declared MTUs that break the rule are refused.
"""

from __future__ import annotations

from pyinfra.api import deploy

from rdmaprov.deploys.boot import boot_script
from rdmaprov.engine.context import NodeContext
from rdmaprov.operations.network import mtu_now
from rdmaprov.quoting import sh_join

NAME = "rdmaprov-mtu"


def render_script(mtus: dict[str, int]) -> str:
    lines = ["#!/bin/sh", "# Managed by rdmaprov: NIC MTUs from the inventory."]
    lines += [sh_join(["ip", "link", "set", "dev", netdev, "mtu", int(mtu)]) for netdev, mtu in mtus.items()]
    return "\n".join(lines) + "\n"


@deploy("mtu")
def mtu(ctx: NodeContext) -> None:
    mtus = ctx.node.wanted_mtus()
    boot_script("NIC MTU", NAME, render_script(mtus) if mtus else None, list(mtus), before="rdmaprov-rxe-links.service")
    mtu_now(name="NIC MTU now", mtus=mtus)
