"""An Ansible inventory as Ansible itself sees it: hosts, groups, children and variables, each
variable with the file and line it came from.

The INI and YAML readers fill it through the same methods Ansible's own inventory offers
(add_group, add_child, add_host, set a variable), so the two formats cannot drift apart; the
precedence of variables (effective_vars) follows ansible-core's default order, which the tests
compare with `ansible-inventory --list` on real inventories.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rdmaprov.errors import Problem, UserError
from rdmaprov.inventory.source import TaggedScalar

ALL = "all"
UNGROUPED = "ungrouped"
# Ten times the largest cluster rdmaprov is made for, and far more groups than any site has:
# enough for every real inventory, and a bound on the work a hostile one can cause.
MAX_HOSTS = 20_000
MAX_GROUPS = 5_000
MAX_MEMBERSHIPS = 200_000


def without_unsafe(value: Any) -> Any:
    """Ansible's `!unsafe` only stops templating: the value is its text. `!vault` stays tagged
    (encrypted: it cannot be read here)."""
    if isinstance(value, TaggedScalar) and value.tag == "!unsafe":
        return value.text
    if isinstance(value, dict):
        return {key: without_unsafe(item) for key, item in value.items()}
    if isinstance(value, list):
        return [without_unsafe(item) for item in value]
    return value


def is_encrypted(value: Any) -> bool:
    return isinstance(value, TaggedScalar) and value.tag == "!vault"


@dataclass(frozen=True)
class Origin:
    """Where something was written: a file, and the line when the format has lines."""

    file: str
    line: int | None = None

    def __str__(self) -> str:
        return f"{self.file}:{self.line}" if self.line is not None else self.file

    def problem(self, message: str, fix: str, path: str = "") -> Problem:
        return Problem(self.file, message, self.line, None, path, fix)


@dataclass(frozen=True)
class Var:
    """One variable's value as written, and where."""

    value: Any
    origin: Origin


@dataclass
class Group:
    name: str
    origin: Origin
    hosts: list[str] = field(default_factory=list)  # direct members, in the order written
    children: list[str] = field(default_factory=list)
    parents: list[str] = field(default_factory=list)
    vars: dict[str, Var] = field(default_factory=dict)  # from the inventory file
    dir_vars: dict[str, Var] = field(default_factory=dict)  # from group_vars/
    notes: list[str] = field(default_factory=list)  # what could not be read (an encrypted vars file)
    priority: int = 1


@dataclass
class Host:
    name: str
    origin: Origin
    groups: list[str] = field(default_factory=list)  # direct groups, in the order written
    vars: dict[str, Var] = field(default_factory=dict)
    dir_vars: dict[str, Var] = field(default_factory=dict)  # from host_vars/
    notes: list[str] = field(default_factory=list)


