"""RDMA userspace: rdma-core, verbs utilities, perftest, diagnostics — per distro family."""

from __future__ import annotations

from pyinfra.api import deploy

from rdmaprov.engine.context import NodeContext
from rdmaprov.inventory.config import PackagesConfig
from rdmaprov.operations.packages import packages
from rdmaprov.packages import RDMA_USERSPACE


def rdma_package_sets(settings: PackagesConfig) -> dict[str, list[str]]:
    """Built-in sets, or the inventory's `packages.rdma` for every family, plus `packages.extra`."""
    extra = list(settings.extra)
    if settings.rdma is not None:
        return {family: list(settings.rdma) + extra for family in RDMA_USERSPACE}
    return {family: names + extra for family, names in RDMA_USERSPACE.items()}


@deploy("rdma_userspace")
def rdma_userspace(ctx: NodeContext) -> None:
    packages(name="RDMA userspace packages", by_family=rdma_package_sets(ctx.node.packages))
