"""Vendor package repositories (NVIDIA CUDA, Alibaba eRDMA): the source entry and its signing key.

Every host plans the same three files; those that do not apply to its distro (or a repository
it does not want) are kept absent. Files are named rdmaprov-* so an exclusive mirror keeps them.
"""

from __future__ import annotations

import functools
import os

import requests

from rdmaprov.engine.context import NodeContext
from rdmaprov.operations.files import managed_file
from rdmaprov.parsers.system import OsInfo


@functools.lru_cache(maxsize=32)
def read_key(source: str, inventory_dir: str, setting: str) -> str:
    """A signing key from a URL (fetched once per run, here on the control machine) or a local file."""
    if source.startswith(("http://", "https://")):
        try:
            response = requests.get(source, timeout=30)
            response.raise_for_status()
        except requests.RequestException as exc:
            raise ValueError(f"cannot fetch the signing key {source} ({setting}): {exc}; fix the URL, or give a local file (air-gapped)") from exc
        return response.text
    path = os.path.join(inventory_dir, os.path.expanduser(source))
    try:
        with open(path, encoding="utf-8") as handle:
            return handle.read()
    except OSError as exc:
        raise ValueError(f"cannot read the signing key {path} ({setting}): {exc.strerror}; fix {setting}") from exc


def key_path(slug: str, family: str | None) -> str:
    return f"/etc/apt/keyrings/{slug}.asc" if family == "debian" else f"/etc/pki/rpm-gpg/RPM-GPG-KEY-{slug}"


def yum_section(slug: str, title: str, baseurl: str, gpgkey: str) -> str:
    return "\n".join([f"[{slug}]", f"name={title}", f"baseurl={baseurl}", "enabled=1", "gpgcheck=1", f"gpgkey={gpgkey}"]) + "\n"


def vendor_repository(ctx: NodeContext, label: str, slug: str, os_info: OsInfo, apt_source: str | None, yum_baseurl: str | None,
                      key: str | None, key_setting: str, apt_arch: str | None = None) -> None:
    """Plan the key, apt source and yum repository of one vendor repository (None: not wanted).

    `apt_source` is the line after `deb [OPTIONS] ` (URL, suite, components). On RHEL a key URL is handed to dnf as
    is; a local key file is uploaded and referenced with file://.
    """
    family = os_info.family
    inventory_dir = str(ctx.inventory.path.resolve().parent)
    keyfile = key_path(slug, family)
    wanted_apt = apt_source is not None and family == "debian"
    wanted_yum = yum_baseurl is not None and family == "rhel"
    remote_key = bool(key and key.startswith(("http://", "https://")))
    upload_key = key is not None and (wanted_apt or (wanted_yum and not remote_key))
    managed_file(name=f"{label} signing key", path=keyfile, content=read_key(key, inventory_dir, key_setting) if upload_key else None)
    managed_file(name=f"{label} apt source", path=f"/etc/apt/sources.list.d/{slug}.list",
                 content=f"deb [{f'arch={apt_arch} ' if apt_arch else ''}signed-by={keyfile}] {apt_source}\n" if wanted_apt else None)
    gpgkey = key if remote_key else f"file://{keyfile}"
    managed_file(name=f"{label} yum repository", path=f"/etc/yum.repos.d/{slug}.repo",
                 content=yum_section(slug, label, yum_baseurl, gpgkey) if wanted_yum and key else None)
