"""node-check on the nodes (with Slurm declared): the zipapp, the commands that run it, and the
expectations file rendered from the inventory, so that the node can judge itself with no SSH and
no inventory — what Slurm's HealthCheckProgram runs.

The zipapp is uploaded only when its sha256 differs from the node's copy; the expectations file
changes only when the inventory's settings for the node do.
"""

from __future__ import annotations

from pyinfra.api import deploy

from rdmaprov.engine.context import NodeContext
from rdmaprov.engine.factcache import fact
from rdmaprov.engine.notes import warn
from rdmaprov.facts.slurm import RunningSlurmConfig
from rdmaprov.inventory.slurm import HealthCheckTiming, SlurmConfig
from rdmaprov.nodecheck import expectations, zipapp
from rdmaprov.nodecheck.expectations import SlurmSide
from rdmaprov.nodecheck.options import EXPECTATIONS
from rdmaprov.operations.files import managed_file, shipped_file
from rdmaprov.operations.packages import packages
from rdmaprov.operations.slurm import conf_release
from rdmaprov.packages import NODE_CHECK
from rdmaprov.slurm.conf import HEALTH_CHECK_PROGRAM

PROGRAM = "/usr/local/lib/rdmaprov/node-check.pyz"
COMMAND = "/usr/local/sbin/rdmaprov-node-check"


def render_wrapper(purpose: str, *arguments: str) -> str:
    """A /bin/sh wrapper that runs the zipapp on the node's bare python3 (`-I -S`: no environment,
    no site-packages), with fixed `arguments` first."""
    fixed = "".join(f" {a}" for a in arguments)
    return (
        f"#!/bin/sh\n# Managed by rdmaprov (node_check deploy): {purpose}.\n"
        f'exec /usr/bin/python3 -I -S {PROGRAM}{fixed} "$@"\n'
    )


def wanted_here(ctx: NodeContext) -> SlurmSide | None:
    """This host's Slurm side of the check when it is a Slurm node of the inventory; else None."""
    slurm = ctx.inventory.slurm
    if slurm is None or ctx.host.name not in slurm.compute_hosts(ctx.inventory.host_names()):
        return None
    check, budget = slurm.health_check, _timing(ctx, slurm).budget_s
    return SlurmSide(slurm.node_name(ctx.host.name), check.drain, check.max_drain_fraction, budget)


def _timing(ctx: NodeContext, slurm: SlurmConfig) -> HealthCheckTiming:
    """slurmd's limit on the check here: from the release rdmaprov renders slurm.conf for (mode
    full), or from the site's running configuration (mode health_check)."""
    if slurm.manages:
        return slurm.health_check.timing(conf_release(slurm, ctx.inventory.host_names()).written_for)
    running = fact(RunningSlurmConfig)
    if running is None:
        timing = HealthCheckTiming.running(None)
        warn(
            f"node check: Slurm's configuration could not be read here (scontrol show config); the check keeps "
            f"to {timing.budget_s} s, within Slurm's default {timing.kill_s} s limit: apply again once Slurm answers"
        )
        return timing
    return HealthCheckTiming.running(running.health_check_timeout_s)


@deploy("node_check")
def node_check(ctx: NodeContext) -> None:
    side = wanted_here(ctx)
    wanted = side is not None
    timeout = ctx.inventory.slurm.health_check.report_timeout_s if ctx.inventory.slurm else 0
    packages(name="node check packages", by_family=NODE_CHECK if wanted else {})
    shipped_file(name="node check program", path=PROGRAM, data=zipapp.build() if wanted else None)
    managed_file(
        name="node check command",
        path=COMMAND,
        content=render_wrapper("verify's per-node checks on this node") if wanted else None,
        mode="755",
    )
    managed_file(
        name="Slurm health check command",
        path=HEALTH_CHECK_PROGRAM,
        content=render_wrapper("Slurm's HealthCheckProgram: the node check, then drain or resume", "--slurm")
        if wanted
        else None,
        mode="755",
    )
    managed_file(
        name="node check expectations",
        path=EXPECTATIONS,
        content=expectations.render(ctx.inventory.name, ctx.host, side, timeout) if wanted else None,
    )
