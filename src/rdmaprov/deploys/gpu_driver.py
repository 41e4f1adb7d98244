"""NVIDIA driver and CUDA toolkit, pinned in the inventory, from NVIDIA's repositories or a mirror.

Nodes without GPUs (gpu.count 0) plan the same operations and do nothing. The driver is judged
by the kernel module's version on disk and in the running kernel: a node whose driver changes
(or whose loaded module differs from the installed one) is reported "reboot required" and is
rebooted only with --allow-reboot.
"""

from __future__ import annotations

from pyinfra import host
from pyinfra.api import StringCommand, deploy

from rdmaprov.deploys.repository import vendor_repository
from rdmaprov.engine.context import NodeContext
from rdmaprov.engine.desired import operation
from rdmaprov.engine.factcache import fact
from rdmaprov.engine.notes import reboot_required
from rdmaprov.facts.gpu import NvidiaDriver
from rdmaprov.facts.system import Os
from rdmaprov.nvidia import cuda_home, cuda_repo, driver_matches, toolkit_package
from rdmaprov.operations.files import managed_file
from rdmaprov.operations.packages import install_command, known_os, packages
from rdmaprov.parsers.system import OsInfo
from rdmaprov.quoting import sh, sh_single

PROFILE = "/etc/profile.d/rdmaprov-cuda.sh"


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


def render_profile(cuda: str) -> str:
    home = cuda_home(cuda)
    return (
        f"# Managed by rdmaprov: CUDA {cuda}.\n"
        f"export CUDA_HOME={sh_single(home)}\n"
        f'export PATH={sh_single(home + "/bin")}:"$PATH"\n'
    )


@deploy("gpu_driver")
def gpu_driver(ctx: NodeContext) -> None:
    gpu = ctx.node.gpu  # None on a node without GPUs: nothing is installed there
    driver, cuda = (gpu.driver_version, gpu.cuda_version) if gpu else (None, None)
    os_info = fact(Os)
    repo = cuda_repo(os_info, gpu.repo) if gpu and (driver or cuda) else None
    vendor_repository(
        ctx,
        "CUDA repository",
        "rdmaprov-cuda",
        os_info,
        apt_source=f"{repo.url}/ /" if repo else None,
        yum_baseurl=repo.url if repo else None,
        key=(gpu.repo_key or repo.key_url) if gpu and repo else None,
        key_setting="gpu.repo_key",
    )
    nvidia_driver(name="NVIDIA driver", version=driver)
    packages(
        name="CUDA toolkit",
        by_family={"debian": [toolkit_package(cuda)], "rhel": [toolkit_package(cuda)]} if cuda else {},
    )
    managed_file(name="CUDA on PATH", path=PROFILE, content=render_profile(cuda) if cuda else None)
