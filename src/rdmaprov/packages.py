"""OS package sets the node stack installs, per distro family (field manuals; docs/inventory.md,
"What each deploy does", `rdma_userspace`).

One source of truth: the deploys install these, and the lab's mirror carries them.
"""

from __future__ import annotations

RDMA_USERSPACE = {
    "debian": [
        "rdma-core",
        "ibverbs-utils",
        "rdmacm-utils",
        "infiniband-diags",
        "perftest",
        "ibverbs-providers",
        "libibumad3",
        "libibverbs1",
        "librdmacm1",
        "libnl-3-200",
        "libnl-route-3-200",
        "iproute2",
    ],
    "rhel": [
        "rdma-core",
        "libibverbs",
        "libibverbs-utils",
        "librdmacm",
        "librdmacm-utils",
        "infiniband-diags",
        "perftest",
        "iproute",
    ],
}

OPENMPI = {
    "debian": ["openmpi-bin", "libopenmpi-dev"],
    "rhel": ["openmpi", "openmpi-devel"],
}

# What building small C/C++ programs on the nodes needs (build-once-and-ship, CPU allreduce probe).
BUILD_TOOLS = {
    "debian": ["gcc", "g++", "make", "libc6-dev"],
    "rhel": ["gcc", "gcc-c++", "make"],
}

# The RDMA exporter runs on the nodes' own Python with the distro's Prometheus client.
EXPORTER = {
    "debian": ["python3", "python3-prometheus-client"],
    "rhel": ["python3", "python3-prometheus_client"],
}

# Slurm from the distro (Debian 12: Slurm 22.05, munge 0.5.15; RHEL: EPEL's slurm packages).
SLURM_CONTROLLER = {"debian": ["munge", "slurmctld", "slurm-client"], "rhel": ["munge", "slurm", "slurm-slurmctld"]}
# slurmd's cgroup/v2 plugin asks systemd for its scope over D-Bus: a minimal server may lack the bus.
SLURM_NODE = {
    "debian": ["munge", "slurmd", "slurm-client", "dbus"],
    "rhel": ["munge", "slurm", "slurm-slurmd", "dbus"],
}

# Containers for training jobs (opt-in), by containers.runtime. podman: rootful, from the distro
# (Debian 12: 4.3; RHEL: 4+). docker: Debian's docker.io (Debian 12: 20.10; 13: 26.1); RHEL ships
# none, so docker-ce comes from Docker's repository or the site's mirror of it (package_sources).
# Debian's kernel has AppArmor on, and dockerd then refuses to start a container unless it can
# load its profile with apparmor_parser: apparmor is only docker.io's recommendation.
# crun and runc's systemd cgroup driver ask systemd for each container's cgroup over D-Bus
# ("cannot open sd-bus" on a server without the bus).
# From Debian 13 on, docker.io holds the daemon alone: the docker command is docker-cli, which
# docker.io only recommends (seen on the lab's Debian 13 VM: no `docker` after docker.io).
CONTAINER_RUNTIMES = {
    "podman": {"debian": ["podman", "dbus"], "rhel": ["podman", "dbus"]},
    "docker": {
        "debian": ["docker.io", "apparmor", "dbus"],
        "debian>=13": ["docker-cli"],
        "rhel": ["docker-ce", "dbus"],
    },
}

# GPUs in containers: the NVIDIA container toolkit (docker's --gpus runs its hook; podman takes
# the CDI spec its nvidia-cdi-refresh service keeps, from 1.18 on). NVIDIA's CUDA
# repositories carry it from 1.13 on (the one gpu_driver sets up), as its own repository does;
# as of 2026-04 NVIDIA published it for debian12 but not debian13 (cuda-repo-management#45).
NVIDIA_CONTAINER_TOOLKIT = {"debian": ["nvidia-container-toolkit"], "rhel": ["nvidia-container-toolkit"]}

# A ConnectX NIC's firmware settings (roce_qos.firmware): mstflint's mstconfig, from the distro.
ROCE_FIRMWARE = {"debian": ["mstflint"], "rhel": ["mstflint"]}

# node-check runs on the node's own python3 (stdlib only).
NODE_CHECK = {"debian": ["python3"], "rhel": ["python3"]}


def for_release(by_family: dict[str, list[str]], family: str, distro: str, major: str) -> list[str]:
    """A table's packages for one node: its family's, then those of an entry `DISTRO>=MAJOR`
    (e.g. `debian>=13`) that the node's distro and major version meet."""
    names = list(by_family.get(family, []))
    for key, extra in by_family.items():
        name, at_least, since = key.partition(">=")
        if at_least and name == distro and major.isdigit() and int(major) >= int(since):
            names += [p for p in extra if p not in names]
    return names


def lab_packages(version: str = "12") -> list[str]:
    """Everything the node stack can install on a Debian lab node of that version (the lab
    mirror's content for its release)."""
    names: list[str] = []
    tables = [RDMA_USERSPACE, OPENMPI, BUILD_TOOLS, EXPORTER, SLURM_CONTROLLER, SLURM_NODE, NODE_CHECK]
    for table in [*tables, *CONTAINER_RUNTIMES.values()]:
        names.extend(p for p in for_release(table, "debian", "debian", version) if p not in names)
    return names
