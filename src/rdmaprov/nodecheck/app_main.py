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
import zipfile

CACHE = os.environ.get("RDMAPROV_NODE_CHECK_CACHE") or "/var/cache/rdmaprov/node-check"


def unpacked(archive: str) -> str | None:
    """The directory holding this archive's files (unpacked now if need be), or None."""
    try:
        with open(archive, "rb") as handle:
            digest = hashlib.sha256(handle.read()).hexdigest()[:16]
        target = os.path.join(CACHE, digest)
        if os.path.isdir(target):
            return target
        if os.geteuid() != 0:
            return None
        os.makedirs(CACHE, mode=0o755, exist_ok=True)
        staging = tempfile.mkdtemp(prefix="unpacking-", dir=CACHE)
        with zipfile.ZipFile(archive) as packed:
            packed.extractall(staging)
        os.chmod(staging, 0o755)
        try:
            os.rename(staging, target)
        except OSError:  # another run unpacked it first
            shutil.rmtree(staging, ignore_errors=True)
        for name in os.listdir(CACHE):  # earlier versions of the archive
            if name != digest and len(name) == 16 and not name.startswith("unpacking-"):
                shutil.rmtree(os.path.join(CACHE, name), ignore_errors=True)
        return target if os.path.isdir(target) else None
    except (OSError, zipfile.BadZipFile):
        return None


code = unpacked(sys.path[0])
if code:
    sys.path[0] = code

from rdmaprov.nodecheck.run import main  # noqa: E402 (after choosing where modules come from)

sys.exit(main(sys.argv[1:]))
