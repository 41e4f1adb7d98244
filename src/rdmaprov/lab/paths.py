"""Where the lab keeps its cache (images, packages) and its state (keys, nodes, PIDs)."""

from __future__ import annotations

from pathlib import Path

from rdmaprov.paths import cache_root


def default_lab_dir() -> Path:
    """State of the default lab; inventories/lab.yaml points at the keys kept here."""
    return cache_root() / "lab"
