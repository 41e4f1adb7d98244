"""A container runtime for training jobs (opt-in), configured so that a job's container gets what
RDMA and NCCL need from the node, not from each job's command line (inventory/containers.py).

podman: it reads drop-ins from /etc/containers/containers.conf.d/ after its own containers.conf,
so the node's other settings stay the distro's and the drop-in is the whole of rdmaprov's part;
every container on the node gets it.

docker: dockerd has no default for devices or the network, so the flags a job needs are written
once, in /usr/local/bin/rdmaprov-docker-run (`docker run` with them, then the job's own words),
which jobs and the container gate use in place of `docker run`. Unlimited locked memory and the
shared-memory size are dockerd's defaults too (daemon.json), so that a container started any
other way can still pin memory. daemon.json is shared (nvidia-ctk writes its runtime there): only
rdmaprov's keys are set or removed, and dockerd is restarted only when one of them changed.
On GPU nodes it also gives the job every GPU (`--gpus=all`, through the NVIDIA container
toolkit's hook) unless the job asks for GPUs of its own.

On GPU nodes the NVIDIA container toolkit is installed for either runtime: docker's --gpus needs
its hook; for podman, its nvidia-cdi-refresh service (1.18 on) keeps a CDI spec of the GPUs, which
jobs name (`--device nvidia.com/gpu=all`): podman before 4.4 refuses CDI names in containers.conf,
so the drop-in cannot give them.

In netns_mode exclusive a container with a network namespace of its own sees no RDMA device
until one is moved into it: rdmaprov-rdma-netns (rdma_netns.sh) does that, with the netdev it
sends on, for a job's launcher to run before the job starts.

With `cdi`, a CDI spec of the node's RDMA devices for runtimes that cannot give every container a
device (Docker, Kubernetes' containerd and CRI-O): its device numbers are the kernel's and may
change at a boot, so the node makes it itself (cdi_rdma.sh), run by udev on every RDMA device
that comes or goes and by each apply.

enroot (and pyxis, which starts a Slurm job's tasks in enroot containers) keeps the host's /dev
and network, and a container has the job's locked-memory limit, so what it lacks is NCCL's
settings: the image's /etc is its own. With `enroot`, a mount file in enroot's mounts.d gives
every container the node's /etc/nccl.conf, which NCCL reads as its defaults, so a job's own
NCCL_* variables still win, as on the host. Variables in environ.d would instead override the
job's: pyxis lets what the container sets win over the job's exported environment.
"""

from __future__ import annotations

from importlib import resources

from pyinfra.api import deploy

from rdmaprov.deploys.nccl_env import NCCL_CONF
from rdmaprov.engine.context import NodeContext
from rdmaprov.inventory.containers import ENROOT_SYSCONF, RDMA_DEVICES, ContainerConfig
from rdmaprov.operations.cdi import cdi_spec
from rdmaprov.operations.files import JsonKeys, managed_file, managed_json_keys
from rdmaprov.operations.packages import packages
from rdmaprov.operations.services import unit_running
from rdmaprov.packages import CONTAINER_RUNTIMES, NVIDIA_CONTAINER_TOOLKIT
from rdmaprov.quoting import config_value, sh, toml_list, toml_string

CONF = "/etc/containers/containers.conf.d/50-rdmaprov.conf"
DOCKER_RUN = "/usr/local/bin/rdmaprov-docker-run"
DAEMON_JSON = "/etc/docker/daemon.json"
# dockerd reads daemon.json at its start only; try-restart leaves a stopped dockerd stopped
DOCKER_RESTART = "systemctl try-restart docker.service"
CDI_SCRIPT = "/usr/local/sbin/rdmaprov-cdi-rdma"
RDMA_NETNS = "/usr/local/sbin/rdmaprov-rdma-netns"
CDI_SPEC = "/etc/cdi/rdmaprov-rdma.yaml"
CDI_RULE = "/etc/udev/rules.d/70-rdmaprov-cdi.rules"
ENROOT_MOUNTS = f"{ENROOT_SYSCONF}/mounts.d/50-rdmaprov.fstab"
# enroot's fstab: the target is in the container, created as an empty file to mount on where
# the image has none; nofail,silent: a node without /etc/nccl.conf yet still starts containers
# (the options of enroot's own /etc/machine-id line); pass -1: mounted before the hooks run,
# as enroot's own /etc/hosts and /etc/resolv.conf are.
ENROOT_FSTAB = (
    "# Managed by rdmaprov (containers.enroot): the node's NCCL settings in every enroot container.\n"
    f"{NCCL_CONF} {NCCL_CONF} none x-create=file,bind,ro,nosuid,nodev,noexec,private,nofail,silent 0 -1\n"
)
# every kind of device the spec lists: rdma_cm too, whose module rdma-core loads after the verbs
CDI_DEVICE_EVENTS = (
    'SUBSYSTEM=="infiniband_verbs"',
    'SUBSYSTEM=="infiniband_mad"',
    'SUBSYSTEM=="misc", KERNEL=="rdma_cm"',
)
CDI_UDEV_RULE = "# Managed by rdmaprov (containers.cdi): the CDI spec of the RDMA devices follows them.\n" + "".join(
    f'{match}, RUN+="{CDI_SCRIPT}"\n' for match in CDI_DEVICE_EVENTS
)
# udevd reads a changed rule at its next event anyway; told at once where it runs (not in containers)
UDEV_RELOAD = "if [ -S /run/udev/control ]; then udevadm control --reload; fi"


def node_script(name: str) -> str:
    """A script the node runs by itself (udev, a job's launcher), not commands of an apply."""
    return resources.files("rdmaprov.deploys").joinpath(name).read_text()


