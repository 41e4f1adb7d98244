"""A container runtime for training jobs (opt-in): podman from the distro, configured so that every
container on the node gets what RDMA and NCCL need without the job asking (inventory/containers.py).

podman reads drop-ins from /etc/containers/containers.conf.d/ after its own containers.conf, so the
node's other settings stay the distro's and the file is the whole of rdmaprov's part.
"""

from __future__ import annotations

from pyinfra.api import deploy

from rdmaprov.engine.context import NodeContext
from rdmaprov.inventory.containers import RDMA_DEVICES, ContainerConfig
from rdmaprov.operations.files import managed_file
from rdmaprov.operations.packages import packages
from rdmaprov.operations.services import unit_running
from rdmaprov.packages import CONTAINERS
from rdmaprov.quoting import toml_list, toml_string

CONF = "/etc/containers/containers.conf.d/50-rdmaprov.conf"


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