class AnsibleInventory:
    """Hosts and groups of one inventory source; problems are collected, never raised one by one."""

    def __init__(self, path: Path, kind: str) -> None:
        self.path = path
        self.kind = kind  # "INI" or "YAML"
        origin = Origin(str(path))
        # As ansible-core starts every inventory: `ungrouped` is `all`'s first child.
        self.groups: dict[str, Group] = {
            ALL: Group(ALL, origin, children=[UNGROUPED]),
            UNGROUPED: Group(UNGROUPED, origin, parents=[ALL]),
        }
        self.hosts: dict[str, Host] = {}
        self.files: list[str] = [str(path)]  # every file read, in order
        self.problems: list[Problem] = []
        self.warnings: list[Problem] = []
        self._depth: dict[str, int] = {}
        self._merged: dict[tuple[str, ...], dict[str, Var]] = {}
        self._above_cache: dict[tuple[str, ...], set[str]] = {}

    # --- building (what Ansible's InventoryData offers its plugins) ---------------------------

    def add_group(self, name: str, origin: Origin) -> Group:
        if name not in self.groups:
            if len(self.groups) >= MAX_GROUPS:
                raise UserError(
                    origin.problem(
                        f"the inventory has more than {MAX_GROUPS:,} groups", "check that this is the right file"
                    )
                )
            self.groups[name] = Group(name, origin)
        return self.groups[name]

    def add_child(self, parent: str, child: str, origin: Origin) -> None:
        """Make `child` a subgroup of `parent`, refusing a loop (Ansible refuses it too)."""
        if child in self.groups[parent].children:
            return
        if child == parent or child in self.ancestors(parent):
            self.problems.append(
                origin.problem(
                    f"group {child!r} is made a child of {parent!r}, which is already inside it (a loop)",
                    f"remove {child!r} from the children of {parent!r}",
                )
            )
            return
        self.groups[parent].children.append(child)
        self.groups[child].parents.append(parent)

    def add_host(self, name: str, group: str | None, origin: Origin, port: int | None = None) -> Host:
        host = self.hosts.get(name)
        if host is None:
            if len(self.hosts) >= MAX_HOSTS:
                raise UserError(
                    origin.problem(
                        f"the inventory names more than {MAX_HOSTS:,} hosts",
                        "split the cluster into several inventories, or check that this is the right file",
                    )
                )
            host = self.hosts[name] = Host(name, origin)
        if group is not None and group not in host.groups:
            host.groups.append(group)
            self.groups[group].hosts.append(name)
        if port is not None:
            host.vars["ansible_port"] = Var(port, origin)
        return host

    def set_group_var(self, group: str, name: str, var: Var) -> None:
        if name == "ansible_group_priority":
            try:
                self.groups[group].priority = int(var.value)
            except (TypeError, ValueError):
                self.problems.append(
                    var.origin.problem(
                        f"ansible_group_priority {var.value!r} of group {group!r} is not a number",
                        "write a whole number",
                    )
                )
        self.groups[group].vars[name] = var

    def finish(self) -> None:
        """What Ansible's reconcile step does: groups with no parent go under `all`, hosts in no
        group other than `all` are `ungrouped`; then each group's depth is known."""
        for name, group in self.groups.items():
            if name != ALL and not group.parents:
                self.add_child(ALL, name, group.origin)
        ungrouped = self.groups[UNGROUPED]
        for host in self.hosts.values():
            grouped = any(g not in (ALL, UNGROUPED) for g in host.groups)
            if grouped and UNGROUPED in host.groups:  # listed before any section, then in a group
                host.groups.remove(UNGROUPED)
            elif not grouped and UNGROUPED not in host.groups:
                host.groups.append(UNGROUPED)
        ungrouped.hosts = [name for name, host in self.hosts.items() if UNGROUPED in host.groups]
        self._depth = self._depths()

    # --- reading ----------------------------------------------------------------------------

    def ancestors(self, name: str) -> set[str]:
        """Every group above `name` (iteratively: a hostile inventory may chain thousands)."""
        seen: set[str] = set()
        todo = list(self.groups[name].parents)
        while todo:
            parent = todo.pop()
            if parent not in seen:
                seen.add(parent)
                todo.extend(self.groups[parent].parents)
        return seen

    def _depths(self) -> dict[str, int]:
        """Longest path from `all`, as Ansible keeps a group's depth (children sort after parents)."""
        depth = {ALL: 0}
        pending = {name: len(group.parents) for name, group in self.groups.items()}
        ready = [ALL]
        while ready:
            name = ready.pop()
            for child in self.groups[name].children:
                depth[child] = max(depth.get(child, 0), depth[name] + 1)
                pending[child] -= 1
                if pending[child] == 0:
                    ready.append(child)
        return depth

    def _above(self, host: Host) -> set[str]:
        """The host's groups and every group above them (hosts share a few group lists: once each)."""
        key = tuple(host.groups)
        if key not in self._above_cache:
            self._above_cache[key] = set(host.groups).union(*(self.ancestors(g) for g in host.groups))
        return self._above_cache[key]

    def host_groups(self, host: Host) -> list[Group]:
        """The host's groups and their ancestors, `all` left out, in Ansible's order of precedence
        (lowest first): by depth, then ansible_group_priority, then name."""
        chosen = [self.groups[name] for name in self._above(host) - {ALL}]
        return sorted(chosen, key=lambda g: (self._depth.get(g.name, 0), g.priority, g.name))

    def _group_layers(self, host: Host) -> dict[str, Var]:
        """What a host's groups give it; thousands of hosts share a few group lists, worked out once each."""
        key = tuple(host.groups)
        if key not in self._merged:
            groups = self.host_groups(host)
            every = self.groups[ALL]
            merged: dict[str, Var] = {}
            for layer in [every.vars, *(g.vars for g in groups), every.dir_vars, *(g.dir_vars for g in groups)]:
                merged.update(layer)
            self._merged[key] = merged
        return self._merged[key]

    def members(self) -> dict[str, list[str]]:
        """Each group's hosts, its children's included, in host order. The flat lists are what an
        rdmaprov inventory holds, so their total is bounded like the hosts are."""
        members: dict[str, list[str]] = {name: [] for name in self.groups}
        total = 0
        for host in self.hosts.values():
            above = self._above(host)
            total += len(above)
            if total > MAX_MEMBERSHIPS:
                raise UserError(
                    host.origin.problem(
                        f"the groups, with their children's hosts listed in each, would hold more than "
                        f"{MAX_MEMBERSHIPS:,} hosts",
                        "check that this is the right file (real inventories hold far fewer)",
                    )
                )
            for group in above:
                members[group].append(host.name)
        return members

    def effective_vars(self, host: Host) -> dict[str, Var]:
        """The host's variables after Ansible's default precedence (VARIABLE_PRECEDENCE): the
        inventory file's `all` vars, then its other groups' vars, then group_vars/all, then
        group_vars/<group>, then the host's own vars and host_vars/<host>. A later layer replaces
        a whole variable (Ansible's default hash_behaviour=replace)."""
        merged = dict(self._group_layers(host))
        merged.update(host.vars)
        merged.update(host.dir_vars)
        return merged
