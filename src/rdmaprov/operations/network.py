"""Network devices: the declared netdevs exist, with their MTUs set now (boot-time MTUs are a boot script)."""

from __future__ import annotations

from pyinfra import host
from pyinfra.api import StringCommand

from rdmaprov.engine.desired import operation
from rdmaprov.engine.factcache import fact
from rdmaprov.facts.system import NetDevices
from rdmaprov.quoting import sh_join


def missing_netdevs(wanted: list[str], present: dict[str, int]) -> None:
    """Fail clearly, naming the host's real netdevs, when the inventory names one it lacks."""
    missing = [n for n in wanted if n not in present]
    if missing:
        raise ValueError(
            f"netdev {', '.join(missing)} does not exist on {host.name} (it has {', '.join(sorted(present))}); fix the "
            "inventory"
        )


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
