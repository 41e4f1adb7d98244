"""Inventory: one YAML file describing a cluster, validated against schemas/inventory.schema.json.

The loader (YAML, jsonschema) is imported on first use, not with the package: the typed model
(config.py, model.py) is stdlib-only, so `rdmaprov node-check` can run on a node's bare python3.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rdmaprov.inventory.loader import load_inventory
    from rdmaprov.inventory.model import HostSpec, Inventory, SSHSettings

__all__ = ["HostSpec", "Inventory", "SSHSettings", "load_inventory"]


def __getattr__(name: str) -> Any:
    if name == "load_inventory":
        from rdmaprov.inventory.loader import load_inventory

        return load_inventory
    if name in ("HostSpec", "Inventory", "SSHSettings"):
        from rdmaprov.inventory import model

        return getattr(model, name)
    raise AttributeError(f"module 'rdmaprov.inventory' has no attribute {name!r}")
