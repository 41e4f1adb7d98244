"""A Debian package's data member compressed again: xz out, zstd in, every other byte kept.

A .deb is an ar archive of three members: debian-binary, control.tar.*, data.tar.*. dpkg reads a
data member compressed with xz, gzip, zstd or nothing alike, so swapping the compression of that
one member leaves the package what it was (its control member, its files, their owners and modes)
while the lab's emulated nodes unpack it in about half the time (mirror.py says why it matters).
"""

from __future__ import annotations

import lzma
import os
import subprocess
from pathlib import Path

from rdmaprov.errors import UserError

MAGIC = b"!<arch>\n"
HEADER = 60  # name 16, mtime 12, uid 6, gid 6, mode 8, size 10, "`\n"
ZSTD_LEVEL = 6  # close to xz's size for packages (about a quarter larger), a second per 100 MB here


def members(data: bytes, origin: Path) -> list[tuple[bytes, bytes]]:
    """The archive's members as (header, content), in order; a file that is not one is refused."""
    if not data.startswith(MAGIC):
        raise UserError(f"{origin}: not a Debian package (no ar archive header)")
    found, at = [], len(MAGIC)
    while at < len(data):
        header = data[at : at + HEADER]
        if len(header) < HEADER or header[58:60] != b"`\n":
            raise UserError(f"{origin}: damaged Debian package (bad member header at byte {at})")
        size = int(header[48:58].decode("ascii").strip())
        start = at + HEADER
        found.append((header, data[start : start + size]))
        at = start + size + (size % 2)  # members start on even offsets
    return found


def member_name(header: bytes) -> str:
    """The member's name without GNU ar's closing slash."""
    return header[:16].decode("ascii").strip().rstrip("/")


def with_content(header: bytes, name: str, content: bytes) -> bytes:
    """The header of `content` under `name`, the other fields (times, owner, mode) kept."""
    return name.encode("ascii").ljust(16) + header[16:48] + str(len(content)).encode("ascii").ljust(10) + b"`\n"


def archive(parts: list[tuple[bytes, bytes]]) -> bytes:
    """The ar archive of `parts` (members' headers and contents), each padded to an even length."""
    out = [MAGIC]
    for header, content in parts:
        out += [header, content, b"\n" if len(content) % 2 else b""]
    return b"".join(out)


def recompress_data(deb: Path) -> bool:
    """Rewrite `deb` in place with its data.tar.xz as data.tar.zst; False where it has no xz
    data member (already zstd, gzip or plain: left as it is)."""
    parts = members(deb.read_bytes(), deb)
    names = [member_name(header) for header, _ in parts]
    if "data.tar.xz" not in names:
        return False
    index = names.index("data.tar.xz")
    header, content = parts[index]
    plain = lzma.decompress(content)
    proc = subprocess.run(["zstd", "-q", f"-{ZSTD_LEVEL}", "-T0", "-c"], input=plain, capture_output=True, check=False)
    if proc.returncode != 0:
        raise UserError(f"compressing {deb.name}'s files with zstd failed: {proc.stderr.decode(errors='replace')}")
    parts[index] = (with_content(header, "data.tar.zst", proc.stdout), proc.stdout)
    scratch = deb.with_name(deb.name + ".zst-part")
    scratch.write_bytes(archive(parts))
    os.replace(scratch, deb)
    return True
