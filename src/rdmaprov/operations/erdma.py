"""Alibaba eRDMA's user space: its verbs driver from the eRDMA repository, and the AIACC NCCL plugin."""

from __future__ import annotations

from pyinfra import host
from pyinfra.api import FileUploadCommand, StringCommand

from rdmaprov.engine.desired import operation
from rdmaprov.engine.factcache import fact
from rdmaprov.facts.rdma import ErdmaProvider
from rdmaprov.facts.system import InstalledPackages, PackageVersions
from rdmaprov.operations.packages import install_command, known_os, rhel_tool
from rdmaprov.quoting import fail_command, sh, sh_join

AIACC_PACKAGE = "aiacc-nccl-plugin"


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
