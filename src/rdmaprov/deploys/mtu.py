"""NIC MTU where the inventory asks for it, now and after every reboot.

eRDMA has a hard rule (a wrong MTU corrupts data with NCCL's LL128 protocol): 8500 when the VPC
carries jumbo frames, 1400 when it does not. Declared MTUs that break the rule are refused.
"""

from __future__ import annotations

from pyinfra import host
from pyinfra.api import StringCommand, deploy

from rdmaprov.deploys.boot import boot_script
from rdmaprov.deploys.softroce import missing_netdevs
from rdmaprov.engine.context import NodeContext
from rdmaprov.engine.desired import operation
from rdmaprov.engine.factcache import fact
from rdmaprov.facts.system import NetDevices
from rdmaprov.quoting import sh_join

NAME = "rdmaprov-mtu"


def render_script(mtus: dict[str, int]) -> str:
    lines = ["#!/bin/sh", "# Managed by rdmaprov: NIC MTUs from the inventory."]
    lines += [sh_join(["ip", "link", "set", "dev", netdev, "mtu", int(mtu)]) for netdev, mtu in mtus.items()]
    return "\n".join(lines) + "\n"


@operation()
def mtu_now(mtus: dict[str, int]):
    """Set each netdev's MTU where it differs; fail on a netdev the host does not have."""
    if not mtus:
        host.noop("no MTU declared")
        return
    present = fact(NetDevices)
    missing_netdevs(list(mtus), present)
    todo = {netdev: mtu for netdev, mtu in mtus.items() if present[netdev] != mtu}
    if not todo:
        host.noop("MTUs as declared")
        return
    for netdev, mtu in todo.items():
        yield StringCommand(sh_join(["ip", "link", "set", "dev", netdev, "mtu", int(mtu)]))


@deploy("mtu")
def mtu(ctx: NodeContext) -> None:
    mtus = ctx.node.wanted_mtus()
    boot_script("NIC MTU", NAME, render_script(mtus) if mtus else None, list(mtus), before="rdmaprov-rxe-links.service")
    mtu_now(name="NIC MTU now", mtus=mtus)
