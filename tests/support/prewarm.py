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
from collections.abc import Callable
from functools import partial

from rdmaprov.lab import mirror
from rdmaprov.lab.box import ensure_box
from rdmaprov.lab.image import ensure_image
from rdmaprov.lab.mpi import ensure_mpi_archive
from rdmaprov.lab.releases import DEFAULT_RELEASE, Release, find_release
from tests.support.lab import VM_LAB_RELEASES


def _steps() -> list[tuple[str, Callable[[], object]]]:
    """Each cache, in the order the tests first need them; one failing leaves the others to make."""
    steps: list[tuple[str, Callable[[], object]]] = []
    for name in dict.fromkeys(VM_LAB_RELEASES.split(",")):
        release = find_release(name)
        steps.append((f"the {name} image and package pool", partial(_image_and_pool, release)))
    steps.append(("the Vagrant box", partial(ensure_box, DEFAULT_RELEASE)))  # `lab box`, as test_vagrant.py runs it
    steps.append(("the lab's Open MPI", ensure_mpi_archive))
    return steps


def _image_and_pool(release: Release) -> None:
    mirror.fetch_packages(ensure_image(release), release)


def main() -> int:
    started, failed = time.monotonic(), 0
    for name, make in _steps():
        try:
            make()
        except Exception as exc:  # said, and the next cache made: its test would only meet it later
            failed += 1
            print(f"prewarm: {name} failed: {exc}", flush=True)
    print(f"prewarm: the lab's caches made in {time.monotonic() - started:.0f} s ({failed} failed)")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
