"""The containers section: a runtime for training jobs, set up so that what a job needs from the
node is given to every container by the node's own configuration, not by each job's command line.

What the field guides pass by hand (`docker run --net=host --ipc=host --ulimit memlock=-1
--device=/dev/infiniband/… --shm-size=8g`, then NCCL's variables inside) is derived here once:
the RDMA devices, unlimited locked memory, the host's network (the RDMA devices of the host's
namespace, and the addresses NCCL's bootstrap uses), the host's IPC namespace or a shared-memory
size, and the node's NCCL environment.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from rdmaprov.inventory.settings import Section

# The directory of every RDMA character device (uverbsN, rdma_cm, umadN, issmN): podman adds each
# device found in a directory given as a device.
RDMA_DEVICES = "/dev/infiniband"
# The field guides' --shm-size for a training container with an IPC namespace of its own.
DEFAULT_SHM = "8g"
# Where enroot reads its configuration as NVIDIA's packages install it (its build's sysconfdir):
# rdmaprov writes there, and verify says when the node's enroot reads another.
ENROOT_SYSCONF = "/etc/enroot"


@dataclass(frozen=True)
class ContainerConfig:
    """`runtime`: none (rdmaprov installs and configures no container runtime, and removes its
    own configuration where it did), podman or docker; `ipc`: host (the node's IPC namespace and /dev/shm)
    or private (each container its own /dev/shm, `shm_size` or 8g); `cdi`: a CDI spec of the
    node's RDMA devices, for runtimes that take devices by CDI name (Docker, containerd, CRI-O,
    podman too), whichever runtime rdmaprov installs; `enroot`: enroot's configuration for every
    container it starts (pyxis's jobs too), where the site installs enroot itself."""

    runtime: str = "none"
    ipc: str = "host"
    shm_size: str | None = None  # written only for ipc: private (semantics refuses it with host)
    cdi: bool = False
    enroot: bool = False

    @classmethod
    def from_settings(cls, settings: Mapping[str, object]) -> ContainerConfig:
        """The containers section after fill_defaults."""
        section = Section.of(settings, ("containers",))
        return cls(
            section.text("runtime"),
            section.text("ipc"),
            section.optional_text("shm_size"),
            section.flag("cdi"),
            section.flag("enroot"),
        )

    @property
    def enabled(self) -> bool:
        return self.runtime != "none"

    @property
    def shm(self) -> str | None:
        """Each container's /dev/shm size: none of its own with ipc: host."""
        return (self.shm_size or DEFAULT_SHM) if self.ipc == "private" else None
