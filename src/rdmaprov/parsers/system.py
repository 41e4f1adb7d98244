"""Parsers for OS-level command output: os-release, installed packages."""

from __future__ import annotations

import shlex
from dataclasses import dataclass


@dataclass(frozen=True)
class OsInfo:
    """Who the node is: distro id, version, codename and the package family rdmaprov uses."""

    id: str
    version_id: str
    codename: str
    family: str | None  # "debian", "rhel" or None for a distro rdmaprov does not know
    pretty_name: str

    @property
    def major(self) -> str:
        return self.version_id.split(".")[0]


_DEBIAN_LIKE = {"debian", "ubuntu"}
_RHEL_LIKE = {"rhel", "centos", "fedora", "rocky", "almalinux", "alinux", "anolis", "ol"}


def parse_os_release(text: str) -> OsInfo:
    """Parse /etc/os-release (shell-style KEY=value lines)."""
    values: dict[str, str] = {}
    for line in text.splitlines():
        if "=" not in line or line.lstrip().startswith("#"):
            continue
        key, _, raw = line.partition("=")
        try:
            parts = shlex.split(raw)
        except ValueError:
            parts = [raw.strip("\"'")]
        values[key.strip()] = parts[0] if parts else ""
    ident = values.get("ID", "").lower()
    like = set(values.get("ID_LIKE", "").lower().split()) | {ident}
    family = "debian" if like & _DEBIAN_LIKE else "rhel" if like & _RHEL_LIKE else None
    codename = values.get("VERSION_CODENAME") or values.get("UBUNTU_CODENAME", "")
    return OsInfo(ident, values.get("VERSION_ID", ""), codename, family, values.get("PRETTY_NAME", ident))


def parse_installed_packages(text: str) -> set[str]:
    """Names of installed packages, and the names they provide, from
    `dpkg-query -W -f='${db:Status-Abbrev} ${Package} ${Provides}\\n'` (only 'ii' lines count: 'rc'
    means removed with its config left; Provides reads `name (= version), other`), or names alone
    from `rpm -qa --qf '%{NAME}\\n'`."""
    names: set[str] = set()
    for line in text.splitlines():
        first, _, rest = line.strip().partition(" ")
        if not rest.strip():
            if first:
                names.add(first)
            continue
        if len(first) not in (2, 3) or first[0] not in "iurhp":
            continue
        if first.startswith("ii"):
            package, _, provides = rest.strip().partition(" ")
            names.add(package.split(":")[0])
            names.update(item.split()[0].split(":")[0] for item in provides.split(",") if item.strip())
    return names


def parse_package_versions(text: str) -> dict[str, str]:
    """{name: version} of installed packages from `STATUS NAME VERSION` lines (only 'ii' counts)."""
    versions: dict[str, str] = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 3 and parts[0].startswith("ii"):
            versions[parts[1].split(":")[0]] = parts[2]
    return versions
