"""Where the lab keeps its cache (images, packages) and its state (keys, nodes, PIDs)."""

from __future__ import annotations

import fcntl
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from rdmaprov.paths import cache_root


def default_lab_dir() -> Path:
    """State of the default lab; inventories/lab.yaml points at the keys kept here."""
    return cache_root() / "lab"


@contextmanager
def making(entry: Path, log: Callable[[str], object] = print) -> Iterator[None]:
    """Hold the cache entry `entry` (an image, a package pool, a box) while it is checked and made:
    two rdmaprov runs at once (two labs, a lab and a Vagrant box) would otherwise both build it in
    the same scratch folder and remove each other's work. The second waits, then finds it made.
    The lock is a file beside the entry, released by the kernel if its holder dies."""
    entry.parent.mkdir(parents=True, exist_ok=True)
    with open(entry.with_name(entry.name + ".lock"), "a") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            log(f"lab: waiting for another rdmaprov making {entry}")
            fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def make_once(entry: Path, made: Path, make: Callable[[], object], log: Callable[[str], object] = print) -> None:
    """Make the cache entry `entry` unless `made`, the file its maker writes last, is there; runs
    at once take turns (making) and the later one finds it made."""
    if made.exists():
        return
    with making(entry, log):
        if not made.exists():
            make()
