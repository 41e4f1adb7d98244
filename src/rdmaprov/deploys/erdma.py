"""Alibaba eRDMA (fabric erdma): the eRDMA package repository, its user-space driver, and the AIACC
NCCL plugin. Runs before the RDMA user space so that rdma-core comes from the eRDMA repository.

The user-space packages are judged by the fact that matters: whether libibverbs has the erdma
provider. Distro rdma-core without it is upgraded from the eRDMA repository.
"""

from __future__ import annotations

import os

from pyinfra import host
from pyinfra.api import FileUploadCommand, StringCommand, deploy

from rdmaprov.deploys.repository import vendor_repository
from rdmaprov.engine.context import NodeContext
from rdmaprov.engine.desired import operation
from rdmaprov.engine.factcache import fact
from rdmaprov.facts.shell import YesNoFact, yes_if
from rdmaprov.facts.system import InstalledPackages, Os, PackageVersions
from rdmaprov.operations.packages import install_command, known_os, rhel_tool
from rdmaprov.quoting import fail_command, sh, sh_join

ERDMA_REPO = "https://mirrors.aliyun.com/erdma"
ERDMA_KEY = "https://mirrors.aliyun.com/erdma/GPGKEY"
# The eRDMA user-space driver as Alibaba's guide installs it.
ERDMA_PACKAGES = {
    "debian": ["libibverbs1", "ibverbs-providers", "ibverbs-utils", "librdmacm1"],
    "rhel": ["libibverbs", "rdma-core", "librdmacm", "libibverbs-utils"],
}
AIACC_PACKAGE = "aiacc-nccl-plugin"


class ErdmaProvider(YesNoFact):
    """Whether libibverbs has the erdma provider (the eRDMA repository's rdma-core)."""

    def command(self) -> str:
        return yes_if(
            "ls /usr/lib*/libibverbs/liberdma-rdmav*.so /usr/lib/*/libibverbs/liberdma-rdmav*.so >/dev/null 2>&1"
        )


def upgrade_command(family: str, names: list[str], os_major: str) -> str:
    """Install or upgrade `names` to the repositories' newest (apt's install upgrades, dnf's does not)."""
    if family == "debian":
        return install_command(family, names, os_major)
    return f"{install_command(family, names, os_major)} && {rhel_tool(os_major)} -y upgrade {sh_join(names)}"


@operation()
def erdma_userspace(by_family: dict[str, list[str]]):
    """The eRDMA user-space driver installed, from the eRDMA repository."""
    if not by_family:
        host.noop("not an eRDMA node")
        return
    os_info = known_os()
    assert os_info.family is not None, "known_os raises for a distro without a package family"
    names = by_family.get(os_info.family, [])
    installed = fact(InstalledPackages)
    if fact(ErdmaProvider) and all(n in installed for n in names):
        host.noop("erdma provider present")
        return
    yield StringCommand(upgrade_command(os_info.family, names, os_info.major))


def plugin_file(family: str) -> str:
    return f"/var/cache/rdmaprov/{AIACC_PACKAGE}.{'deb' if family == 'debian' else 'rpm'}"


@operation()
def aiacc_plugin(source: str | None, version: str):
    """The AIACC NCCL plugin at `version`, from a URL (downloaded on the node) or a local package file."""
    if source is None:
        host.noop("no AIACC plugin declared")
        return
    os_info = known_os()
    assert os_info.family is not None, "known_os raises for a distro without a package family"
    have = fact(PackageVersions, names=(AIACC_PACKAGE,)).get(AIACC_PACKAGE, "")
    if have.split("-")[0] == version:
        host.noop(f"{AIACC_PACKAGE} {have} installed")
        return
    target = plugin_file(os_info.family)
    yield StringCommand("mkdir -p /var/cache/rdmaprov")
    if source.startswith(("http://", "https://")):
        fix = "fix erdma.aiacc_plugin, or download the package where you can and give its local path"
        yield StringCommand(
            f"curl -fsSL --retry 3 -o {sh(target)} {sh(source)} || {fail_command(f'cannot download {source}', fix)}"
        )
    else:
        yield FileUploadCommand(source, target)
    install = f"dpkg -i {target}" if os_info.family == "debian" else f"rpm -Uvh --replacepkgs {target}"
    yield StringCommand(f"{install} && rm -f {target}")


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
