"""Which Slurm a host runs or is about to run, and what its daemons were started with.

Slurm's configuration grows keys from release to release, and an older daemon refuses a file
with a key it does not know (24.11: `Parsing error at unrecognized key: HealthCheckTimeout`), so
what rdmaprov renders depends on the release. Two places tell it:

- the package manager, for the Slurm that rdmaprov installs (mode full): the installed package's
  version, else the version the next install would bring (apt's candidate, dnf's newest);
- `scontrol show config`, for a Slurm that runs (the site's own in mode health_check, built from
  source as often as packaged): `SLURM_VERSION` and the health check's settings as the
  controller holds them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# The fact's command: dpkg's status and version of slurmd and slurmctld ("dpkg hi  22.05.8-4+deb12u3")
# and apt's candidates, or rpm's installed version and dnf's newest (from its cache only: a fact
# never waits on a repository). Which dpkg states count as installed is the parser's to say.
PACKAGE_COMMAND = (
    "if command -v dpkg-query >/dev/null 2>&1; then "
    "dpkg-query -W -f='dpkg ${db:Status-Abbrev} ${Version}\\n' slurmd slurmctld 2>/dev/null; "
    "apt-cache policy slurmd slurmctld 2>/dev/null"
    ' | awk \'$1 == "Candidate:" && $2 != "(none)" {print "candidate", $2}\'; '
    "elif command -v rpm >/dev/null 2>&1; then "
    "rpm -q --qf 'installed %{VERSION}\\n' slurm 2>/dev/null | grep '^installed '; "
    "dnf -q -C repoquery --latest-limit 1 --qf 'candidate %{version}\\n' slurm 2>/dev/null; "
    "fi; true"
)
# Slurm's release numbers: 22.05.8, 24.11.5; a package's version wraps them (1:22.05.8-4+deb12u3).
_VERSION = re.compile(r"(?:^|[\s:])(\d{2})\.(\d{2})(?:\.(\d+))?")


@dataclass(frozen=True, order=True)
class SlurmVersion:
    """A Slurm release (year.month.micro), ordered so that `version >= SINCE` reads as it says."""

    year: int
    month: int
    micro: int = 0

    def __str__(self) -> str:
        return f"{self.year}.{self.month:02d}.{self.micro}"

    @property
    def release(self) -> str:
        """The release without its maintenance number, as Slurm's notes name it: 25.11."""
        return f"{self.year}.{self.month:02d}"


def parse_version(text: str) -> SlurmVersion | None:
    """The first Slurm release number in `text`: `slurm-wlm 22.05.8`, `22.05.8-4+deb12u3`, `25.11.4`."""
    match = _VERSION.search(text.strip())
    if match is None:
        return None
    return SlurmVersion(int(match.group(1)), int(match.group(2)), int(match.group(3) or 0))


@dataclass(frozen=True)
class SlurmPackages:
    """The Slurm packages of a host: what is installed, and what an install would bring."""

    installed: SlurmVersion | None = None
    candidate: SlurmVersion | None = None

    @property
    def version(self) -> SlurmVersion | None:
        """The Slurm this host runs once the slurm deploy has run: the installed one (rdmaprov
        installs, it does not upgrade), else the one it would install."""
        return self.installed or self.candidate


def parse_packages(lines: list[str]) -> SlurmPackages:
    """PACKAGE_COMMAND's lines → the lowest installed and lowest candidate version (slurmd and
    slurmctld come from one source package; were they apart, the older one decides). A dpkg
    package is installed when its status' second letter says so: `ii`, and `hi` for one held
    with apt-mark (sites hold Slurm to keep upgrades for a maintenance window), not `rc` or `un`."""
    found: dict[str, list[SlurmVersion]] = {"installed": [], "candidate": []}
    for line in lines:
        words = line.split()
        if len(words) == 3 and words[0] == "dpkg":
            kind, text = ("installed" if words[1][1:2] == "i" else "removed"), words[2]
        elif len(words) == 2:
            kind, text = words
        else:
            continue
        version = parse_version(text)
        if kind in found and version is not None:
            found[kind].append(version)
    return SlurmPackages(min(found["installed"], default=None), min(found["candidate"], default=None))


@dataclass(frozen=True)
class RunningSlurm:
    """What `scontrol show config` says of the controller's configuration."""

    version: SlurmVersion | None
    health_check_interval_s: int | None
    # HealthCheckTimeout (Slurm 26.05 and later); None: the release kills the program at 60 s
    health_check_timeout_s: int | None
    health_check_program: str | None


def _seconds(value: str | None) -> int | None:
    match = re.match(r"(\d+)", value or "")
    return int(match.group(1)) if match else None


def parse_show_config(text: str) -> RunningSlurm | None:
    """`scontrol show config` (`Key = value` lines; times as `300 sec`) → RunningSlurm; None when
    the text is no configuration (scontrol failed, the controller did not answer)."""
    values: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if sep and re.fullmatch(r"\s*[A-Za-z_][A-Za-z_\[\]0-9]*\s*", key):
            values[key.strip()] = value.strip()
    if "SLURM_VERSION" not in values and "HealthCheckInterval" not in values:
        return None
    program = values.get("HealthCheckProgram")
    return RunningSlurm(
        version=parse_version(values.get("SLURM_VERSION", "")),
        health_check_interval_s=_seconds(values.get("HealthCheckInterval")),
        health_check_timeout_s=_seconds(values.get("HealthCheckTimeout")),
        health_check_program=None if program in (None, "(null)") else program,
    )
