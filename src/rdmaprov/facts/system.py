"""Facts about the OS: distro, installed packages, kernel modules, network interfaces."""

from __future__ import annotations

import shlex

from pyinfra.api import FactBase

from rdmaprov.facts.shell import YesNoFact, yes_if
from rdmaprov.parsers.system import OsInfo, parse_installed_packages, parse_os_release, parse_package_versions


class Os(FactBase[OsInfo]):
    """The distro from /etc/os-release."""

    def command(self) -> str:
        return "cat /etc/os-release 2>/dev/null || cat /usr/lib/os-release"

    def process(self, output: list[str]) -> OsInfo:
        return parse_os_release("\n".join(output))


class InstalledPackages(FactBase[set[str]]):
    """Names of installed OS packages (dpkg or rpm), and on dpkg the names they provide: Debian 13
    renamed libraries for 64-bit time (librdmacm1 → librdmacm1t64, which provides librdmacm1), so
    the old name is installed when its successor is."""

    def command(self) -> str:
        return (
            "if command -v dpkg-query >/dev/null; then "
            "dpkg-query -W -f='${db:Status-Abbrev} ${Package} ${Provides}\\n'; "
            "elif command -v rpm >/dev/null; then rpm -qa --qf '%{NAME}\\n'; fi"
        )

    def process(self, output: list[str]) -> set[str]:
        return parse_installed_packages("\n".join(output))

    @staticmethod
    def default() -> set[str]:
        return set()


class PackageVersions(FactBase[dict[str, str]]):
    """Installed versions of the named packages: {name: version} (dpkg's Version, rpm's VERSION-RELEASE)."""

    def command(self, names: tuple[str, ...]) -> str:
        quoted = " ".join(shlex.quote(n) for n in names)
        return (
            f"if command -v dpkg-query >/dev/null; then dpkg-query -W -f='${{db:Status-Abbrev}} ${{Package}} "
            f"${{Version}}\\n' {quoted} 2>/dev/null; "
            f"elif command -v rpm >/dev/null; then rpm -q --qf 'ii %{{NAME}} %{{VERSION}}-%{{RELEASE}}\\n' {quoted} "
            "2>/dev/null | grep '^ii '; fi; true"
        )

    def process(self, output: list[str]) -> dict[str, str]:
        return parse_package_versions("\n".join(output))

    @staticmethod
    def default() -> dict[str, str]:
        return {}


class LoadedModules(FactBase[set[str]]):
    """Kernel modules loaded now (built-in ones too, from /sys/module)."""

    def command(self) -> str:
        return "ls /sys/module 2>/dev/null || true"

    def process(self, output: list[str]) -> set[str]:
        return {line.strip() for line in output if line.strip()}

    @staticmethod
    def default() -> set[str]:
        return set()


class NetDevices(FactBase[dict[str, int]]):
    """Network interfaces and their MTU: {name: mtu}."""

    def command(self) -> str:
        return 'for d in /sys/class/net/*; do echo "${d##*/} $(cat $d/mtu)"; done'

    def process(self, output: list[str]) -> dict[str, int]:
        devices = {}
        for line in output:
            parts = line.split()
            if len(parts) == 2 and parts[1].isdigit():
                devices[parts[0]] = int(parts[1])
        return devices

    @staticmethod
    def default() -> dict[str, int]:
        return {}


class _UnitQuery(FactBase[str]):
    """`systemctl QUERY UNIT`'s one-word answer; `absent` when it says nothing."""

    query = ""
    absent = ""

    def command(self, unit: str) -> str:
        return f"systemctl {self.query} {shlex.quote(unit)} 2>/dev/null || true"

    def process(self, output: list[str]) -> str:
        return output[0].strip() if output else self.absent

    @classmethod
    def default(cls) -> str:
        return cls.absent


class UnitEnabled(_UnitQuery):
    """`systemctl is-enabled UNIT`: 'enabled', 'disabled', 'not-found'..."""

    query, absent = "is-enabled", "not-found"


class UnitActive(_UnitQuery):
    """`systemctl is-active UNIT`: 'active', 'inactive', 'failed'..."""

    query, absent = "is-active", "inactive"


class NetNamespaceCount(FactBase[int]):
    """How many network namespaces exist (1: only the host's own).

    Counts those of every process and those kept alive only by a bind mount (`ip netns add`,
    Docker), which the kernel counts too when it refuses a live netns mode switch.
    """

    def command(self) -> str:
        return (
            "ls -L -i -d /proc/[0-9]*/ns/net /run/netns/* /var/run/docker/netns/* 2>/dev/null | awk '{print $1}' | "
            "sort -u | wc -l"
        )

    def process(self, output: list[str]) -> int:
        return int(output[0].strip()) if output and output[0].strip().isdigit() else 0


class UserExists(YesNoFact):
    """Whether a local account exists."""

    def command(self, user: str) -> str:
        return yes_if(f"id -u {shlex.quote(user)} >/dev/null 2>&1")
