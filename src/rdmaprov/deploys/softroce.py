"""SoftRoCE (fabric softroce): rdma_rxe loaded now and at boot, an rxe link on each declared
netdev now and after every reboot (a systemd unit), never a duplicate link on re-apply."""

from __future__ import annotations

from pyinfra import host
from pyinfra.api import StringCommand, deploy

from rdmaprov.deploys.boot import boot_script
from rdmaprov.engine.context import NodeContext
from rdmaprov.engine.desired import operation
from rdmaprov.engine.factcache import fact
from rdmaprov.facts.rdma import RdmaLinks
from rdmaprov.facts.system import NetDevices
from rdmaprov.operations.files import managed_file
from rdmaprov.operations.kernel import module_loaded
from rdmaprov.quoting import sh, sh_join

NAME = "rdmaprov-rxe-links"


def rxe_links(netdevs: list[str]) -> list[tuple[str, str]]:
    """(rxe device, netdev) pairs: rxe0 on the first netdev, rxe1 on the second..."""
    return [(f"rxe{index}", netdev) for index, netdev in enumerate(netdevs)]


def add_link_command(device: str, netdev: str) -> str:
    return sh_join(["rdma", "link", "add", device, "type", "rxe", "netdev", netdev])


def render_script(links: list[tuple[str, str]]) -> str:
    lines = [
        "#!/bin/sh",
        "# Managed by rdmaprov: SoftRoCE links on the declared netdevs (idempotent).",
        "set -e",
        "modprobe rdma_rxe",
    ]
    for device, netdev in links:
        lines.append(f"rdma link show {sh(device + '/1')} >/dev/null 2>&1 || {add_link_command(device, netdev)}")
    return "\n".join(lines) + "\n"


def missing_netdevs(wanted: list[str], present: dict[str, int]) -> None:
    """Fail clearly, naming the host's real netdevs, when the inventory names one it lacks."""
    missing = [n for n in wanted if n not in present]
    if missing:
        raise ValueError(
            f"netdev {', '.join(missing)} does not exist on {host.name} (it has {', '.join(sorted(present))}); fix the "
            "inventory"
        )


@operation()
def rxe_links_present(links: list[tuple[str, str]]):
    """Add the rxe links that are missing now; fail clearly on a netdev the host does not have."""
    if not links:
        host.noop("no SoftRoCE links declared")
        return
    missing_netdevs([netdev for _, netdev in links], fact(NetDevices))
    existing = fact(RdmaLinks)
    have = {(link.device, link.netdev) for link in existing}
    # A netdev carries one RDMA link: an rxe link udev renamed (rocep0s8) still covers its netdev.
    by_netdev = {link.netdev for link in existing}
    todo = [(device, netdev) for device, netdev in links if (device, netdev) not in have and netdev not in by_netdev]
    if not todo:
        host.noop("rxe links present")
        return
    for device, netdev in todo:
        yield StringCommand(add_link_command(device, netdev))


@deploy("softroce")
def softroce(ctx: NodeContext) -> None:
    active = ctx.node.fabric == "softroce"
    netdevs = list(ctx.node.rdma.netdevs)
    # A softroce node without netdevs never gets here: the loader refuses it (semantics.py).
    links = rxe_links(netdevs) if active else []
    managed_file(
        name="load rdma_rxe at boot",
        path="/etc/modules-load.d/rdmaprov-rxe.conf",
        content="rdma_rxe\n" if active else None,
    )
    module_loaded(name="rdma_rxe loaded", module="rdma_rxe", present=active)
    boot_script("rxe links", NAME, render_script(links) if active else None, netdevs if active else [])
    rxe_links_present(name="rxe links now", links=links)
