"""Inventory: one YAML file describing a cluster, validated against schemas/inventory.schema.json."""

from rdmaprov.inventory.loader import load_inventory
from rdmaprov.inventory.model import HostSpec, Inventory, SSHSettings

__all__ = ["HostSpec", "Inventory", "SSHSettings", "load_inventory"]
