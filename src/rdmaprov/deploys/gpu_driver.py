"""NVIDIA driver and CUDA toolkit, pinned in the inventory, from NVIDIA's repositories or a mirror,
with what a training node needs beside the driver before its first job.

Nodes without GPUs (gpu.count 0) plan the same operations and do nothing. The driver is judged
by the kernel module's version on disk and in the running kernel: a node whose driver changes
(or whose loaded module differs from the installed one) is reported "reboot required" and is
rebooted only with --allow-reboot. Beside the driver:

- on NVSwitch boards (HGX/DGX), the fabric manager and NSCQ of the driver's exact version,
  enabled and running: CUDA fails there with "system not yet initialized" (error 802) until
  the fabric manager has set up the NVSwitch fabric;
- DCGM for the driver's CUDA major, its host engine running: verify runs its diagnostic;
- nvidia-persistenced, so the driver keeps the GPUs initialised between jobs;
- nvidia-peermem, now and at boot, on InfiniBand and RoCE nodes unless gates.rail.gpudirect is
  off, where the kernel's RDMA stack has the peer-memory API it needs: GPUDirect RDMA through
  it (elsewhere NCCL uses DMA-BUF where it can, or stages transfers through host memory).

Services that talk to the driver start only once the declared driver is the one running;
until the reboot they are enabled, so they start with it.
"""

from __future__ import annotations

from pyinfra.api import deploy

from rdmaprov.deploys.repository import vendor_repository
from rdmaprov.engine.context import NodeContext
from rdmaprov.engine.factcache import fact
from rdmaprov.facts.gpu import Gpus, NvidiaDriver, NvSwitches, PeerMemoryApi
from rdmaprov.facts.system import Os
from rdmaprov.inventory.config import GPUDIRECT_FABRICS, GpuConfig
from rdmaprov.nvidia import (
    arch_from_compute_cap,
    cuda_home,
    cuda_repo,
    dcgm_package,
    module_flavor,
    toolkit_package,
)
from rdmaprov.operations.files import managed_file
from rdmaprov.operations.gpu import driver_ready, fabric_manager, nvidia_driver
from rdmaprov.operations.kernel import module_loaded
from rdmaprov.operations.packages import packages
from rdmaprov.operations.services import unit_enabled, unit_running
from rdmaprov.quoting import sh_single

PROFILE = "/etc/profile.d/rdmaprov-cuda.sh"
PEERMEM_AT_BOOT = "/etc/modules-load.d/rdmaprov-nvidia-peermem.conf"
# nvidia-persistenced as rdmaprov runs it, in place of the packaged unit: Ubuntu's runs the
# daemon with --no-persistence-mode, stops it when nothing needs it and cannot be enabled (no
# [Install]); NVIDIA's own sample unit is this one, started at boot, persistence mode on.
PERSISTENCED_UNIT = "/etc/systemd/system/nvidia-persistenced.service"
PERSISTENCED = (
    "# Managed by rdmaprov (gpu_driver): the GPUs stay initialised between jobs.\n"
    "[Unit]\nDescription=NVIDIA Persistence Daemon\nWants=syslog.target\n\n"
    "[Service]\nType=forking\nExecStart=/usr/bin/nvidia-persistenced --persistence-mode --verbose\n"
    "ExecStopPost=/bin/rm -rf /var/run/nvidia-persistenced\n\n"
    "[Install]\nWantedBy=multi-user.target\n"
)


def render_profile(cuda: str) -> str:
    home = cuda_home(cuda)
    return (
        f"# Managed by rdmaprov: CUDA {cuda}.\n"
        f"export CUDA_HOME={sh_single(home)}\n"
        f'export PATH={sh_single(home + "/bin")}:"$PATH"\n'
    )


def node_flavor(gpu: GpuConfig, driver: str) -> str:
    """The kernel modules this node gets: its declared architecture, else its GPUs' as the
    driver already reports them (none before the first driver: then the branch decides)."""
    archs = [gpu.arch] if gpu.arch else sorted({arch_from_compute_cap(g.compute_cap) for g in fact(Gpus)})
    return module_flavor(gpu.kernel_modules, archs, driver)


