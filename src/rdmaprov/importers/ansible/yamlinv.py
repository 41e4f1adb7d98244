"""Ansible's YAML inventory format: groups at the top (usually `all:`), each with `hosts:` (host
patterns with their variables), `vars:` and `children:` (groups nested to any depth), read as
ansible-core's yaml inventory plugin reads it. The text itself is read by rdmaprov's bounded
YAML loader (inventory/source.py), never by an unbounded yaml.safe_load.
"""

from __future__ import annotations

from typing import Any

from rdmaprov.importers.ansible.model import AnsibleInventory, Origin, Var
from rdmaprov.importers.ansible.patterns import PatternError, hosts_of
from rdmaprov.inventory.docpath import DocPath
from rdmaprov.inventory.source import SourceMap

_SECTIONS = ("vars", "children", "hosts")


class _YamlReader:
    def __init__(self, inventory: AnsibleInventory, smap: SourceMap) -> None:
        self.inv = inventory
        self.smap = smap

    def origin(self, path: DocPath) -> Origin:
        return Origin(self.smap.file, self.smap.locate(path, prefer_key=True)[0])

    def group(self, name: Any, body: Any, path: DocPath) -> str | None:
        if not isinstance(body, (dict, type(None))):
            self.inv.warnings.append(
                self.origin(path).problem(
                    f"{name!r} is not a group (its value is not a mapping): skipped, as Ansible skips it",
                    "write a group as a mapping with hosts:, vars: and children:",
                )
            )
            return None
        self.inv.add_group(name, self.origin(path))
        for key, value in (body or {}).items():
            where = path + (key,)
            if key not in _SECTIONS:
                self.inv.warnings.append(
                    self.origin(where).problem(
                        f"group {name!r} has a key {key!r}: skipped, as Ansible skips it",
                        "a group has only hosts:, vars: and children:",
                    )
                )
                continue
            if isinstance(value, str):  # `hosts: gpu01` means one host, as in Ansible
                value = {value: None}
            if value is None:
                continue
            if not isinstance(value, dict):
                self.inv.problems.append(
                    self.origin(where).problem(
                        f"{key} of group {name!r} must be a mapping", f"write {key}: as `name:` entries, one per line"
                    )
                )
                continue
            for item, item_body in value.items():
                if key == "vars":
                    self.inv.set_group_var(name, item, Var(item_body, self.origin(where + (item,))))
                elif key == "children":
                    child = self.group(item, item_body, where + (item,))
                    if child is not None:
                        self.inv.add_child(name, child, self.origin(where + (item,)))
                else:
                    self.hosts(name, item, item_body, where + (item,))
        return name

    def hosts(self, group: str, pattern: str, body: Any, path: DocPath) -> None:
        origin = self.origin(path)
        if not isinstance(body, (dict, type(None))):
            self.inv.problems.append(
                origin.problem(
                    f"host {pattern!r} must map to its variables (or to nothing)",
                    f"write `{pattern}:` alone, or its variables below it as name: value",
                )
            )
            return
        try:
            names, port = hosts_of(pattern)
        except PatternError as exc:
            self.inv.problems.append(
                origin.problem(str(exc), "write a range as [01:16] or [a:f] (begin:end, optionally :step)")
            )
            return
        for name in names:
            host = self.inv.add_host(name, group, origin, port)
            for var, value in (body or {}).items():
                host.vars[var] = Var(value, self.origin(path + (var,)))


def read_yaml_inventory(inventory: AnsibleInventory, data: dict[str, object], smap: SourceMap) -> None:
    """Fill `inventory` from a parsed YAML inventory; problems go to inventory.problems."""
    reader = _YamlReader(inventory, smap)
    for name, body in data.items():
        reader.group(name, body, (name,))
