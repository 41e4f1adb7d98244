"""Inventories for tests: write one and read back its problems, or build typed settings from a
partial mapping as the loader would."""

from __future__ import annotations

from pathlib import Path

import pytest

from rdmaprov.errors import UserError
from rdmaprov.inventory import load_inventory
from rdmaprov.inventory.config import NodeConfig
from rdmaprov.inventory.gates import GatesConfig
from rdmaprov.inventory.model import HostSpec, SSHSettings, fill_defaults, node_schema
from rdmaprov.schemas import load_schema


def write(tmp_path: Path, text: str, name: str = "inv.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def problems(path: Path, require_files: bool = True) -> list[str]:
    """Every problem loading `path` reports, formatted as the CLI prints them (it must fail)."""
    with pytest.raises(UserError) as info:
        load_inventory(path, require_files=require_files)
    return [p.format() for p in info.value.problems]


def defaults_problems(tmp_path: Path, defaults: str) -> tuple[Path, list[str]]:
    """An inventory of one host whose `defaults:` section is `defaults` (YAML lines indented two
    spaces), and every problem loading it reports."""
    inventory = write(
        tmp_path,
        f"cluster: {{name: c}}\ndefaults:\n{defaults}groups:\n  g:\n    hosts: {{n1: {{address: 10.0.0.1}}}}\n",
    )
    return inventory, problems(inventory, require_files=False)


def node_config(settings: dict) -> NodeConfig:
    """A node's typed settings from a partial mapping, its defaults filled from the schema as the
    loader fills them."""
    schema, root = node_schema()
    return NodeConfig.from_settings(fill_defaults(settings, schema, root))


def gates_config(gates: dict | None = None) -> GatesConfig:
    """The cluster's gate settings from a partial mapping, defaults from the schema."""
    root = load_schema("inventory")
    return GatesConfig.from_settings(
        fill_defaults({"gates": gates or {}}, root["properties"]["cluster"], root)["gates"]
    )


def lab_host(name: str = "node1", **node) -> HostSpec:
    """A SoftRoCE lab node's spec (node1 of the lab, as verify sees it), with `node` settings
    replacing whole top-level keys."""
    base = {
        "fabric": "softroce",
        "netns_mode": "exclusive",
        "rdma": {"netdevs": ["eth0"], "devices": ["rxe0"], "port": 1, "storage_hcas": []},
        "limits": {"memlock": "unlimited"},
    }
    base.update(node)
    return HostSpec(name, "10.77.0.11", SSHSettings(), ("nodes",), node_config(base))
