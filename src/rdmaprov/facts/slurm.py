"""Facts for the Slurm deploy: a node's hardware as slurm.conf declares it, and the munge key's
digest (never its content: the key does not pass through any command's output)."""

from __future__ import annotations

from pyinfra.api import FactBase

from rdmaprov.facts.files import FileDigest, digest_command, parse_file_digest
from rdmaprov.parsers.slurm import HARDWARE_COMMAND, NodeHardware, parse_hardware

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
