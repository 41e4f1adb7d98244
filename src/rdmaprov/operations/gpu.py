"""The NVIDIA driver: installed as pinned, with a reboot owed until the running kernel module is that one."""

from __future__ import annotations

from pyinfra import host
from pyinfra.api import StringCommand

from rdmaprov.engine.desired import operation
from rdmaprov.engine.factcache import fact
from rdmaprov.engine.notes import reboot_required
from rdmaprov.facts.gpu import NvidiaDriver
from rdmaprov.nvidia import driver_matches
from rdmaprov.operations.packages import install_command, known_os
from rdmaprov.parsers.system import OsInfo
from rdmaprov.quoting import sh


def driver_command(os_info: OsInfo, driver: str) -> str:
    """Install driver `driver` (a branch such as 535, or an exact 535.129.03) from the CUDA repository."""
    branch = driver.split(".")[0]
    if os_info.family == "debian":
        return install_command("debian", [f"cuda-drivers-{branch}" + (f"={driver}-1" if "." in driver else "")])
    if os_info.major in ("6", "7"):
        raise ValueError(
            f"rdmaprov installs NVIDIA drivers on RHEL 8 and newer, not {os_info.pretty_name}: install it yourself and "
            "leave gpu.driver_version unset"
        )
    stream = sh(f"nvidia-driver:{branch}-dkms")
    if "." in driver:
        return f"dnf -y module enable {stream} && dnf -y install {sh('cuda-drivers-' + driver)}"
    return f"dnf -y module install {stream}"


@operation()
def nvidia_driver(version: str | None):
    """The declared driver installed; a reboot owed whenever the running module is not that one."""
    if version is None:
        host.noop("NVIDIA driver not managed on this node")
        return
    os_info = known_os()
    driver = fact(NvidiaDriver)
    if driver_matches(version, driver.installed):
        if driver.loaded != driver.installed:
            running = f"{driver.loaded} is loaded" if driver.loaded else "no NVIDIA module is loaded"
            reboot_required(f"NVIDIA driver {driver.installed} is installed but {running}: reboot to load it")
        host.noop(f"NVIDIA driver {driver.installed} installed")
        return
    reboot_required(
        f"NVIDIA driver {driver.installed or 'none'} → {version}: the new kernel module loads at the next boot"
    )
    yield StringCommand(driver_command(os_info, version))
