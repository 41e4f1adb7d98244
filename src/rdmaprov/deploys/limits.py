"""memlock limits: RDMA registers (pins) memory, so logins and services need memlock unlimited."""

from __future__ import annotations

from pyinfra.api import deploy

from rdmaprov.engine.context import NodeContext
from rdmaprov.operations.files import managed_file
from rdmaprov.parsers.limits import LOGIN_LIMITS, SERVICE_LIMITS, memlock_value

# systemd only rereads system.conf.d on re-exec; skipped where systemd is not PID 1.
_REEXEC = "if [ -d /run/systemd/system ]; then systemctl daemon-reexec; fi"


def render_limits_conf(value: str) -> str:
    return (
        "# Managed by rdmaprov: RDMA needs locked (pinned) memory.\n"
        f"*    soft memlock {value}\n*    hard memlock {value}\n"
        f"root soft memlock {value}\nroot hard memlock {value}\n"
    )


def render_systemd_conf(value: str) -> str:
    return f"# Managed by rdmaprov: memlock for every systemd service.\n[Manager]\nDefaultLimitMEMLOCK={value}\n"


@deploy("limits")
def limits(ctx: NodeContext) -> None:
    pam_value, systemd_value = memlock_value(ctx.node.memlock)
    managed_file(
        name="memlock for logins",
        path=LOGIN_LIMITS,
        content=render_limits_conf(pam_value),
    )
    managed_file(
        name="memlock for services",
        path=SERVICE_LIMITS,
        content=render_systemd_conf(systemd_value),
        after_change=_REEXEC,
    )
