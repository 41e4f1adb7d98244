"""Slurm from the distro's packages (opt-in, `cluster.slurm` with mode full): munge with one key
made on the controller and copied to every node, slurm.conf (nodes with their CPUs, memory and
GPUs as GRES; rdmaprov's node check as HealthCheckProgram), gres.conf and cgroup.conf, slurmctld
on the controller, slurmd on the partitions' hosts.

With mode health_check (a site that runs its own Slurm), or on a host that is no Slurm host, every
operation here leaves the host alone: the site's slurm.conf, munge key and daemons are its own.
Turning Slurm off in the inventory stops rdmaprov managing it; nothing is uninstalled.
"""

from __future__ import annotations

from pyinfra.api import deploy

from rdmaprov.engine.context import NodeContext
from rdmaprov.inventory.slurm import SlurmConfig
from rdmaprov.operations.files import managed_file
from rdmaprov.operations.packages import packages
from rdmaprov.operations.services import unit_enabled, unit_running
from rdmaprov.operations.slurm import SlurmMember, munge_key_created, munge_key_shared, slurm_conf
from rdmaprov.packages import SLURM_CONTROLLER, SLURM_NODE
from rdmaprov.slurm.conf import (
    CGROUP,
    CGROUP_CONF,
    GRES_CONF,
    HEADER,
    SLURMD_DEFAULTS,
    render_gres_conf,
    render_slurmd_defaults,
)


def slurm_packages(controller: bool, node: bool) -> dict[str, list[str]]:
    """Each family's packages for a host that is the controller, a node, both or neither."""
    families = set(SLURM_CONTROLLER) | set(SLURM_NODE)
    wanted: dict[str, list[str]] = {}
    for family in sorted(families):
        names: list[str] = []
        for table, on in ((SLURM_CONTROLLER, controller), (SLURM_NODE, node)):
            names += [p for p in table.get(family, []) if on and p not in names]
        if names:
            wanted[family] = names
    return wanted


def members(ctx: NodeContext, slurm: SlurmConfig) -> list[SlurmMember]:
    """The compute nodes, in inventory order, as slurm.conf names them."""
    inventory = ctx.inventory
    return [
        SlurmMember(host, slurm.node_name(host), spec.address, spec.node.gpu.count if spec.node.gpu else 0)
        for host in slurm.compute_hosts(inventory.host_names())
        for spec in (inventory.hosts[host],)
    ]


def _restart(controller: bool, node: bool) -> str:
    """After a config change: restart the daemons this host runs (those running; the rest start later)."""
    units = (["slurmctld"] if controller else []) + (["slurmd"] if node else [])
    return f"systemctl try-restart {' '.join(units)} || true" if units else "true"


@deploy("slurm")
def slurm(ctx: NodeContext) -> None:
    config = ctx.inventory.slurm if ctx.inventory.slurm and ctx.inventory.slurm.manages else None
    nodes = members(ctx, config) if config else []
    controller = config.controller if config else None
    is_controller = ctx.host.name == controller
    is_node = any(n.host == ctx.host.name for n in nodes)
    member = is_controller or is_node
    restart = _restart(is_controller, is_node)

    packages(name="Slurm packages", by_family=slurm_packages(is_controller, is_node))
    munge_key_created(name="munge key on the controller", controller=is_controller)
    munge_key_shared(name="munge key from the controller", controller=controller, member=member)
    unit_enabled(name="munge at boot", unit="munge.service", enabled=True if member else None)
    unit_running(name="munge running", unit="munge.service", running=True if member else None)
    slurm_conf(
        name="slurm.conf",
        member=member,
        slurm=config,
        controller=controller,
        controller_address=ctx.inventory.hosts[controller].address if controller else "",
        nodes=nodes,
        after_change=restart,
    )
    managed_file(
        name="gres.conf",
        path=GRES_CONF,
        content=render_gres_conf([(n.name, n.gpus) for n in nodes]),
        after_change=restart,
        managed=member,
    )
    managed_file(name="cgroup.conf", path=CGROUP_CONF, content=HEADER + CGROUP, after_change=restart, managed=member)
    managed_file(
        name="slurmd options",
        path=SLURMD_DEFAULTS,
        content=render_slurmd_defaults(config.node_name(ctx.host.name)) if config and is_node else None,
        after_change="systemctl try-restart slurmd || true",
        managed=is_node,
    )
    unit_enabled(name="slurmctld at boot", unit="slurmctld.service", enabled=True if is_controller else None)
    unit_running(name="slurmctld running", unit="slurmctld.service", running=True if is_controller else None)
    # slurmd's cgroup/v2 plugin needs the system bus: installing dbus does not start it until a reboot.
    unit_running(name="D-Bus running", unit="dbus.service", running=True if is_node else None)
    unit_enabled(name="slurmd at boot", unit="slurmd.service", enabled=True if is_node else None)
    unit_running(name="slurmd running", unit="slurmd.service", running=True if is_node else None)
