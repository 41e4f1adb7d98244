"""A container runtime for training jobs (opt-in): podman from the distro, configured so that every
container on the node gets what RDMA and NCCL need without the job asking (inventory/containers.py).

podman reads drop-ins from /etc/containers/containers.conf.d/ after its own containers.conf, so the
node's other settings stay the distro's and the file is the whole of rdmaprov's part.

With `cdi`, a CDI spec of the node's RDMA devices for runtimes that cannot give every container a
device (Docker, Kubernetes' containerd and CRI-O): its device numbers are the kernel's and may
change at a boot, so the node makes it itself (cdi_rdma.sh), run by udev on every RDMA device
that comes or goes and by each apply.
"""

from __future__ import annotations

from importlib import resources

from pyinfra.api import deploy

from rdmaprov.engine.context import NodeContext
from rdmaprov.inventory.containers import RDMA_DEVICES, ContainerConfig
from rdmaprov.operations.cdi import cdi_spec
from rdmaprov.operations.files import managed_file
from rdmaprov.operations.packages import packages
from rdmaprov.operations.services import unit_running
from rdmaprov.packages import CONTAINERS
from rdmaprov.quoting import toml_list, toml_string

CONF = "/etc/containers/containers.conf.d/50-rdmaprov.conf"
CDI_SCRIPT = "/usr/local/sbin/rdmaprov-cdi-rdma"
CDI_SPEC = "/etc/cdi/rdmaprov-rdma.yaml"
CDI_RULE = "/etc/udev/rules.d/70-rdmaprov-cdi.rules"
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


def cdi_script() -> str:
    """The node's CDI spec writer: udev runs it, so it is a script of its own, not commands of an apply."""
    return resources.files("rdmaprov.deploys").joinpath("cdi_rdma.sh").read_text()


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


@deploy("containers")
def containers(ctx: NodeContext) -> None:
    config = ctx.node.containers
    packages(name="container runtime packages", by_family=CONTAINERS if config.enabled else {})
    # Installing dbus does not start the system bus until a reboot; crun needs it for every container.
    unit_running(name="D-Bus running", unit="dbus.service", running=True if config.enabled else None)
    content = None
    if config.enabled:
        env, _ = ctx.node.nccl_environment()  # its warnings are nccl_env's to give
        content = render_containers_conf(config, env)
    managed_file(name=f"Write {CONF}", path=CONF, content=content)
    cdi = config.cdi
    script = cdi_script() if cdi else None
    managed_file(
        name="CDI spec writer", path=CDI_SCRIPT, content=script, mode="755", after_change=CDI_SCRIPT if cdi else None
    )
    managed_file(name="CDI udev rule", path=CDI_RULE, content=CDI_UDEV_RULE if cdi else None, after_change=UDEV_RELOAD)
    cdi_spec(name=f"CDI spec {CDI_SPEC}", script=CDI_SCRIPT, spec=CDI_SPEC, wanted=cdi)
