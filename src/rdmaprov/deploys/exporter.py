"""The RDMA Prometheus exporter as a systemd service under its own unprivileged user (opt-in).

The exporter is one file of this package, run by the node's Python with the distro's Prometheus
client: nothing to download on air-gapped nodes beyond the distro packages.
"""

from __future__ import annotations

from importlib import resources

from pyinfra.api import deploy

from rdmaprov.engine.context import NodeContext
from rdmaprov.operations.files import managed_file
from rdmaprov.operations.packages import packages
from rdmaprov.operations.services import unit_enabled, unit_running
from rdmaprov.operations.users import system_user
from rdmaprov.packages import EXPORTER
from rdmaprov.quoting import systemd_arg

USER = "rdmaprov-exporter"
SCRIPT = "/usr/local/lib/rdmaprov/rdma_exporter.py"
UNIT = "rdmaprov-exporter.service"


def exporter_source() -> str:
    return resources.files("rdmaprov.exporter").joinpath("rdma_exporter.py").read_text()


def render_unit(listen: str) -> str:
    return (
        "[Unit]\nDescription=rdmaprov RDMA exporter for "
        "Prometheus\nAfter=network-online.target\nWants=network-online.target\n\n"
        f"[Service]\nUser={USER}\nGroup={USER}\nExecStart=/usr/bin/python3 {SCRIPT} --listen {systemd_arg(listen)}\n"
        "Restart=on-failure\nRestartSec=5\nNoNewPrivileges=yes\nProtectSystem=strict\nProtectHome=yes\nPrivateTmp=yes\n"
        "CapabilityBoundingSet=\nRestrictAddressFamilies=AF_INET AF_INET6 AF_UNIX\n\n"
        "[Install]\nWantedBy=multi-user.target\n"
    )


@deploy("exporter")
def exporter(ctx: NodeContext) -> None:
    enabled, listen = ctx.node.exporter.enabled, ctx.node.exporter.listen
    packages(name="exporter packages", by_family=EXPORTER if enabled else {})
    system_user(name="exporter user", user=USER, present=enabled)
    managed_file(
        name="exporter program",
        path=SCRIPT,
        content=exporter_source() if enabled else None,
        after_change=f"systemctl try-restart {UNIT} || true",
    )
    managed_file(
        name="exporter unit",
        path=f"/etc/systemd/system/{UNIT}",
        content=render_unit(listen) if enabled else None,
        after_change=f"systemctl daemon-reload && systemctl try-restart {UNIT} || true",
    )
    unit_enabled(name="exporter at boot", unit=UNIT, enabled=enabled)
    unit_running(name="exporter running", unit=UNIT, running=enabled)
