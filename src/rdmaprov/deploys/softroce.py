"""SoftRoCE (fabric softroce): rdma_rxe loaded now and at boot, an rxe link on each declared
netdev now and after every reboot (a systemd unit), never a duplicate link on re-apply."""

from __future__ import annotations

from pyinfra.api import deploy

from rdmaprov.deploys.boot import boot_script
from rdmaprov.engine.context import NodeContext
from rdmaprov.inventory.config import rxe_links
from rdmaprov.operations.files import managed_file
from rdmaprov.operations.kernel import module_loaded
from rdmaprov.operations.rdma import add_link_command, rxe_links_present
from rdmaprov.quoting import sh

NAME = "rdmaprov-rxe-links"


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
