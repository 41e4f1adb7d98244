"""The NVIDIA driver and what an NVSwitch board needs beside it: the driver installed as pinned,
in the declared kernel module flavor, with a reboot owed until the running module is that one;
the fabric manager and NSCQ pinned to the driver's exact version."""

from __future__ import annotations

from pyinfra import host
from pyinfra.api import StringCommand

from rdmaprov.engine.desired import operation
from rdmaprov.engine.factcache import fact
from rdmaprov.engine.notes import reboot_required
from rdmaprov.facts.gpu import DriverState, FabricManager, NvidiaDriver
from rdmaprov.nvidia import driver_matches
from rdmaprov.operations.packages import install_command, known_os
from rdmaprov.parsers.system import OsInfo
from rdmaprov.quoting import sh, sh_join

# The meta package that installs the driver with its kernel modules, by flavor (apt).
_APT_DRIVER = {"proprietary": "cuda-drivers-{branch}", "open": "nvidia-open-{branch}"}
# The dnf module stream of each flavor (NVIDIA's RHEL repositories).
_DNF_STREAM = {"proprietary": "{branch}-dkms", "open": "{branch}-open"}


def _refuse_old_rhel(os_info: OsInfo) -> None:
    if os_info.major in ("6", "7"):
        raise ValueError(
            f"rdmaprov installs NVIDIA drivers on RHEL 8 and newer, not {os_info.pretty_name}: install it yourself and "
            "leave gpu.driver_version unset"
        )


def driver_command(os_info: OsInfo, driver: str, flavor: str = "proprietary", switching: bool = False) -> str:
    """Install driver `driver` (a branch such as 535, or an exact 535.129.03) from the CUDA
    repository with kernel modules of `flavor`; `switching`: the other flavor is installed now."""
    branch = driver.split(".")[0]
    if os_info.family == "debian":
        name = _APT_DRIVER[flavor].format(branch=branch)
        if "." in driver:  # the two meta packages' revisions differ (-1, -0ubuntu1): any revision
            name += f"={driver}-1" if flavor == "proprietary" else f"={driver}-*"
        return install_command("debian", [name])
    _refuse_old_rhel(os_info)
    stream = sh("nvidia-driver:" + _DNF_STREAM[flavor].format(branch=branch))
    # switching flavor: the other stream's kmod packages must make way (--allowerasing)
    reset, erase = ("dnf -y module reset nvidia-driver && ", " --allowerasing") if switching else ("", "")
    if "." in driver:
        return f"{reset}dnf -y module enable {stream} && dnf -y install{erase} {sh('cuda-drivers-' + driver)}"
    return f"{reset}dnf -y module install{erase} {stream}"


@operation()
def nvidia_driver(version: str | None, flavor: str = "proprietary"):
    """The declared driver installed with `flavor` kernel modules; a reboot owed whenever the
    running module is not that one."""
    if version is None:
        host.noop("NVIDIA driver not managed on this node")
        return
    os_info = known_os()
    driver = fact(NvidiaDriver)
    switching = bool(driver.flavor) and driver.flavor != flavor
    if driver_matches(version, driver.installed) and not switching:
        if driver.loaded != driver.installed:
            running = f"{driver.loaded} is loaded" if driver.loaded else "no NVIDIA module is loaded"
            reboot_required(f"NVIDIA driver {driver.installed} is installed but {running}: reboot to load it")
        host.noop(f"NVIDIA driver {driver.installed} installed ({driver.flavor or flavor} kernel modules)")
        return
    change = f"{driver.flavor} → {flavor} kernel modules" if switching else f"{driver.installed or 'none'} → {version}"
    reboot_required(f"NVIDIA driver {change}: the new kernel module loads at the next boot")
    yield StringCommand(driver_command(os_info, version, flavor, switching))


def driver_ready(version: str, driver: DriverState) -> bool:
    """The declared driver is the one installed and running: services that talk to it (the
    fabric manager, nvidia-persistenced) and its peer-memory module can start now."""
    return driver_matches(version, driver.installed) and driver.loaded == driver.installed


def fabric_manager_pin(declared: str, installed: str) -> str | None:
    """The exact version the fabric manager must have: the declared driver's where it is exact,
    else the installed driver's where that is of the declared branch; None (newest of the
    branch, as the driver's own meta package takes) before the driver is in place."""
    if "." in declared:
        return declared
    return installed if driver_matches(declared, installed) else None


def fabric_manager_command(os_info: OsInfo, branch: str, pin: str | None, flavor: str) -> str:
    """Install the fabric manager and NSCQ (NVSwitch configuration and query, which DCGM and
    nvidia-smi read NVSwitches with) of driver branch `branch`, pinned to `pin` where known."""
    if os_info.family == "debian":
        names = [f"nvidia-fabricmanager-{branch}", f"libnvidia-nscq-{branch}"]
        if pin:
            names = [f"{name}={pin}-*" for name in names]
        # the pin may be older than what a newer driver release pulled in: allow going back
        return install_command("debian", names, downgrade=True)
    _refuse_old_rhel(os_info)
    if pin:
        return f"dnf -y install {sh_join([f'nvidia-fabric-manager-{pin}', f'libnvidia-nscq-{branch}-{pin}'])}"
    return f"dnf -y module install {sh('nvidia-driver:' + _DNF_STREAM[flavor].format(branch=branch) + '/fm')}"


@operation()
def fabric_manager(driver: str | None, nvswitch: bool, flavor: str = "proprietary"):
    """On NVSwitch nodes whose driver rdmaprov manages: the fabric manager of the driver's exact
    version; one that differs (a driver update without it, or by hand) is reinstalled pinned."""
    if driver is None or not nvswitch:
        host.noop("fabric manager not needed here" if driver else "NVIDIA driver not managed on this node")
        return
    os_info = known_os()
    state = fact(FabricManager)
    pin = fabric_manager_pin(driver, fact(NvidiaDriver).installed)
    branch = driver.split(".")[0]
    if state.version and (state.version == pin or (pin is None and state.version.split(".")[0] == branch)):
        host.noop(f"fabric manager {state.version} installed")
        return
    yield StringCommand(fabric_manager_command(os_info, branch, pin, flavor))