def wants_peer_memory(ctx: NodeContext) -> bool:
    """GPUDirect RDMA is wanted: GPUs on an HCA fabric that can do it, and not turned off."""
    return ctx.node.fabric in GPUDIRECT_FABRICS and ctx.inventory.gates.rail.gpudirect != "off"


@deploy("gpu_driver")
def gpu_driver(ctx: NodeContext) -> None:
    gpu = ctx.node.gpu  # None on a node without GPUs: nothing is installed there
    driver, cuda = (gpu.driver_version, gpu.cuda_version) if gpu else (None, None)
    os_info = fact(Os)
    repo = cuda_repo(os_info, gpu.repo) if gpu and (driver or cuda or ctx.node.container_gpus) else None
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
    flavor = node_flavor(gpu, driver) if gpu and driver else "proprietary"
    nvswitch = bool(gpu and driver and gpu.on_nvswitch(bool(fact(NvSwitches))))
    ready = bool(driver and driver_ready(driver, fact(NvidiaDriver)))
    # None leaves a service alone: nodes whose driver rdmaprov does not manage
    managed, running = (True if driver else None), (True if ready else None)
    nvidia_driver(name="NVIDIA driver", version=driver, flavor=flavor)
    fabric_manager(name="NVSwitch fabric manager", driver=driver, nvswitch=nvswitch, flavor=flavor)
    unit_enabled(name="fabric manager at boot", unit="nvidia-fabricmanager", enabled=True if nvswitch else None)
    unit_running(name="fabric manager running", unit="nvidia-fabricmanager", running=running if nvswitch else None)
    dcgm = bool(gpu and driver and gpu.dcgm)
    packages(name="DCGM", by_family={f: [dcgm_package(driver)] for f in ("debian", "rhel")} if dcgm and driver else {})
    unit_enabled(name="DCGM at boot", unit="nvidia-dcgm", enabled=True if dcgm else None)
    unit_running(name="DCGM running", unit="nvidia-dcgm", running=running if dcgm else None)
    managed_file(
        name="nvidia-persistenced unit",
        path=PERSISTENCED_UNIT,
        content=PERSISTENCED if driver else None,
        # a daemon already running from the packaged unit keeps its options until restarted
        after_change="systemctl daemon-reload && systemctl try-restart nvidia-persistenced",
        managed=bool(driver),
    )
    unit_enabled(name="nvidia-persistenced at boot", unit="nvidia-persistenced", enabled=managed)
    unit_running(name="nvidia-persistenced running", unit="nvidia-persistenced", running=running)
    # nvidia-peermem loads only where the kernel's RDMA stack has the peer-memory API (MLNX_OFED,
    # DOCA, or a distro kernel that carries it); elsewhere it refuses (Invalid argument), and NCCL
    # reaches GPU memory through DMA-BUF instead (open modules, kernel 5.12 and newer)
    peer_memory = bool(driver and wants_peer_memory(ctx) and fact(PeerMemoryApi))
    managed_file(
        name="nvidia-peermem at boot", path=PEERMEM_AT_BOOT, content="nvidia-peermem\n" if peer_memory else None
    )
    module_loaded(name="nvidia-peermem loaded", module="nvidia_peermem", present=peer_memory and ready)
    # lspci: verify reads the PCIe switches' ACS state with it (GPUDirect readiness)
    packages(name="PCI utilities", by_family={"debian": ["pciutils"], "rhel": ["pciutils"]} if gpu else {})
    packages(
        name="CUDA toolkit",
        by_family={"debian": [toolkit_package(cuda)], "rhel": [toolkit_package(cuda)]} if cuda else {},
    )
    managed_file(name="CUDA on PATH", path=PROFILE, content=render_profile(cuda) if cuda else None)
