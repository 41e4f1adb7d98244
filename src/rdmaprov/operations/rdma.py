"""The kernel's RDMA state, with the rdma tool: SoftRoCE (rxe) links and the network namespace mode, now.

What must also hold after a reboot (rxe links at boot, ib_core's netns_mode in modprobe.d) is the
deploys' business; these operations change the running kernel only.
"""

from __future__ import annotations

from pyinfra import host
from pyinfra.api import StringCommand

from rdmaprov.engine.desired import operation
from rdmaprov.engine.factcache import fact
from rdmaprov.engine.notes import reboot_required
from rdmaprov.facts.rdma import RdmaLinks, RdmaSystem
from rdmaprov.facts.system import NetDevices, NetNamespaceCount
from rdmaprov.operations.network import missing_netdevs
from rdmaprov.quoting import sh_join


def add_link_command(device: str, netdev: str) -> str:
    return sh_join(["rdma", "link", "add", device, "type", "rxe", "netdev", netdev])


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


@operation()
def netns_mode_live(mode: str | None):
    """Switch the running kernel to `mode` when it can; otherwise owe a reboot, saying why."""
    if mode is None:
        host.noop("netns mode not declared")
        return
    current = fact(RdmaSystem).get("netns")
    if current is None:
        host.noop("ib_core is not loaded: the modprobe option applies when it loads")
        return
    if current == mode:
        host.noop(f"netns mode is {mode}")
        return
    namespaces = fact(NetNamespaceCount)
    if namespaces > 1:
        reboot_required(
            f"ib_core netns_mode is {current}, wanted {mode}: {namespaces - 1} other network namespace(s) exist, so it "
            "cannot switch live"
        )
        host.noop("netns mode switch needs a reboot")
        return
    yield StringCommand(f"rdma system set netns {mode}")
