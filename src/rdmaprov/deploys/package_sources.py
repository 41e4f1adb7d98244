"""Package sources: an internal apt/yum mirror with its signing key (air-gapped clusters, the lab)."""

from __future__ import annotations

from pyinfra.api import deploy

from rdmaprov.deploys.repository import apt_line, read_key, yum_section
from rdmaprov.engine.context import NodeContext
from rdmaprov.engine.factcache import fact
from rdmaprov.facts.system import Os
from rdmaprov.inventory.config import AptMirror, YumMirror
from rdmaprov.operations.files import managed_file
from rdmaprov.operations.sources import only_sources

APT_KEY = "/etc/apt/keyrings/rdmaprov-mirror.asc"
APT_LIST = "/etc/apt/sources.list.d/rdmaprov-mirror.list"
YUM_REPO = "/etc/yum.repos.d/rdmaprov-mirror.repo"


def apt_source_line(apt: AptMirror, codename: str, signed: bool) -> str:
    words = [apt.url, apt.suite or codename, *apt.components]
    return apt_line(f"signed-by={APT_KEY}" if signed else "", words, "mirror.apt")


def yum_repo(yum: YumMirror) -> str:
    return yum_section("rdmaprov-mirror", "rdmaprov internal mirror", yum.baseurl, yum.gpgkey)


@deploy("package_sources")
def package_sources(ctx: NodeContext) -> None:
    os_info = fact(Os)
    apt = ctx.node.apt_mirror if os_info.family == "debian" else None
    yum = ctx.node.yum_mirror if os_info.family == "rhel" else None
    inventory_dir = str(ctx.inventory.path.resolve().parent)
    key = read_key(apt.key, inventory_dir, "mirror.apt.key") if apt and apt.key else None
    codename = os_info.codename
    managed_file(name="mirror signing key", path=APT_KEY, content=key)
    managed_file(
        name="apt mirror source",
        path=APT_LIST,
        content=apt_source_line(apt, codename, key is not None) if apt else None,
    )
    managed_file(name="yum mirror repository", path=YUM_REPO, content=yum_repo(yum) if yum else None)
    exclusive = bool(apt and apt.exclusive or yum and yum.exclusive)
    only_sources(name="other package sources", keep=[APT_LIST, YUM_REPO], exclusive=exclusive)
