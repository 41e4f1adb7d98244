"""The validated inventory as typed objects: hosts with their merged node settings.

Merging follows Ansible's precedence (host > group > defaults), dicts deeply, lists replaced;
then every default the schema declares is filled in, so deploys never guess at a missing key.
"""

from __future__ import annotations

import copy
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import overload

from rdmaprov.errors import Problem
from rdmaprov.inventory.config import NodeConfig, SshTrustConfig
from rdmaprov.inventory.gates import GatesConfig
from rdmaprov.inventory.settings import Section
from rdmaprov.inventory.slurm import SlurmConfig
from rdmaprov.schemas import load_schema


@dataclass(frozen=True)
class SSHSettings:
    """How the engine reaches one host."""

    user: str = "root"
    port: int = 22
    key: str | None = None
    known_hosts: str | None = None
    password_env: str | None = None
    sudo_password_env: str | None = None
    connect_timeout: int = 10
    command_timeout: int = 3600
    password: str | None = field(default=None, repr=False)  # typed at a prompt (--ask-pass), never from YAML


@dataclass(frozen=True)
class HostSpec:
    """One host: where it is, how to reach it, and the merged settings of its node."""

    name: str
    address: str
    ssh: SSHSettings
    groups: tuple[str, ...]
    node: NodeConfig


@dataclass(frozen=True)
class Inventory:
    """A whole cluster as declared in one inventory file."""

    path: Path
    name: str
    hosts: dict[str, HostSpec]
    groups: dict[str, tuple[str, ...]]
    gates: GatesConfig
    ssh_trust: SshTrustConfig
    parallel: int | None = None
    slurm: SlurmConfig | None = None  # None: the inventory does not declare Slurm
    raw: Mapping[str, object] = field(default_factory=dict, repr=False)
    warnings: list[Problem] = field(default_factory=list)

    def host_names(self) -> list[str]:
        return list(self.hosts)


def deep_merge(base: Mapping[str, object], override: Mapping[str, object]) -> dict[str, object]:
    """Return base updated by override: mappings merge key by key, anything else replaces.

    Neither input is changed; the result shares what it did not have to change with them
    (settings are read, never written, once loaded: copying 10,000 hosts' settings was most of
    the loader's time).
    """
    merged = dict(base)
    for key, value in override.items():
        current = merged.get(key)
        if isinstance(value, dict) and isinstance(current, dict):
            merged[key] = deep_merge(current, value)
        else:
            merged[key] = value
    return merged


def flatten(settings: Mapping[str, object], prefix: tuple[str, ...] = ()) -> dict[tuple[str, ...], object]:
    """Leaf values of nested settings by key path (lists are leaves)."""
    leaves: dict[tuple[str, ...], object] = {}
    for key, value in settings.items():
        if isinstance(value, dict) and value:
            leaves.update(flatten(value, prefix + (key,)))
        else:
            leaves[prefix + (key,)] = value
    return leaves


def resolve_ref(schema: Mapping[str, object], root: Mapping[str, object]) -> Mapping[str, object]:
    """The schema a `$ref` points to, with the keywords written beside the `$ref` (a default, a
    description) kept over it, as JSON Schema 2020-12 applies both."""
    ref = schema.get("$ref")
    if not isinstance(ref, str) or not ref:
        return schema
    target: object = root
    for part in ref.lstrip("#/").split("/"):
        target = target.get(part) if isinstance(target, dict) else None
    if not isinstance(target, dict):
        raise ValueError(f"the schema's {ref} points at nothing")  # rdmaprov's own schema is wrong
    siblings = {key: value for key, value in schema.items() if key != "$ref"}
    return {**target, **siblings} if siblings else target


def _written_only(schema: Mapping[str, object]) -> bool:
    """A section that exists only when written: one with required keys (mirror.apt needs a url),
    or one marked `x-written-only` (its keys are required only while it is enabled, so JSON
    Schema's `required` cannot say it)."""
    return bool(schema.get("required")) or schema.get("x-written-only") is True


def fill_defaults(
    value: Mapping[str, object],
    schema: Mapping[str, object],
    root: Mapping[str, object],
    only: Mapping[str, object] | None = None,
) -> dict[str, object]:
    """Add the schema's declared defaults, creating nested mappings that have defaulted keys.

    With `only` (a host's own vars merged over settings already filled), existing mappings are
    filled again only where `only` reaches: the rest was filled before.
    """
    schema = resolve_ref(schema, root)
    filled = dict(value)
    properties = schema.get("properties")
    for key, written in properties.items() if isinstance(properties, dict) else ():
        if key in filled and only is not None and key not in only:
            continue
        sub = resolve_ref(written, root)
        current = filled.get(key)
        if key in filled:
            if isinstance(current, dict) and sub.get("properties"):
                deeper = only.get(key) if only is not None else None
                filled[key] = fill_defaults(current, sub, root, deeper if isinstance(deeper, dict) else None)
        elif "default" in sub:
            filled[key] = copy.deepcopy(sub["default"])
        elif sub.get("type") == "object" and sub.get("properties") and not _written_only(sub):
            nested = fill_defaults({}, sub, root)
            if nested:
                filled[key] = nested
    return filled


@overload
def resolve_path(value: str, base: Path) -> str: ...
@overload
def resolve_path(value: None, base: Path) -> None: ...


def resolve_path(value: str | None, base: Path) -> str | None:
    """Expand ~ and make a path relative to the inventory file absolute."""
    if value is None:
        return None
    expanded = Path(os.path.expanduser(value))
    return str(expanded if expanded.is_absolute() else (base / expanded).resolve())


def ssh_settings(layers: list[Mapping[str, object]], base: Path) -> SSHSettings:
    """A host's SSH settings from its layers (cluster, groups, its own), the last one winning;
    a key no layer writes keeps SSHSettings' default."""
    merged = Section.of({key: value for layer in layers for key, value in layer.items()})
    default = SSHSettings()
    return SSHSettings(
        user=merged.text("user") if "user" in merged else default.user,
        port=merged.integer("port") if "port" in merged else default.port,
        key=resolve_path(merged.optional_text("key"), base),
        known_hosts=resolve_path(merged.optional_text("known_hosts"), base),
        password_env=merged.optional_text("password_env"),
        sudo_password_env=merged.optional_text("sudo_password_env"),
        connect_timeout=merged.integer("connect_timeout") if "connect_timeout" in merged else default.connect_timeout,
        command_timeout=merged.integer("command_timeout") if "command_timeout" in merged else default.command_timeout,
    )


def node_schema() -> tuple[Mapping[str, object], Mapping[str, object]]:
    """The schema of a node's settings, and the whole schema its `$ref`s point into."""
    root = load_schema("inventory")
    return Section.of(root).section("$defs").section("node").data, root
