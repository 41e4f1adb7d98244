"""OS packages with apt or dnf/yum, deciding from the installed-package fact.

pyinfra's apt.packages refreshes the index by age even when nothing is missing, which makes a
converged node report a change; here the index is refreshed only when something is installed.
"""

from __future__ import annotations

import shlex

from pyinfra import host
from pyinfra.api import StringCommand

from rdmaprov.engine.desired import operation
from rdmaprov.engine.factcache import fact
from rdmaprov.facts.system import InstalledPackages, Os, PackageVersions
from rdmaprov.packages import for_release
from rdmaprov.parsers.system import OsInfo
from rdmaprov.quoting import NOTE_PREFIX

# A lock another process holds is waited for, a note each try (shown live), for up to 60 × 5 s;
# any other error (a full disk…) fails at once with the tool's own words instead of being retried
# and then installed over. Two locks are met: an apply killed during an install leaves dpkg
# half-configured ("dpkg was interrupted") and perhaps a dpkg still holding its lock, finished
# first with `dpkg --configure -a`; and an `apt-get update` still running (the killed apply's,
# left behind on the node, or apt-daily's on a fresh boot) holds the package lists' lock, which
# apt-get's DPkg::Lock::Timeout does not wait for (seen on the lab: "E: Could not get lock
# /var/lib/apt/lists/lock. It is held by process 3957 (apt-get)"). dpkg words its lock two ways:
# "…frontend lock was locked by another process with pid N" (Debian 12's 1.21) and "…frontend
# lock was locked by /usr/bin/apt-get process with pid N" (Debian 13's 1.22, seen in CI).
RETRY_LOCKED = (
    'retry_locked() { what=$1; shift; for try in $(seq 60); do out=$("$@" 2>&1) && return 0; '
    'case "$out" in *"locked by another process"*|*"lock was locked by"*|*"Could not get lock"*) [ "$try" = 60 ] && '
    '{ echo "rdmaprov: gave up after 5 min waiting for the $what lock: $out" >&2; return 1; }; '
    f'echo "{NOTE_PREFIX}waiting for the $what lock ($try/60, 5 s each): $(echo "$out" | grep -m 1 lock)" >&2; '
    'sleep 5;; *) printf "%s\\n" "$out" >&2; return 1;; esac; done; }'
)
DPKG_RECOVER = f"{RETRY_LOCKED}; retry_locked dpkg env DEBIAN_FRONTEND=noninteractive dpkg --configure -a || exit 1"
APT = "apt-get -o DPkg::Lock::Timeout=300"


def install_command(family: str, missing: list[str], os_major: str = "", downgrade: bool = False) -> str:
    """The exact command that installs `missing` on a node of this package family; `downgrade`:
    a pinned version may be older than the installed one (apt refuses that under -y unless told;
    dnf's install goes back to an older version it is named)."""
    names = " ".join(shlex.quote(p) for p in missing)
    if family == "debian":
        return (
            f"{DPKG_RECOVER}; retry_locked 'package lists' {APT} update -q || exit 1; "
            f"DEBIAN_FRONTEND=noninteractive {APT} install -y -q {'--allow-downgrades ' if downgrade else ''}"
            f"--no-install-recommends {names}"
        )
    return f"{rhel_tool(os_major)} install -y {names}"


def rhel_tool(os_major: str) -> str:
    """The RHEL family's package tool: yum before RHEL 8, dnf since."""
    return "yum" if os_major in ("6", "7") else "dnf"


def known_os() -> OsInfo:
    """The node's distro (one fact read), or a clear error for a distro rdmaprov does not know."""
    os_info = fact(Os)
    if os_info.family is None:
        raise ValueError(
            f"unknown distro {os_info.pretty_name!r} (ID={os_info.id}): rdmaprov supports Debian/Ubuntu and "
            "RHEL-family nodes (RHEL, Rocky, Alma, Alibaba Cloud Linux)"
        )
    return os_info


def pinned(name: str, version: str, family: str) -> str:
    """A package at an exact version, as apt (`name=version`) or dnf (`name-version`) takes it."""
    return f"{name}={version}" if family == "debian" else f"{name}-{version}"


@operation()
def packages(by_family: dict[str, list[str]], versions: dict[str, str] | None = None):
    """Install the family's packages that are not installed yet (never removes). A package given
    a version in `versions` is installed at exactly that version when another one is installed."""
    os_info = known_os()
    assert os_info.family is not None, "known_os raises for a distro without a package family"
    family = os_info.family
    names = for_release(by_family, family, os_info.id, os_info.major)
    versions = versions or {}
    installed = fact(InstalledPackages)
    missing = [name for name in names if name not in installed]
    pins = [name for name in names if name in versions]
    if pins:
        have = fact(PackageVersions, names=tuple(pins))
        missing += [name for name in pins if name in installed and have.get(name) != versions[name]]
    if not missing:
        host.noop(f"{len(names)} packages already installed")
        return
    wanted = [pinned(name, versions[name], family) if name in versions else name for name in names if name in missing]
    yield StringCommand(install_command(family, wanted, os_info.major))
