"""NCCL environment: /etc/nccl.conf (read by NCCL itself) and a profile snippet for shells and mpirun."""

from __future__ import annotations

from pyinfra.api import deploy

from rdmaprov.engine.context import NodeContext
from rdmaprov.operations.files import managed_file
from rdmaprov.quoting import config_value, sh_export

NCCL_CONF = "/etc/nccl.conf"  # NCCL's own system-wide defaults file


def render_nccl_conf(env: dict[str, str]) -> str:
    """NCCL reads KEY=VALUE lines with no quoting: a value is written verbatim, on one line."""
    lines = ["# Managed by rdmaprov: edits are reported as drift and replaced on the next apply."]
    lines += [f"{config_value(key, 'NCCL variable')}={config_value(value, key)}" for key, value in env.items()]
    return "\n".join(lines) + "\n"


def render_profile(env: dict[str, str]) -> str:
    lines = ["# Managed by rdmaprov: NCCL settings for login shells (mirrors /etc/nccl.conf)."]
    lines += [sh_export(key, value) for key, value in env.items()]
    return "\n".join(lines) + "\n"


@deploy("nccl_env")
def nccl_env(ctx: NodeContext) -> None:
    env, warnings = ctx.node.nccl_environment()
    for warning in warnings:
        ctx.warn(warning)
    managed_file(name=f"Write {NCCL_CONF}", path=NCCL_CONF, content=render_nccl_conf(env))
    managed_file(name="Write /etc/profile.d/nccl.sh", path="/etc/profile.d/nccl.sh", content=render_profile(env))
