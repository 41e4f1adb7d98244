"""ib_core netns_mode: `exclusive` gives each network namespace (container) its own RDMA devices.

The module parameter is read-only once ib_core is loaded, so it is persisted in modprobe.d and
switched live with `rdma system set netns` — which the kernel allows only while no other network
namespace exists. Otherwise the host is reported "reboot required" with the reason.
"""

from __future__ import annotations

from pyinfra import host
from pyinfra.api import StringCommand, deploy

from rdmaprov.engine.context import NodeContext
from rdmaprov.engine.desired import operation
from rdmaprov.engine.factcache import fact
from rdmaprov.engine.notes import reboot_required
from rdmaprov.facts.rdma import RdmaSystem
from rdmaprov.facts.system import NetNamespaceCount
from rdmaprov.operations.files import managed_file

# ib_core's parameter: 1 = shared (the kernel's default), 0 = exclusive.
MODPROBE_VALUE = {"shared": 1, "exclusive": 0}
CONF = "/etc/modprobe.d/rdmaprov-ib_core.conf"


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


@deploy("netns_mode")
def netns_mode(ctx: NodeContext) -> None:
    mode = ctx.node.netns_mode
    content = (
        f"# Managed by rdmaprov: RDMA network namespace mode ({mode}).\noptions ib_core "
        f"netns_mode={MODPROBE_VALUE[mode]}\n"
        if mode
        else None
    )
    managed_file(name="ib_core netns_mode at boot", path=CONF, content=content)
    netns_mode_live(name="ib_core netns_mode now", mode=mode)
