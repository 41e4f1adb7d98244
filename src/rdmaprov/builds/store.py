"""The control machine's cache of built archives: what nodes receive, and what spares a rebuild.

An archive is in the cache only with its checksum file beside it, and only after its content
was checked against that checksum on arrival (the download goes to .part files first).
"""

from __future__ import annotations

import os
from pathlib import Path

from rdmaprov.builds.spec import sha256_of
from rdmaprov.paths import artifacts_root

PART = ".part"


def local_path(archive: str) -> Path:
    return artifacts_root() / archive


def cached(archive: str) -> bool:
    """Whether the archive and its checksum file are in the cache."""
    path = local_path(archive)
    return path.is_file() and Path(f"{path}.sha256").is_file()


def commit(archive: str) -> str | None:
    """Move a fetched archive into the cache if it matches its checksum; else why not."""
    path = local_path(archive)
    part, sums = Path(f"{path}{PART}"), Path(f"{path}.sha256{PART}")
    try:
        expected = sums.read_text().split()[0]
    except (OSError, IndexError):
        return f"no checksum came with {archive}"
    actual = sha256_of(part)
    if actual != expected:
        part.unlink(missing_ok=True)
        sums.unlink(missing_ok=True)
        return f"{archive} arrived damaged (sha256 {actual[:16]}…, expected {expected[:16]}…)"
    os.replace(part, path)
    os.replace(sums, f"{path}.sha256")
    return None
