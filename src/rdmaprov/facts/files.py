"""Facts about files that rdmaprov manages."""

from __future__ import annotations

import base64
from dataclasses import dataclass

from pyinfra.api import FactBase

from rdmaprov.facts.shell import YesNoFact, yes_if
from rdmaprov.parsers.blocks import markers
from rdmaprov.quoting import sh, sh_join


@dataclass(frozen=True)
class FileState:
    """A regular file's content and ownership (None fields when the file is absent)."""

    exists: bool
    content: bytes | None = None
    mode: str | None = None
    user: str | None = None
    group: str | None = None

    @property
    def text(self) -> str:
        """The content as text ('' when absent); config files are UTF-8."""
        return (self.content or b"").decode("utf-8", "replace")


def parse_file_state(lines: list[str]) -> FileState:
    """Parse `stat -c '%a %U %G'` followed by the file's base64 (or the word MISSING)."""
    if not lines or lines[0].strip() == "MISSING":
        return FileState(exists=False)
    mode, user, group = lines[0].split()
    payload = "".join(lines[1:]).strip()
    return FileState(True, base64.b64decode(payload) if payload else b"", mode, user, group)


class ManagedFile(FactBase[FileState]):
    """Content, mode and owner of one file, in one round trip (so a diff can be shown)."""

    def command(self, path: str) -> str:
        quoted = sh(path)
        return (
            f"if [ -f {quoted} ]; then stat -c '%a %U %G' {quoted} && base64 -w0 {quoted} && echo; else echo "
            "MISSING; fi"
        )

    def process(self, output: list[str]) -> FileState:
        return parse_file_state(output)

    @staticmethod
    def default() -> FileState:
        return FileState(exists=False)


@dataclass(frozen=True)
class BlockFileState:
    """A file holding rdmaprov's block, read without the block's own lines: its sha256, and the
    rest of it (the markers kept), from which the file the block wants is worked out."""

    exists: bool
    sha256: str = ""
    outside: bytes = b""
    mode: str | None = None
    user: str | None = None
    group: str | None = None


class BlockFile(FactBase[BlockFileState]):
    """A file with a managed block, whose block is not sent back: the block of a cluster-wide
    file (every node's host keys on every node) grows with the cluster, so reading it whole from
    every node cost the control machine n² bytes; its sha256 tells whether it is as wanted.
    The block's lines are those parsers/blocks.py finds: from the first BEGIN line to the END
    line after it, or to the end of the file."""

    def command(self, path: str, marker: str) -> str:
        quoted = sh(path)
        begin, end = markers(marker)
        keep = 'i==0 && $0==ENVIRON["B"] {print; i=1; next} i==1 && $0==ENVIRON["E"] {i=2} i!=1'
        return (
            f"if [ -f {quoted} ]; then stat -c '%a %U %G' {quoted} && sha256sum < {quoted} | cut -d' ' -f1 && "
            f"B={sh(begin)} E={sh(end)} awk {sh(keep)} {quoted} | base64 -w0 && echo; else echo MISSING; fi"
        )

    def process(self, output: list[str]) -> BlockFileState:
        if not output or output[0].strip() == "MISSING":
            return BlockFileState(exists=False)
        mode, user, group = output[0].split()
        digest = output[1].strip() if len(output) > 1 else ""
        payload = "".join(output[2:]).strip()
        return BlockFileState(True, digest, base64.b64decode(payload) if payload else b"", mode, user, group)

    @staticmethod
    def default() -> BlockFileState:
        return BlockFileState(exists=False)


class FilesIn(FactBase[list[str]]):
    """Regular files directly inside the given directories (or the given files), as paths."""

    def command(self, paths: tuple[str, ...]) -> str:
        quoted = sh_join(paths)
        return f"find {quoted} -maxdepth 1 -type f 2>/dev/null || true"

    def process(self, output: list[str]) -> list[str]:
        return sorted(line.strip() for line in output if line.strip())

    @staticmethod
    def default() -> list[str]:
        return []


class PathExists(YesNoFact):
    """Whether a path exists (no content read: it may be a large binary)."""

    def command(self, path: str) -> str:
        return yes_if(f"[ -e {sh(path)} ]")


@dataclass(frozen=True)
class FileDigest:
    """A file's sha256 and ownership, for files too large to read back (None fields when absent)."""

    sha256: str | None = None
    mode: str | None = None
    user: str | None = None
    group: str | None = None


def parse_file_digest(lines: list[str]) -> FileDigest:
    """`MODE USER GROUP` then sha256sum's line, or MISSING."""
    if len(lines) < 2 or lines[0].strip() == "MISSING":
        return FileDigest()
    mode, user, group = lines[0].split()
    return FileDigest(lines[1].split()[0], mode, user, group)


def digest_command(path: str, exists: str = "-f") -> str:
    """Mode, owner and sha256 of `path` when `test {exists}` holds for it, else MISSING."""
    quoted = sh(path)
    return f"if [ {exists} {quoted} ]; then stat -c '%a %U %G' {quoted} && sha256sum {quoted}; else echo MISSING; fi"


class FileSha256(FactBase[FileDigest]):
    """sha256, mode and owner of one file, in one round trip."""

    def command(self, path: str) -> str:
        return digest_command(path)

    def process(self, output: list[str]) -> FileDigest:
        return parse_file_digest(output)

    @staticmethod
    def default() -> FileDigest:
        return FileDigest()
