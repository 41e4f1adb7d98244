"""Read an Ansible inventory file as ansible-core would: YAML where the file is a YAML mapping of
groups, INI otherwise (DeepOps' extensionless `config/inventory`), then group_vars/ and host_vars/.
"""

from __future__ import annotations

import re
from pathlib import Path

from rdmaprov.errors import Problem, UserError
from rdmaprov.importers.ansible.ini import read_ini
from rdmaprov.importers.ansible.model import AnsibleInventory, without_unsafe
from rdmaprov.importers.ansible.varsdirs import ANSIBLE_TAGS, load_vars_dirs
from rdmaprov.importers.ansible.yamlinv import read_yaml_inventory
from rdmaprov.inventory.source import parse_yaml, read_text

YAML_EXTENSIONS = (".yml", ".yaml", ".json")
_STATIC_FIX = "make a static copy with `ansible-inventory -i FILE --list --yaml > static.yml` and import that"


_YAML_KEY = re.compile(r"^[^\s\[\]=#;]+:(\s|$)")


def _looks_like_yaml(text: str) -> bool:
    """The first line that is not a comment is a YAML mapping key (`all:`), not an INI section or host."""
    for line in text.splitlines():
        stripped = line.strip()
        if stripped and not stripped.startswith(("#", ";", "---")):
            return bool(_YAML_KEY.match(stripped))
    return False


def _refuse(path: Path, message: str, fix: str) -> UserError:
    return UserError(Problem(str(path), message, fix=fix))


def read_ansible(path: Path) -> AnsibleInventory:
    """The inventory at `path` with its vars directories; raises UserError listing every problem."""
    if path.is_dir():
        raise _refuse(
            path,
            "is a directory: an inventory directory holds several inventory files",
            "import the inventory file inside it, e.g. `rdmaprov import ansible DIR/hosts`",
        )
    if path.suffix == ".toml":
        raise _refuse(path, "TOML inventories are not read by rdmaprov import", _STATIC_FIX)
    text = read_text(path)
    yaml_error: UserError | None = None
    try:
        data, smap, problems = parse_yaml(text, str(path), keep_tags=ANSIBLE_TAGS)
    except UserError as exc:
        if path.suffix in YAML_EXTENSIONS:
            raise  # meant as YAML: the YAML error is the one to fix
        data, yaml_error = None, exc
    if isinstance(data, dict):
        if isinstance(data.get("cluster"), dict):
            raise _refuse(path, "is an rdmaprov inventory already: there is nothing to import", "use it as it is")
        if "plugin" in data:
            raise _refuse(
                path,
                f"is the configuration of Ansible's inventory plugin {data['plugin']!r} (a dynamic inventory), "
                "not a list of hosts",
                _STATIC_FIX,
            )
        inventory = AnsibleInventory(path, "YAML")
        inventory.problems.extend(problems)
        read_yaml_inventory(inventory, without_unsafe(data), smap)
    else:
        inventory = AnsibleInventory(path, "INI")
        read_ini(inventory, text)
        if inventory.problems and yaml_error is not None and _looks_like_yaml(text):
            raise yaml_error  # YAML with a mistake, not INI: its YAML error is the one to fix
    if inventory.problems:
        raise UserError(inventory.problems)
    inventory.finish()
    load_vars_dirs(inventory)
    if inventory.problems:
        raise UserError(inventory.problems)
    if not inventory.hosts:
        raise _refuse(
            path,
            f"this Ansible inventory ({inventory.kind}) names no hosts",
            "add the hosts (DeepOps' example has them commented out: uncomment the [all] lines)",
        )
    return inventory
