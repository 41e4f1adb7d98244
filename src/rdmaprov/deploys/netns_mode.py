"""ib_core netns_mode: `exclusive` gives each network namespace (container) its own RDMA devices.

The module parameter is read-only once ib_core is loaded, so it is persisted in modprobe.d and
switched live with `rdma system set netns` — which the kernel allows only while no other network
namespace exists. Otherwise the host is reported "reboot required" with the reason.
"""

from __future__ import annotations

from pyinfra.api import deploy

from rdmaprov.engine.context import NodeContext
from rdmaprov.operations.files import managed_file
from rdmaprov.operations.rdma import netns_mode_live

# ib_core's parameter: 1 = shared (the kernel's default), 0 = exclusive.
MODPROBE_VALUE = {"shared": 1, "exclusive": 0}
CONF = "/etc/modprobe.d/rdmaprov-ib_core.conf"


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
