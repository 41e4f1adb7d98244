"""Inventories of other tools given where an rdmaprov inventory is expected: say what the file is
and the command that imports it, instead of the schema's complaints about every line of it."""

from __future__ import annotations

import re
import shlex
from pathlib import Path
from typing import Any

from rdmaprov.errors import Problem

_ANSIBLE_GROUP_KEYS = {"hosts", "children", "vars"}
_INI_SECTION = re.compile(r"^\[[^:\]\s]+(?::(?:vars|children|hosts))?\]\s*([#;].*)?$")
_INI_HOST_VAR = re.compile(r"^\S+\s+.*\bansible_\w+=")


def _ansible_yaml(data: dict[str, object]) -> bool:
    """Top-level groups (`all:`), each a mapping of hosts/children/vars: Ansible's YAML inventory."""
    if "cluster" in data or not data:
        return False
    groups = list(data.values())
    shaped = all(g is None or (isinstance(g, dict) and set(g) <= _ANSIBLE_GROUP_KEYS) for g in groups)
    return shaped and any(isinstance(g, dict) and ({"hosts", "children"} & set(g)) for g in groups)


def _ansible_ini(text: str) -> bool:
    for line in text.splitlines():
        stripped = line.strip()
        if stripped and not stripped.startswith(("#", ";")):
            if _INI_SECTION.match(stripped) or _INI_HOST_VAR.match(stripped):
                return True
    return False


def foreign_inventory(path: Path, text: str, data: Any) -> Problem | None:
    """The problem to report when `path` is an Ansible inventory (YAML `data`, or INI `text` that
    YAML could not read as a mapping); None when it is not one."""
    output = "rdmaprov-inventory.yaml" if path.name == "inventory.yaml" else "inventory.yaml"
    command = f"rdmaprov import ansible {shlex.quote(str(path))} -o {output}"
    if isinstance(data, dict) and "plugin" in data and "cluster" not in data:
        return Problem(
            str(path),
            f"this is the configuration of Ansible's inventory plugin {str(data['plugin'])!r}, not an rdmaprov "
            "inventory",
            fix=f"make a static copy (`ansible-inventory -i {shlex.quote(str(path))} --list --yaml > static.yml`), "
            "then import it: rdmaprov import ansible static.yml -o inventory.yaml",
        )
    if isinstance(data, dict):
        kind = "YAML" if _ansible_yaml(data) else None
    else:
        kind = "INI" if _ansible_ini(text) else None
    if kind is None:
        return None
    return Problem(
        str(path),
        f"this looks like an Ansible inventory ({kind}), not an rdmaprov inventory",
        fix=f"import it: {command} (then `rdmaprov validate {output}`)",
    )
