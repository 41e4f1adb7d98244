"""The zipapp's __main__.py (nodecheck/zipapp.py packs this file under that name; nothing imports it).

Python cannot keep compiled bytecode inside a zip, so a zipapp compiles every module on every
run: on a slow or emulated CPU that is most of node-check's time. Run as root, the archive is
unpacked once into /var/cache/rdmaprov/node-check/<its sha256> and run from there, where Python
keeps each module's bytecode after the first run. The archive itself stays byte-for-byte
reproducible (sources only). Not root, or no room: it runs from the archive as it is.
RDMAPROV_NODE_CHECK_CACHE moves the cache (the tests do).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import sys
import tempfile
import time
import zipfile

CACHE = os.environ.get("RDMAPROV_NODE_CHECK_CACHE") or "/var/cache/rdmaprov/node-check"


STALE_S = 600  # an unpacking folder this old belongs to a run that was killed


def intact(target: str, packed: zipfile.ZipFile) -> bool:
    """Every file of the archive is in the unpacked copy, at its size (a copy that lost files to a
    clean-up, or a full disk, is unpacked anew rather than run half)."""
    for member in packed.infolist():
        if member.is_dir():
            continue
        try:
            if os.path.getsize(os.path.join(target, member.filename)) != member.file_size:
                return False
        except OSError:
            return False
    return True


def unpack(archive: str, target: str) -> None:
    """Unpack into a fresh folder and rename it to `target` (no run ever sees half of it); the
    folder goes when anything fails."""
    staging = tempfile.mkdtemp(prefix="unpacking-", dir=CACHE)
    try:
        with zipfile.ZipFile(archive) as packed:
            packed.extractall(staging)
        os.chmod(staging, 0o755)
        os.rename(staging, target)
    except (OSError, zipfile.BadZipFile):  # a full disk, or another run unpacked it first
        shutil.rmtree(staging, ignore_errors=True)
        if not os.path.isdir(target):
            raise


def tidy(keep: str) -> None:
    """Remove earlier versions of the archive, and unpacking folders of killed runs."""
    for name in os.listdir(CACHE):
        path = os.path.join(CACHE, name)
        if name.startswith("unpacking-"):
            try:
                stale = os.path.getmtime(path) < time.time() - STALE_S
            except OSError:
                continue
            if stale:
                shutil.rmtree(path, ignore_errors=True)
        elif name != keep and len(name) == 16:
            shutil.rmtree(path, ignore_errors=True)


def unpacked(archive: str) -> str | None:
    """The directory holding this archive's files (unpacked now if need be), or None."""
    try:
        with open(archive, "rb") as handle:
            digest = hashlib.sha256(handle.read()).hexdigest()[:16]
        target = os.path.join(CACHE, digest)
        with zipfile.ZipFile(archive) as packed:
            if os.path.isdir(target) and intact(target, packed):
                return target
        if os.geteuid() != 0:
            return None
        os.makedirs(CACHE, mode=0o755, exist_ok=True)
        if os.path.isdir(target):  # damaged: set aside, then unpacked anew
            shutil.rmtree(target, ignore_errors=True)
        unpack(archive, target)
        tidy(digest)
        return target if os.path.isdir(target) else None
    except (OSError, zipfile.BadZipFile):
        return None


code = unpacked(sys.path[0])
if code:
    sys.path[0] = code

from rdmaprov.nodecheck.run import main  # noqa: E402 (after choosing where modules come from)

sys.exit(main(sys.argv[1:]))
