"""SoftRoCE (fabric softroce): rdma_rxe loaded now and at boot, an rxe link on each declared
netdev now and after every reboot (a systemd unit), never a duplicate link on re-apply."""

from __future__ import annotations

import shlex

from pyinfra import host
from pyinfra.api import StringCommand, deploy, operation

from rdmaprov.engine.context import NodeContext
from rdmaprov.facts.rdma import RdmaLinks
from rdmaprov.facts.system import NetDevices
from rdmaprov.operations.files import managed_file
from rdmaprov.operations.kernel import module_loaded
from rdmaprov.operations.services import unit_enabled

SCRIPT = "/usr/local/sbin/rdmaprov-rxe-links"
UNIT = "rdmaprov-rxe.service"


def rxe_links(netdevs: list[str]) -> list[tuple[str, str]]:
    """(rxe device, netdev) pairs: rxe0 on the first netdev, rxe1 on the second..."""
    return [(f"rxe{index}", netdev) for index, netdev in enumerate(netdevs)]


def render_script(links: list[tuple[str, str]]) -> str:
    lines = ["#!/bin/sh", "# Managed by rdmaprov: SoftRoCE links on the declared netdevs (idempotent).", "set -e", "modprobe rdma_rxe"]
    for device, netdev in links:
        lines.append(f"rdma link show {device}/1 >/dev/null 2>&1 || rdma link add {device} type rxe netdev {netdev}")
    return "\n".join(lines) + "\n"


def render_unit(netdevs: list[str]) -> str:
    devices = " ".join(f"sys-subsystem-net-devices-{n}.device" for n in netdevs)
    return (
        "[Unit]\nDescription=rdmaprov SoftRoCE (rxe) links\n"
        f"After=network.target systemd-modules-load.service {devices}\nWants={devices}\n\n"
        f"[Service]\nType=oneshot\nExecStart={SCRIPT}\nRemainAfterExit=yes\n\n"
        "[Install]\nWantedBy=multi-user.target\n"
    )


@operation()
def rxe_links_present(links: list[tuple[str, str]]):
    """Add the rxe links that are missing now; fail clearly on a netdev the host does not have."""
    if not links:
        host.noop("no SoftRoCE links declared")
        return
    netdevs = host.get_fact(NetDevices)
    missing_dev = [netdev for _, netdev in links if netdev not in netdevs]
    if missing_dev:
        raise ValueError(f"netdev {', '.join(missing_dev)} does not exist on {host.name} (it has {', '.join(sorted(netdevs))}); fix rdma.netdevs")
    existing = host.get_fact(RdmaLinks)
    have = {(link.device, link.netdev) for link in existing}
    by_netdev = {link.netdev for link in existing if link.device.startswith("rxe")}
    todo = [(device, netdev) for device, netdev in links if (device, netdev) not in have and netdev not in by_netdev]
    if not todo:
        host.noop("rxe links present")
        return
    for device, netdev in todo:
        yield StringCommand(f"rdma link add {shlex.quote(device)} type rxe netdev {shlex.quote(netdev)}")


@deploy("softroce")
def softroce(ctx: NodeContext) -> None:
    active = ctx.node.get("fabric") == "softroce"
    netdevs = (ctx.node.get("rdma") or {}).get("netdevs") or []
    if active and not netdevs:
        raise ValueError("fabric softroce needs rdma.netdevs (the Ethernet devices to put rxe links on)")
    links = rxe_links(netdevs) if active else []
    managed_file(name="load rdma_rxe at boot", path="/etc/modules-load.d/rdmaprov-rxe.conf", content="rdma_rxe\n" if active else None)
    module_loaded(name="rdma_rxe loaded", module="rdma_rxe", present=active)
    managed_file(name="rxe link script", path=SCRIPT, content=render_script(links) if active else None, mode="755")
    managed_file(name="rxe link unit", path=f"/etc/systemd/system/{UNIT}", content=render_unit(netdevs) if active else None, after_change="systemctl daemon-reload")
    unit_enabled(name="rxe links at boot", unit=UNIT, enabled=active)
    rxe_links_present(name="rxe links now", links=links)
