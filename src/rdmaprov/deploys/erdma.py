"""Alibaba eRDMA (fabric erdma): the eRDMA package repository, its user-space driver, and the AIACC
NCCL plugin. Runs before the RDMA user space so that rdma-core comes from the eRDMA repository.

The user-space packages are judged by the fact that matters: whether libibverbs has the erdma
provider. Distro rdma-core without it is upgraded from the eRDMA repository.
"""

from __future__ import annotations

import os

from pyinfra.api import deploy

from rdmaprov.deploys.repository import vendor_repository
from rdmaprov.engine.context import NodeContext
from rdmaprov.engine.factcache import fact
from rdmaprov.facts.system import Os
from rdmaprov.operations.erdma import aiacc_plugin, erdma_userspace

ERDMA_REPO = "https://mirrors.aliyun.com/erdma"
ERDMA_KEY = "https://mirrors.aliyun.com/erdma/GPGKEY"
# The eRDMA user-space driver as Alibaba's guide installs it.
ERDMA_PACKAGES = {
    "debian": ["libibverbs1", "ibverbs-providers", "ibverbs-utils", "librdmacm1"],
    "rhel": ["libibverbs", "rdma-core", "librdmacm", "libibverbs-utils"],
}


def plugin_source(ctx: NodeContext, source: str | None) -> str | None:
    if not source or source.startswith(("http://", "https://")):
        return source
    path = ctx.local_path(source)
    if not os.path.isfile(path):
        raise ValueError(f"erdma.aiacc_plugin {path} does not exist: give the .deb/.rpm you downloaded, or its URL")
    return path


@deploy("erdma")
def erdma(ctx: NodeContext) -> None:
    wanted = ctx.node.fabric == "erdma"
    settings = ctx.node.erdma
    os_info = fact(Os)
    base = (settings.repo or ERDMA_REPO).rstrip("/")
    vendor_repository(
        ctx,
        "eRDMA repository",
        "rdmaprov-erdma",
        os_info,
        apt_arch="amd64",
        apt_source=f"{base}/apt/ubuntu {os_info.codename}/erdma main" if wanted else None,
        yum_baseurl=f"{base}/yum/redhat/$releasever/erdma/x86_64" if wanted else None,
        key=settings.key or ERDMA_KEY if wanted else None,
        key_setting="erdma.key",
    )
    packages = list(settings.packages) if settings.packages else None
    erdma_userspace(
        name="eRDMA user-space driver",
        by_family=({f: packages for f in ERDMA_PACKAGES} if packages else ERDMA_PACKAGES) if wanted else {},
    )
    aiacc_plugin(
        name="AIACC NCCL plugin",
        source=plugin_source(ctx, settings.aiacc_plugin) if wanted else None,
        version=settings.aiacc_version,
    )
