"""Package sources: an internal apt/yum mirror with its signing key (air-gapped clusters, the lab)."""

from __future__ import annotations

from typing import Any

from pyinfra.api import deploy

from rdmaprov.deploys.repository import apt_line, read_key, yum_section
from rdmaprov.engine.context import NodeContext
from rdmaprov.engine.factcache import fact
from rdmaprov.facts.system import Os
from rdmaprov.operations.files import managed_file
from rdmaprov.operations.sources import only_sources

APT_KEY = "/etc/apt/keyrings/rdmaprov-mirror.asc"
APT_LIST = "/etc/apt/sources.list.d/rdmaprov-mirror.list"
YUM_REPO = "/etc/yum.repos.d/rdmaprov-mirror.repo"


def apt_source_line(apt: dict[str, Any], codename: str, signed: bool) -> str:
    words = [apt["url"], apt.get("suite") or codename, *apt.get("components", ["main"])]
    return apt_line(f"signed-by={APT_KEY}" if signed else "", words, "mirror.apt")


def yum_repo(yum: dict[str, Any]) -> str:
    return yum_section("rdmaprov-mirror", "rdmaprov internal mirror", yum["baseurl"], yum.get("gpgkey"))


@deploy("package_sources")
def package_sources(ctx: NodeContext) -> None:
    mirror = ctx.node.get("mirror") or {}
    os_info = fact(Os)
    family = os_info.family
    apt = mirror.get("apt") if family == "debian" else None
    yum = mirror.get("yum") if family == "rhel" else None
    inventory_dir = str(ctx.inventory.path.resolve().parent)
    key = read_key(apt["key"], inventory_dir, "mirror.apt.key") if apt and apt.get("key") else None
    codename = os_info.codename
    managed_file(name="mirror signing key", path=APT_KEY, content=key)
    managed_file(name="apt mirror source", path=APT_LIST, content=apt_source_line(apt, codename, key is not None) if apt else None)
    managed_file(name="yum mirror repository", path=YUM_REPO, content=yum_repo(yum) if yum else None)
    exclusive = bool((apt or yum or {}).get("exclusive"))
    only_sources(name="other package sources", keep=[APT_LIST, YUM_REPO], exclusive=exclusive)
