"""group_vars/ and host_vars/ beside the inventory, found as ansible-core's host_group_vars plugin
finds them: for a group or host NAME, the first of `NAME`, `NAME.yml`, `NAME.yaml`, `NAME.json`
that exists; a directory is read whole (sorted, sub-directories too, hidden files and `~`
backups skipped), later files replacing earlier files' variables.

Each file goes through the bounded YAML loader; the walk is bounded too (files, total size,
depth, and symlink loops), because a vars tree is as untrusted as the inventory.
"""

from __future__ import annotations

import os
from pathlib import Path

from rdmaprov.errors import Problem, UserError
from rdmaprov.importers.ansible.model import AnsibleInventory, Group, Host, Origin, Var, without_unsafe
from rdmaprov.inventory.source import MAX_BYTES, parse_yaml, read_text

EXTENSIONS = (".yml", ".yaml", ".json")
ANSIBLE_TAGS = frozenset({"!vault", "!unsafe"})
MAX_FILES = 10_000
MAX_DIR_DEPTH = 16
VAULT_HEADER = "$ANSIBLE_VAULT"


class _Budget:
    """What the whole walk may read, so that a huge or looping vars tree is refused, not read."""

    def __init__(self) -> None:
        self.files = 0
        self.bytes = 0

    def take(self, path: Path) -> None:
        self.files += 1
        self.bytes += path.stat().st_size if path.is_file() else 0
        if self.files > MAX_FILES or self.bytes > MAX_BYTES:
            raise UserError(
                Problem(
                    str(path),
                    f"the group_vars/ and host_vars/ files together are more than {MAX_FILES:,} files or "
                    f"{MAX_BYTES:,} bytes",
                    fix="check that the inventory is in the right directory",
                )
            )


def _directory_files(directory: Path, seen: frozenset[str] = frozenset(), depth: int = 0) -> list[Path]:
    real = os.path.realpath(directory)
    if real in seen or depth > MAX_DIR_DEPTH:
        return []  # a symlink loop, or deeper than any real vars tree
    found: list[Path] = []
    for name in sorted(os.listdir(directory)):
        if name.startswith(".") or name.endswith("~"):
            continue
        path = directory / name
        extension = os.path.splitext(name)[1]
        if path.is_dir() and not extension:
            found += _directory_files(path, seen | {real}, depth + 1)
        elif path.is_file() and (not extension or extension in EXTENSIONS):
            found.append(path)
    return found


def vars_files(base: Path, name: str) -> list[Path]:
    """The files Ansible reads for one group or host, in the order it reads them."""
    if not base.is_dir() or not name or name.startswith("/") or "/" in name or name in (".", ".."):
        return []
    for extension in ("",) + EXTENSIONS:
        path = base / (name + extension)
        if path.is_dir():
            return _directory_files(path)
        if path.exists():
            return [path]
    return []


def _read_vars(path: Path, inventory: AnsibleInventory, notes: list[str]) -> dict[str, Var]:
    text = read_text(path)
    if text.lstrip().startswith(VAULT_HEADER):
        notes.append(f"{path} is encrypted with ansible-vault: not read (translate what it sets by hand)")
        return {}
    data, smap, problems = parse_yaml(text, str(path), keep_tags=ANSIBLE_TAGS)
    inventory.problems.extend(problems)
    data = without_unsafe(data)
    if data is None:
        return {}
    if not isinstance(data, dict):
        inventory.problems.append(
            Origin(str(path), 1).problem("a vars file must be a mapping of names to values", "write name: value lines")
        )
        return {}
    return {key: Var(value, Origin(str(path), smap.locate((key,), prefer_key=True)[0])) for key, value in data.items()}


def load_vars_dirs(inventory: AnsibleInventory) -> None:
    """Add group_vars/ and host_vars/ (beside the inventory file) to the inventory's groups and hosts."""
    base = inventory.path.parent
    budget = _Budget()
    entities: list[Group | Host] = [*inventory.groups.values(), *inventory.hosts.values()]
    for entity in entities:
        kind = "group_vars" if isinstance(entity, Group) else "host_vars"
        try:
            paths = vars_files(base / kind, entity.name)
        except OSError as exc:
            raise UserError(
                Problem(str(base / kind), f"cannot read: {exc.strerror}", fix="make the directory readable")
            ) from None
        for path in paths:
            budget.take(path)
            inventory.files.append(str(path))
            entity.dir_vars.update(_read_vars(path, inventory, entity.notes))
