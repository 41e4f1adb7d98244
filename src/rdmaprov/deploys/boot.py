"""Settings that must hold after every reboot: a script run by a oneshot systemd unit at boot.

Used for what no distro-neutral config file covers (rxe links, NIC MTU): the same script runs
at boot and is idempotent, and the unit waits for the netdevs it touches.
"""

from __future__ import annotations

from rdmaprov.operations.files import managed_file
from rdmaprov.operations.services import unit_enabled
from rdmaprov.quoting import device_unit


def render_unit(description: str, script: str, netdevs: list[str], before: str = "", after: str = "") -> str:
    devices = " ".join(device_unit(n) for n in netdevs)
    order = f"Before={before}\n" if before else ""
    return (
        f"[Unit]\nDescription={description}\n"
        f"After=systemd-modules-load.service {devices}{' ' + after if after else ''}\nWants={devices}\n{order}\n"
        f"[Service]\nType=oneshot\nExecStart={script}\nRemainAfterExit=yes\n\n"
        "[Install]\nWantedBy=multi-user.target\n"
    )


def boot_script(
    label: str, name: str, script: str | None, netdevs: list[str], before: str = "", after: str = ""
) -> None:
    """Install (script set) or remove (None) /usr/local/sbin/NAME and NAME.service, enabled at boot."""
    path = f"/usr/local/sbin/{name}"
    unit = f"{name}.service"
    managed_file(name=f"{label} script", path=path, content=script, mode="755")
    unit_text = render_unit(f"rdmaprov: {label}", path, netdevs, before, after) if script is not None else None
    managed_file(
        name=f"{label} unit",
        path=f"/etc/systemd/system/{unit}",
        content=unit_text,
        after_change="systemctl daemon-reload",
    )
    unit_enabled(name=f"{label} at boot", unit=unit, enabled=script is not None)