def cdi_script() -> str:
    """The node's CDI spec writer: udev runs it whenever an RDMA device comes or goes."""
    return node_script("cdi_rdma.sh")


def rdma_netns_script(config: ContainerConfig, netns_mode: str | None) -> str | None:
    """rdmaprov-rdma-netns, where containers run and each namespace sees only the RDMA devices
    moved into it (exclusive): what a container with a network of its own needs to use RDMA."""
    return node_script("rdma_netns.sh") if config.enabled and netns_mode == "exclusive" else None


def render_containers_conf(config: ContainerConfig, env: dict[str, str]) -> str:
    """The [containers] table every container on the node starts with: the RDMA devices, memlock
    unlimited (the verbs library pins every buffer it registers), the host's network, the IPC
    choice, and the node's NCCL variables (the same as /etc/nccl.conf)."""
    lines = [
        "# Managed by rdmaprov (containers): what every container on this node gets for training jobs.",
        "# Edits are reported as drift and replaced on the next apply.",
        "[containers]",
        f"devices = {toml_list([RDMA_DEVICES], 'containers device')}",
        f"default_ulimits = {toml_list(['memlock=-1:-1'], 'containers ulimit')}",
        'netns = "host"',
        f"ipcns = {toml_string(config.ipc, 'containers.ipc')}",
    ]
    if config.shm is not None:
        lines.append(f"shm_size = {toml_string(config.shm, 'containers.shm_size')}")
    variables = [f"{key}={value}" for key, value in env.items()]
    lines.append(f"env = {toml_list(variables, 'NCCL variable')}")
    return "\n".join(lines) + "\n"


# Every GPU, unless the job's words ask for GPUs of their own: two --gpus would add up to all.
_GPUS_UNLESS_ASKED = (
    "gpus=--gpus=all",
    'for word in "$@"; do case $word in --gpus|--gpus=*) gpus= ;; esac; done',
)


def render_docker_run(config: ContainerConfig, env: dict[str, str], gpus: bool = False) -> str:
    """`docker run` with what a training job needs, each flag one quoted word: the host's
    network, the RDMA devices (dockerd adds every device of a directory), memlock unlimited, the
    IPC choice, the node's NCCL variables and, on a GPU node, every GPU."""
    flags = ["--network=host", f"--device={RDMA_DEVICES}", "--ulimit=memlock=-1:-1"]
    flags.append(f"--shm-size={config.shm}" if config.shm else "--ipc=host")
    flags += [f"--env={key}={config_value(value, key)}" for key, value in env.items()]
    lines = [
        "#!/bin/sh",
        "# Managed by rdmaprov (containers): `docker run` with what a training job needs on this node;",
        "# use it in place of `docker run` (docs/training-jobs.md). Edits are replaced on the next apply.",
        *(_GPUS_UNLESS_ASKED if gpus else ()),
        "exec docker run \\",
        *(f"    {sh(flag)} \\" for flag in flags),
        *(['    ${gpus:+"$gpus"} \\'] if gpus else []),
        '    "$@"',
    ]
    return "\n".join(lines) + "\n"


def docker_daemon_keys(config: ContainerConfig) -> JsonKeys:
    """rdmaprov's keys of daemon.json (None: removed): every container's locked-memory limit,
    and its /dev/shm size where containers have their own."""
    docker = config.runtime == "docker"
    memlock = {"Name": "memlock", "Soft": -1, "Hard": -1} if docker else None
    return [(("default-ulimits", "memlock"), memlock), (("default-shm-size",), config.shm if docker else None)]


@deploy("containers")
def containers(ctx: NodeContext) -> None:
    config = ctx.node.containers
    packages(name="container runtime packages", by_family=CONTAINER_RUNTIMES.get(config.runtime, {}))
    # Installing dbus does not start the system bus until a reboot; crun needs it for every container.
    unit_running(name="D-Bus running", unit="dbus.service", running=True if config.enabled else None)
    env, _ = ctx.node.nccl_environment()  # its warnings are nccl_env's to give
    podman = render_containers_conf(config, env) if config.runtime == "podman" else None
    managed_file(name=f"Write {CONF}", path=CONF, content=podman)
    gpus = ctx.node.container_gpus
    packages(name="NVIDIA container toolkit", by_family=NVIDIA_CONTAINER_TOOLKIT if gpus else {})
    docker = render_docker_run(config, env, gpus) if config.runtime == "docker" else None
    managed_file(name=f"Write {DOCKER_RUN}", path=DOCKER_RUN, content=docker, mode="755")
    managed_json_keys(
        name=f"rdmaprov's keys in {DAEMON_JSON}",
        path=DAEMON_JSON,
        keys=docker_daemon_keys(config),
        after_change=DOCKER_RESTART,
    )
    unit_running(name="dockerd running", unit="docker.service", running=True if docker else None)
    netns = rdma_netns_script(config, ctx.node.netns_mode)
    managed_file(name="RDMA for a container's own network namespace", path=RDMA_NETNS, content=netns, mode="755")
    cdi = config.cdi
    script = cdi_script() if cdi else None
    managed_file(
        name="CDI spec writer", path=CDI_SCRIPT, content=script, mode="755", after_change=CDI_SCRIPT if cdi else None
    )
    managed_file(name="CDI udev rule", path=CDI_RULE, content=CDI_UDEV_RULE if cdi else None, after_change=UDEV_RELOAD)
    cdi_spec(name=f"CDI spec {CDI_SPEC}", script=CDI_SCRIPT, spec=CDI_SPEC, wanted=cdi)
    fstab = ENROOT_FSTAB if config.enroot else None
    managed_file(name="NCCL settings in enroot containers", path=ENROOT_MOUNTS, content=fstab)
