"""`rdmaprov bootstrap --limit NEW`: bring new nodes into a running cluster in one run.

The new nodes get the whole stack; every existing node renews only its SSH trust, in the same
run, so old and new nodes read each other's keys once and trust each other both ways. Then the
new nodes are verified and the gates pair each new node with an existing one.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from pyinfra.api import deploy

from rdmaprov.deploys import select_deploys
from rdmaprov.engine import NodeContext, RunOptions, RunResult
from rdmaprov.inventory.model import Inventory
from rdmaprov.operations.ssh import login_key
from rdmaprov.workflows.apply import ConvergeSettings, converge


def with_password(inventory: Inventory, names: list[str], password: str) -> Inventory:
    """The inventory with a one-time SSH password for `names` (their first login)."""
    hosts = dict(inventory.hosts)
    for name in names:
        hosts[name] = replace(hosts[name], ssh=replace(hosts[name].ssh, password=password))
    return replace(inventory, hosts=hosts)


def operator_key_deploy(inventory: Inventory):
    """A deploy that authorizes the operator's key (the inventory's ssh.key) for the login user."""

    @deploy("operator_key")
    def operator_key(ctx: NodeContext) -> None:
        key = ctx.host.ssh.key
        if not key:
            raise ValueError("bootstrap by password needs ssh.key in the inventory: the key later runs log in with")
        public = Path(f"{key}.pub")
        if not public.is_file():
            raise ValueError(
                f"{public} not found: bootstrap installs the public half of ssh.key; create it with `ssh-keygen -y -f "
                f"{key} > {public}`"
            )
        login_key(
            name="operator key for the login user",
            user=ctx.host.ssh.user,
            public_key=public.read_text(),
            marker=f"rdmaprov operator {inventory.name}",
        )

    return operator_key


def bootstrap(
    inventory: Inventory,
    newcomers: list[str],
    settings: ConvergeSettings,
    log,
    observer=None,
    by_password: bool = False,
) -> RunResult:
    existing = [name for name in inventory.host_names() if name not in newcomers]
    stack = select_deploys(None)
    if by_password:
        stack = [operator_key_deploy(inventory), *stack]
    # Existing nodes renew SSH trust; with a Slurm rdmaprov runs, they also learn the new nodes
    # (slurm.conf, restarted daemons) and the controller hands the munge key over.
    renewed = {"ssh_trust", "slurm"} if inventory.slurm and inventory.slurm.manages else {"ssh_trust"}
    options = RunOptions("apply", existing + newcomers, stack, host_deploys={name: renewed for name in existing})
    settings = replace(settings, verify_hosts=newcomers, newcomers=newcomers)
    result = converge(inventory, options, settings, log, observer)
    result.command = "bootstrap"
    return result
