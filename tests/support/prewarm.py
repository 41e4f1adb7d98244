"""Make the caches the end-to-end tiers need before they need them: each lab release's image and
package pool, the Vagrant box, the lab's Open MPI archive.

    python -m tests.support.prewarm

`tools/test.sh` starts this in the background on a fresh machine while style, types and the unit
tiers keep only one core busy, so the other core builds them instead of the lab's tests waiting on
them later (on CI's two cores each is minutes of its serial chain). Every one is made once: a test
that needs one while this still makes it waits for it, then uses it (make_once, making).
"""

from __future__ import annotations

import sys
import time

from rdmaprov.lab import mirror
from rdmaprov.lab.box import ensure_box
from rdmaprov.lab.image import ensure_image
from rdmaprov.lab.mpi import ensure_mpi_archive
from rdmaprov.lab.releases import DEFAULT_RELEASE, find_release
from tests.support.lab import VM_LAB_RELEASES


def main() -> int:
    started = time.monotonic()
    for codename in dict.fromkeys(VM_LAB_RELEASES.split(",")):
        release = find_release(codename)
        mirror.fetch_packages(ensure_image(release), release)
    ensure_box(DEFAULT_RELEASE)  # `lab box` with no --release, as test_vagrant.py runs it
    ensure_mpi_archive()
    print(f"prewarm: the lab's caches made in {time.monotonic() - started:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
