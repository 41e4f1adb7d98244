"""memlock limits: RDMA registers (pins) memory, so logins and services need memlock unlimited."""

from __future__ import annotations

from pyinfra.api import deploy

from rdmaprov.engine.context import NodeContext
from rdmaprov.operations.files import managed_file

# systemd only rereads system.conf.d on re-exec; skipped where systemd is not PID 1.
_REEXEC = "if [ -d /run/systemd/system ]; then systemctl daemon-reexec; fi"

# rdmaprov's own files: verify names any other file that sets memlock, as apply leaves those alone.
LOGIN_LIMITS = "/etc/security/limits.d/90-rdmaprov-memlock.conf"
SERVICE_LIMITS = "/etc/systemd/system.conf.d/90-rdmaprov-memlock.conf"


def memlock_value(memlock: str | int) -> tuple[str, str]:
    """(limits.conf value, systemd value) for the node's memlock setting (KiB in limits.conf, bytes for systemd)."""
    if memlock == "unlimited":
        return "unlimited", "infinity"
    return str(memlock), str(int(memlock) * 1024)


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
