"""Vendor package repositories (NVIDIA CUDA, Alibaba eRDMA): the source entry and its signing key.

Every host plans the same three files; those that do not apply to its distro (or a repository
it does not want) are kept absent. Files are named rdmaprov-* so an exclusive mirror keeps them.
"""

from __future__ import annotations

import functools
from pathlib import Path

import requests

from rdmaprov.engine.context import NodeContext
from rdmaprov.inventory.model import resolve_path
from rdmaprov.operations.files import managed_file
from rdmaprov.parsers.system import OsInfo
from rdmaprov.quoting import config_value, config_word


@functools.lru_cache(maxsize=32)
def read_key(source: str, inventory_dir: str, setting: str) -> str:
    """A signing key from a URL (fetched once per run, here on the control machine) or a local file."""
    if source.startswith(("http://", "https://")):
        try:
            response = requests.get(source, timeout=30)
            response.raise_for_status()
        except requests.RequestException as exc:
            raise ValueError(
                f"cannot fetch the signing key {source} ({setting}): {exc}; fix the URL, or give a local file "
                "(air-gapped)"
            ) from exc
        return response.text
    path = resolve_path(source, Path(inventory_dir))
    try:
        with open(path, encoding="utf-8") as handle:
            return handle.read()
    except OSError as exc:
        raise ValueError(f"cannot read the signing key {path} ({setting}): {exc.strerror}; fix {setting}") from exc


def key_path(slug: str, family: str | None) -> str:
    return f"/etc/apt/keyrings/{slug}.asc" if family == "debian" else f"/etc/pki/rpm-gpg/RPM-GPG-KEY-{slug}"


def yum_section(slug: str, title: str, baseurl: str, gpgkey: str | None) -> str:
    """One yum/dnf repository section; without a key, packages are not signature-checked."""
    lines = [f"[{slug}]", f"name={title}", f"baseurl={config_value(baseurl, f'{title} baseurl')}", "enabled=1"]
    lines += ["gpgcheck=1", f"gpgkey={config_value(gpgkey, f'{title} gpgkey')}"] if gpgkey else ["gpgcheck=0"]
    return "\n".join(lines) + "\n"


def apt_line(options: str, words: list[str], what: str) -> str:
    """A one-line-style apt source, `deb [OPTIONS] URL SUITE COMPONENT…`: whitespace separates
    its fields, so each must be one word."""
    fields = ([f"[{options}]"] if options else []) + [config_word(word, what) for word in words]
    return f"deb {' '.join(fields)}\n"


def repository_files(
    slug: str,
    title: str,
    family: str | None,
    apt_source: str | None,
    yum_baseurl: str | None,
    key: str | None,
    key_text: str | None,
    apt_arch: str | None = None,
) -> dict[str, str | None]:
    """{path: content or None (absent)} of one vendor repository: its key file, apt source and yum repo.

    `apt_source` is what follows `deb [OPTIONS] ` (URL, suite, components). On RHEL a key URL is
    handed to dnf as is; a local key file is uploaded and referenced with file://.
    """
    keyfile = key_path(slug, family)
    wanted_apt = apt_source is not None and family == "debian"
    wanted_yum = yum_baseurl is not None and family == "rhel" and key is not None
    remote_key = bool(key and key.startswith(("http://", "https://")))
    upload_key = key is not None and (wanted_apt or (wanted_yum and not remote_key))
    options = (f"arch={apt_arch} " if apt_arch else "") + f"signed-by={keyfile}"
    return {
        keyfile: key_text if upload_key else None,
        f"/etc/apt/sources.list.d/{slug}.list": apt_line(options, (apt_source or "").split(" "), f"{title} source")
        if wanted_apt
        else None,
        f"/etc/yum.repos.d/{slug}.repo": yum_section(
            slug, title, yum_baseurl, key if remote_key else f"file://{keyfile}"
        )
        if wanted_yum and yum_baseurl is not None
        else None,
    }


def needs_key_text(family: str | None, apt_source: str | None, yum_baseurl: str | None, key: str | None) -> bool:
    """Whether the key's content must be read (apt always; dnf only for a local key file)."""
    if key is None:
        return False
    remote = key.startswith(("http://", "https://"))
    return (family == "debian" and apt_source is not None) or (
        family == "rhel" and yum_baseurl is not None and not remote
    )


def vendor_repository(
    ctx: NodeContext,
    label: str,
    slug: str,
    os_info: OsInfo,
    apt_source: str | None,
    yum_baseurl: str | None,
    key: str | None,
    key_setting: str,
    apt_arch: str | None = None,
) -> None:
    """Plan the key, apt source and yum repository of one vendor repository (None: not wanted)."""
    family = os_info.family
    text = (
        read_key(key, str(ctx.inventory.path.resolve().parent), key_setting)
        if needs_key_text(family, apt_source, yum_baseurl, key)
        else None
    )
    files = repository_files(slug, label, family, apt_source, yum_baseurl, key, text, apt_arch)
    for what, (path, content) in zip(("signing key", "apt source", "yum repository"), files.items(), strict=True):
        managed_file(name=f"{label} {what}", path=path, content=content)
