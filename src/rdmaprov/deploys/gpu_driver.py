"""NVIDIA driver and CUDA toolkit, pinned in the inventory, from NVIDIA's repositories or a mirror.

Nodes without GPUs (gpu.count 0) plan the same operations and do nothing. The driver is judged
by the kernel module's version on disk and in the running kernel: a node whose driver changes
(or whose loaded module differs from the installed one) is reported "reboot required" and is
rebooted only with --allow-reboot.
"""

from __future__ import annotations

from pyinfra.api import deploy

from rdmaprov.deploys.repository import vendor_repository
from rdmaprov.engine.context import NodeContext
from rdmaprov.engine.factcache import fact
from rdmaprov.facts.system import Os
from rdmaprov.nvidia import cuda_home, cuda_repo, toolkit_package
from rdmaprov.operations.files import managed_file
from rdmaprov.operations.gpu import nvidia_driver
from rdmaprov.operations.packages import packages
from rdmaprov.quoting import sh_single

PROFILE = "/etc/profile.d/rdmaprov-cuda.sh"


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
