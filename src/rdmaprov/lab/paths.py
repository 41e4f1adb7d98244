"""Where the lab keeps its cache (images, packages) and its state (keys, nodes, PIDs)."""

from __future__ import annotations

import os
from pathlib import Path


def cache_root() -> Path:
    """Image and package cache shared by every lab of this user (XDG cache)."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache")
    return Path(base) / "rdmaprov"


def default_lab_dir() -> Path:
    """State of the default lab; inventories/lab.yaml points at the keys kept here."""
    return cache_root() / "lab"
