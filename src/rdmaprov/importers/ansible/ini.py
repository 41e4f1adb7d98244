"""Ansible's INI inventory format (DeepOps' `config/inventory`), read line by line as ansible-core
reads it: `[group]` sections of host lines (`gpu01 ansible_host=10.0.0.1`, ranges `gpu[01:16]`),
`[group:children]`, `[group:vars]`, comments with `#` or `;`, and hosts before any section.

Values are read as Ansible reads them (Python literals where they are one: `2222` is a number,
`'2222'` a string, `True` a boolean), so the variables found match `ansible-inventory --list`.
Every problem names the file and line; all of them are reported at once.
"""

from __future__ import annotations

import ast
import re
import shlex
import warnings
from dataclasses import dataclass, field
from typing import Any, Literal

from rdmaprov.importers.ansible.model import UNGROUPED, AnsibleInventory, Origin, Var
from rdmaprov.importers.ansible.patterns import PatternError, hosts_of

# ansible-core's own patterns (plugins/inventory/ini.py): `[name]` or `[name:kind]`, a trailing comment.
_SECTION = re.compile(r"^\[([^:\]\s]+)(?::(\w+))?\]\s*(?:#.*)?$")
_GROUP_NAME = re.compile(r"^([^:\]\s]+)\s*(?:#.*)?$")
_COMMENT = ("#", ";")
# Longer values stay text: nobody writes a typed literal that long, and parsing one costs time.
_MAX_LITERAL = 100_000


def ini_value(text: str) -> Any:
    """A value as Ansible's INI reader makes it: a Python literal where the text is one."""
    if len(text) > _MAX_LITERAL:
        return text
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            value = ast.literal_eval(text)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return text
    return _plain(value, text)


def _plain(value: Any, text: str) -> Any:
    """Only the types Ansible keeps: tuples and sets become lists, bytes text; the rest stays text."""
    if isinstance(value, (str, bool, int, float)) or value is None:
        return value
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    if isinstance(value, (list, tuple, set, frozenset)):
        return [_plain(item, str(item)) for item in value]
    if isinstance(value, dict):
        return {key: _plain(item, str(item)) for key, item in value.items()}
    return text  # complex numbers, Ellipsis: Ansible keeps them as text


@dataclass(frozen=True)
class _Pending:
    """A group named before its section declares it, first on `line`: by its [name:vars], or as
    a child of `parents` in theirs."""

    line: int
    state: Literal["vars", "children"]
    parents: list[str] = field(default_factory=list)


class _IniReader:
    def __init__(self, inventory: AnsibleInventory) -> None:
        self.inv = inventory
        self.file = str(inventory.path)
        self.pending: dict[str, _Pending] = {}

    def origin(self, line: int) -> Origin:
        return Origin(self.file, line)

    def fail(self, line: int, message: str, fix: str) -> None:
        self.inv.problems.append(self.origin(line).problem(message, fix))

    def read(self, text: str) -> None:
        group, state = UNGROUPED, "hosts"
        for number, raw in enumerate(text.splitlines(), start=1):
            line = raw.strip()
            if not line or line.startswith(_COMMENT):
                continue
            section = _SECTION.match(line)
            if section:
                group, state = self.section(number, section.group(1), section.group(2) or "hosts")
            elif line.startswith("[") and line.endswith("]"):
                self.fail(
                    number,
                    f"section header {line!r} is not one Ansible reads",
                    "write [group], [group:vars] or [group:children], with no spaces inside the brackets",
                )
                state = "skip"
            elif state == "hosts":
                self.host_line(number, line, group)
            elif state == "vars":
                self.var_line(number, line, group)
            elif state == "children":
                self.child_line(number, line, group)
        for name, pending in self.pending.items():
            if pending.state == "vars":
                self.fail(
                    pending.line,
                    f"[{name}:vars] sets variables of group {name!r}, which no section declares",
                    f"declare the group with a [{name}] section (it may be empty), or fix the name",
                )
            else:
                self.fail(
                    pending.line,
                    f"[{pending.parents[-1]}:children] names group {name!r}, which no section declares",
                    f"add a [{name}] section (it may be empty), or fix the name",
                )

    def section(self, number: int, name: str, kind: str) -> tuple[str, str]:
        if kind not in ("hosts", "children", "vars"):
            self.fail(
                number, f"section [{name}:{kind}] has an unknown kind {kind!r}", "use [group:vars] or [group:children]"
            )
            return name, "skip"
        if name not in self.inv.groups:
            # [group:vars] alone does not declare a group: it must be declared somewhere in the file.
            if kind == "vars" and name not in self.pending:
                self.pending[name] = _Pending(number, "vars")
            self.inv.add_group(name, self.origin(number))
        if name in self.pending and kind != "vars":
            self.resolve(name)
        return name, kind

    def resolve(self, name: str) -> None:
        """A group named earlier (as a child, or by its vars) is declared now."""
        pending = self.pending.pop(name)
        if pending.state != "children":
            return
        for parent in pending.parents:
            self.inv.add_child(parent, name, self.origin(pending.line))
            if parent in self.pending and self.pending[parent].state == "children":
                self.resolve(parent)

    def host_line(self, number: int, line: str, group: str) -> None:
        try:
            tokens = shlex.split(line, comments=True)
        except ValueError as exc:
            self.fail(number, f"cannot read the host line: {exc}", "close the quotes of the line's values")
            return
        if not tokens:
            return
        try:
            names, port = hosts_of(tokens[0])
        except PatternError as exc:
            self.fail(number, str(exc), "write a range as [01:16] or [a:f] (begin:end, optionally :step)")
            return
        variables = {}
        for token in tokens[1:]:
            key, equals, value = token.partition("=")
            if not equals:
                self.fail(
                    number,
                    f"expected name=value after host {tokens[0]!r}, found {token!r}",
                    "write host variables as name=value; quote a value that has spaces",
                )
                return
            variables[key] = Var(ini_value(value), self.origin(number))
        for name in names:
            host = self.inv.add_host(name, group, self.origin(number), port)
            host.vars.update(variables)

    def var_line(self, number: int, line: str, group: str) -> None:
        key, equals, value = line.partition("=")
        if not equals:
            self.fail(number, f"expected name=value in [{group}:vars], found {line!r}", "write one name=value per line")
            return
        self.inv.set_group_var(group, key.strip(), Var(ini_value(value.strip()), self.origin(number)))

    def child_line(self, number: int, line: str, group: str) -> None:
        match = _GROUP_NAME.match(line)
        if not match:
            self.fail(
                number, f"expected a group name in [{group}:children], found {line!r}", "write one group per line"
            )
            return
        child = match.group(1)
        if child in self.inv.groups:
            self.inv.add_child(group, child, self.origin(number))
        elif child in self.pending:
            self.pending[child].parents.append(group)
        else:
            self.pending[child] = _Pending(number, "children", [group])


def read_ini(inventory: AnsibleInventory, text: str) -> None:
    """Fill `inventory` from INI text; problems go to inventory.problems."""
    _IniReader(inventory).read(text)
