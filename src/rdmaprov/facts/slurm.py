"""Facts for the Slurm deploy: a node's hardware as slurm.conf declares it, the munge key's
digest (never its content: the key does not pass through any command's output), and which Slurm
a host has or would install, and runs."""

from __future__ import annotations

from pyinfra.api import FactBase

from rdmaprov.facts.files import FileDigest, digest_command, parse_file_digest
from rdmaprov.parsers.slurm import HARDWARE_COMMAND, NodeHardware, parse_hardware
from rdmaprov.parsers.slurm_release import (
    PACKAGE_COMMAND,
    RunningSlurm,
    SlurmPackages,
    parse_packages,
    parse_show_config,
)

MUNGE_KEY = "/etc/munge/munge.key"


class SlurmHardware(FactBase[NodeHardware | None]):
    """CPUs, sockets, cores, threads, memory and short hostname (None when lscpu is missing)."""

    def command(self) -> str:
        return HARDWARE_COMMAND

    def process(self, output: list[str]) -> NodeHardware | None:
        return parse_hardware(output)

    @staticmethod
    def default() -> NodeHardware | None:
        return None


class MungeKey(FactBase[FileDigest]):
    """The munge key's sha256, mode and owner (all None when there is no key; an empty file, which
    munged refuses, counts as none)."""

    def command(self) -> str:
        return digest_command(MUNGE_KEY, exists="-s")

    def process(self, output: list[str]) -> FileDigest:
        return parse_file_digest(output)

    @staticmethod
    def default() -> FileDigest:
        return FileDigest()


class SlurmRelease(FactBase[SlurmPackages]):
    """The Slurm packages installed, and what an install would bring (slurm.conf's keys depend on it)."""

    def command(self) -> str:
        return PACKAGE_COMMAND

    def process(self, output: list[str]) -> SlurmPackages:
        return parse_packages(output)

    @staticmethod
    def default() -> SlurmPackages:
        return SlurmPackages()


class RunningSlurmConfig(FactBase[RunningSlurm | None]):
    """`scontrol show config` as the controller answers it; None where there is no scontrol or no
    answer within 10 s (a site whose controller is down is read again at the next apply)."""

    def command(self) -> str:
        return "command -v scontrol >/dev/null 2>&1 && timeout 10 scontrol show config 2>/dev/null; true"

    def process(self, output: list[str]) -> RunningSlurm | None:
        return parse_show_config("\n".join(output))

    @staticmethod
    def default() -> RunningSlurm | None:
        return None
