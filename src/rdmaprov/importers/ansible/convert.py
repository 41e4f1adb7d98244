"""From what Ansible would use to what an rdmaprov inventory says.

Connection settings are exact or refused: each host's address, login user, port and key are the
ones Ansible would use for it (its variables after Ansible's precedence, the `ansible_ssh_*`
spelling winning over `ansible_*` as in ansible-core's ssh plugin), and each is written where it
holds: for the whole cluster when every host shares it, for a group when every member does, else
for the host. A value that rdmaprov cannot use (a Jinja template, an encrypted value, an address
that is not one) is an error naming its file and line: a guessed connection setting would reach
the wrong machine; so is a jump host or proxy command in the ssh arguments, which rdmaprov has no
setting for. Every other variable is kept as a comment beside the group or host that set it.
"""

from __future__ import annotations

import os
import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypedDict

from rdmaprov.errors import Problem, UserError
from rdmaprov.importers.ansible.model import (
    ALL,
    UNGROUPED,
    AnsibleInventory,
    Group,
    Host,
    Origin,
    Var,
    is_encrypted,
)
from rdmaprov.schemas import load_schema

# rdmaprov key → the Ansible variables that set it, the one Ansible prefers last (its ssh plugin's order).
CONNECTION: dict[str, tuple[str, ...]] = {
    "address": ("ansible_host", "ansible_ssh_host"),
    "user": ("ansible_user", "ansible_ssh_user"),
    "port": ("ansible_port", "ansible_ssh_port"),
    "key": ("ansible_private_key_file", "ansible_ssh_private_key_file"),
}
SSH_FIELDS = ("user", "port", "key")
CONNECTION_VARS = frozenset(name for names in CONNECTION.values() for name in names)
_DEFAULTS = {"user": "root", "port": 22, "key": None}
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")
# The variables that give ssh its arguments (ansible-core's ssh plugin: ssh_args, ssh_common_args, ssh_extra_args).
SSH_ARGS = ("ansible_ssh_args", "ansible_ssh_common_args", "ansible_ssh_extra_args")
_SSH_OPTION = re.compile(r"\s*([A-Za-z]+)\s*(?:=|\s)\s*(.*)", re.S)
_PROXY_OPTIONS = {"proxycommand": "ProxyCommand", "proxyjump": "ProxyJump"}
_HOST_KEY_OFF = re.compile(r"StrictHostKeyChecking\s*=?\s*no|UserKnownHostsFile\s*=?\s*/dev/null", re.I)


def _patterns() -> dict[str, re.Pattern[str]]:
    schema = load_schema("inventory")
    return {
        "name": re.compile(schema["properties"]["hosts"]["propertyNames"]["pattern"]),
        "address": re.compile(schema["$defs"]["address"]["pattern"]),
        "user": re.compile(schema["$defs"]["user"]["pattern"]),
    }


@dataclass(frozen=True)
class Setting:
    """One rdmaprov setting and the Ansible variable it came from."""

    key: str
    value: Any
    var: str
    origin: Origin


@dataclass
class Entry:
    """The cluster, a group or a host of the rdmaprov inventory being made."""

    name: str
    origin: Origin
    address: Setting | None = None
    ssh: dict[str, Setting] = field(default_factory=dict)
    # Ansible variables kept as comments: (the group they came from when not this entry's own, name, variable)
    leftovers: list[tuple[str, str, Var]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    members: list[str] = field(default_factory=list)
    children: list[str] = field(default_factory=list)


class Connection(TypedDict):
    """How Ansible would reach a host: what the rendered inventory must say for it (importer.py
    loads it and compares)."""

    address: str
    user: str
    port: int
    key: str | None


@dataclass
class Converted:
    """What the rendered inventory holds, and what each host's connection must come out as."""

    name: str
    known_hosts: str
    cluster: Entry
    hosts: list[Entry]
    groups: list[Entry]
    notes: list[str]
    expected: dict[str, Connection]
    source: AnsibleInventory


def _used(found: tuple[Any, str, Var] | None, field_name: str) -> Any:
    """The value Ansible connects with: the one `found` (value, variable, where), else its default."""
    return found[0] if found else _DEFAULTS[field_name]


def _pick(variables: dict[str, Var], names: tuple[str, ...]) -> tuple[str, Var] | None:
    """The variable Ansible uses among `names`: the last one set to something other than null."""
    found = None
    for name in names:
        var = variables.get(name)
        if var is not None and var.value is not None:
            found = (name, var)
    return found


class _Refused(Exception):
    """A connection value rdmaprov cannot use, with the problem that says why."""

    def __init__(self, problem: Problem) -> None:
        super().__init__(problem.message)
        self.problem = problem


class _Converter:
    def __init__(self, inventory: AnsibleInventory, cwd: Path) -> None:
        self.inv = inventory
        self.cwd = cwd
        self.patterns = _patterns()
        self.problems: list[Problem] = []

    def refuse(self, origin: Origin, where: str, message: str, fix: str) -> None:
        self.problems.append(origin.problem(message, fix, where))

    def value(self, field_name: str, var_name: str, var: Var, where: str) -> Any:
        """The rdmaprov value of one connection variable; raises _Refused when it cannot be one."""
        value = var.value

        def refused(message: str, fix: str) -> _Refused:
            return _Refused(var.origin.problem(message, fix, where))

        if is_encrypted(value):
            raise refused(
                f"{var_name} is encrypted with ansible-vault, which rdmaprov cannot decrypt",
                f"write {var_name} in clear text (it is not a secret) and import again",
            )
        shown = f"{var_name} {value!r}"
        if isinstance(value, str) and ("{{" in value or "{%" in value):
            raise refused(
                f"{shown} is a Jinja template, which rdmaprov does not evaluate",
                f"write the value itself for {var_name} (in a copy of the inventory) and import again",
            )
        if field_name == "port":
            if isinstance(value, str) and value.isascii() and value.isdigit():
                value = int(value)
            if isinstance(value, int) and not isinstance(value, bool) and 1 <= value <= 65535:
                return value
            raise refused(f"{shown} is not a port number (1-65535)", "write the port as a number")
        if isinstance(value, (bool, dict, list)):
            raise refused(f"{shown} is not a single value", f"write one value for {var_name}")
        text = str(value)
        if _CONTROL.search(text):
            raise refused(f"{shown} contains a control character", "write it on one line")
        if field_name == "key":
            return self._key_path(text)
        if not self.patterns[field_name].fullmatch(text):
            what = {"address": "an IPv4 or IPv6 address or a DNS name", "user": "a Unix user name"}[field_name]
            raise refused(f"{shown} is not {what}", f"fix {var_name}")
        return text

    def _key_path(self, text: str) -> str:
        """ssh reads a relative key path from the directory Ansible runs in: so does this import."""
        if text.startswith("~") or os.path.isabs(text):
            return text
        return os.path.normpath(self.cwd / text)

    def host_values(self, host: Host, variables: dict[str, Var]) -> dict[str, tuple[Any, str, Var] | None]:
        values: dict[str, tuple[Any, str, Var] | None] = {}
        for field_name, names in CONNECTION.items():
            picked = _pick(variables, names)
            if picked is None:
                values[field_name] = None
                continue
            var_name, var = picked
            try:
                values[field_name] = (self.value(field_name, var_name, var, host.name), var_name, var)
            except _Refused as exc:
                self.problems.append(exc.problem)
                values[field_name] = None
        return values

    def check_names(self) -> None:
        for host in self.inv.hosts.values():
            if not self.patterns["name"].fullmatch(host.name):
                self.refuse(
                    host.origin,
                    "",
                    f"host name {host.name!r} is not one rdmaprov accepts (letters, digits, '_', '.', '-', "
                    "starting with a letter or digit)",
                    "rename the host in the Ansible inventory and give its address as ansible_host",
                )
        for group in self.inv.groups.values():
            if group.name not in (ALL, UNGROUPED) and not self.patterns["name"].fullmatch(group.name):
                self.refuse(
                    group.origin,
                    "",
                    f"group name {group.name!r} is not one rdmaprov accepts (letters, digits, '_', '.', '-', "
                    "starting with a letter or digit)",
                    "rename the group in the Ansible inventory",
                )


def _endpoint_problems(entries: dict[str, Entry], expected: dict[str, Connection]) -> list[Problem]:
    seen: dict[str, str] = {}
    problems = []
    for name, want in expected.items():
        endpoint = f"{want['address']}:{want['port']}"
        if endpoint in seen:
            entry = entries[name]
            origin = entry.address.origin if entry.address else entry.origin
            problems.append(
                origin.problem(
                    f"hosts {seen[endpoint]!r} and {name!r} are both reached at {endpoint}; rdmaprov refuses "
                    "two hosts on one address and port",
                    "give each host its own ansible_host (or port), or keep one of them",
                    name,
                )
            )
        seen.setdefault(endpoint, name)
    return problems


def _jump_option(args: str) -> tuple[str, str] | None:
    """(option, value) where ssh arguments send the connection through another machine (-J,
    ProxyJump, ProxyCommand); None where they connect directly (no such option, or `none`).
    Words as Ansible's ssh plugin splits them (shell-like); -o takes `Key=Value` or `Key Value`."""
    try:
        words = shlex.split(args)
    except ValueError:  # an unbalanced quote: still look at the words
        words = args.split()
    for index, word in enumerate(words):
        following = words[index + 1] if index + 1 < len(words) else ""
        if word.startswith("-J"):
            return "-J", word[2:] or following
        option = _SSH_OPTION.match(word[2:] or following) if word.startswith("-o") else None
        if option and option.group(1).lower() in _PROXY_OPTIONS and option.group(2).strip().lower() != "none":
            return _PROXY_OPTIONS[option.group(1).lower()], option.group(2).strip()
    return None


def _jump_problems(inventory: AnsibleInventory, effective: dict[str, dict[str, Var]]) -> list[Problem]:
    """Hosts Ansible reaches through a jump host or a proxy command, one problem per variable
    that says so. rdmaprov connects to every host directly and has no setting for either: an
    inventory imported without it would validate, then fail to connect, or reach whatever
    answers at the nodes' (private) addresses from here."""
    jumps: dict[int, tuple[str, str] | None] = {}  # hosts share a few variables: each read once
    found: dict[int, tuple[str, Var, tuple[str, str], list[str]]] = {}
    for host, variables in effective.items():
        for var_name in SSH_ARGS:
            var = variables.get(var_name)
            if var is None or not isinstance(var.value, str):
                continue
            if id(var) not in jumps:
                jumps[id(var)] = _jump_option(var.value)
            jump = jumps[id(var)]
            if jump is not None:
                found.setdefault(id(var), (var_name, var, jump, []))[3].append(host)
    if not found:
        return []
    holders: list[Group | Host] = [*inventory.groups.values(), *inventory.hosts.values()]
    owner = {id(var): h.name for h in holders for var in _own_vars(h.vars, h.dir_vars).values()}
    problems = []
    for var_name, var, (option, value), hosts in found.values():
        how = "a jump host" if option in ("-J", "ProxyJump") else "a proxy command"
        problems.append(
            var.origin.problem(
                f"{var_name} reaches the hosts through {how} ({option} {value}), which rdmaprov does not "
                f"support: it would connect to {_some(hosts)} directly",
                "run rdmaprov on a machine that reaches the nodes directly (the jump host, for one) and import a "
                f"copy of the Ansible inventory without {option}",
                owner.get(id(var), ""),
            )
        )
    return problems


def _host_key_notes(inventory: AnsibleInventory, effective: dict[str, dict[str, Var]]) -> list[str]:
    """Where the Ansible inventory turned host key checking off: rdmaprov never does."""
    off = set()
    for name, variables in effective.items():
        for var_name in ("ansible_host_key_checking", "ansible_ssh_host_key_checking"):
            var = variables.get(var_name)
            if var is not None and str(var.value).lower() in ("false", "no", "0", "off"):
                off.add(name)
        for var_name in SSH_ARGS:
            var = variables.get(var_name)
            if var is not None and isinstance(var.value, str) and _HOST_KEY_OFF.search(var.value):
                off.add(name)
    if not off:
        return []
    hosts = [h for h in inventory.hosts if h in off]
    return [
        f"The Ansible inventory turns SSH host key checking off for {_some(hosts)}; rdmaprov never does: "
        "those hosts' keys must be in the known_hosts file below before the first run."
    ]


def _some(names: list[str], limit: int = 5) -> str:
    shown = ", ".join(names[:limit])
    more = len(names) - limit
    return shown + (f" and {more} more" if more > 0 else "")


def _own_vars(variables: dict[str, Var], dir_vars: dict[str, Var]) -> dict[str, Var]:
    merged = dict(variables)
    merged.update(dir_vars)
    return merged


def convert(inventory: AnsibleInventory, name: str, known_hosts: str, cwd: Path) -> Converted:
    """The rdmaprov inventory for an Ansible inventory; raises UserError listing every value it cannot use."""
    conv = _Converter(inventory, cwd)
    conv.check_names()
    effective = {host.name: inventory.effective_vars(host) for host in inventory.hosts.values()}
    values = {host.name: conv.host_values(host, effective[host.name]) for host in inventory.hosts.values()}
    conv.problems += _jump_problems(inventory, effective)
    if conv.problems:
        raise UserError(conv.problems)

    cluster = Entry(name, Origin(str(inventory.path)))
    hosts = {h.name: Entry(h.name, h.origin) for h in inventory.hosts.values()}
    members = inventory.members()
    groups = {
        g.name: Entry(g.name, g.origin, members=members[g.name], children=list(g.children))
        for g in inventory.groups.values()
        if g.name not in (ALL, UNGROUPED)
    }
    expected: dict[str, Connection] = {}
    for host_name, found in values.items():
        address = found["address"]
        if address is not None:
            hosts[host_name].address = Setting("address", address[0], address[1], address[2].origin)
        expected[host_name] = {
            "address": address[0] if address else host_name,
            "user": _used(found["user"], "user"),
            "port": _used(found["port"], "port"),
            "key": _used(found["key"], "key"),
        }

    for field_name in SSH_FIELDS:
        _place(field_name, inventory, conv, values, cluster, groups, hosts)

    problems = _endpoint_problems(hosts, expected)
    if problems:
        raise UserError(problems)

    for group in inventory.groups.values():
        target = cluster if group.name in (ALL, UNGROUPED) else groups[group.name]
        label = group.name if group.name in (ALL, UNGROUPED) else ""
        target.notes += group.notes
        for var_name, var in _own_vars(group.vars, group.dir_vars).items():
            if var_name not in CONNECTION_VARS:
                target.leftovers.append((label, var_name, var))
    for host in inventory.hosts.values():
        hosts[host.name].notes += host.notes
        for var_name, var in _own_vars(host.vars, host.dir_vars).items():
            if var_name not in CONNECTION_VARS:
                hosts[host.name].leftovers.append(("", var_name, var))

    notes = _host_key_notes(inventory, effective)
    rooted = [h for h, found in values.items() if found["user"] is None]
    if rooted:
        notes.append(
            f"ansible_user is not set for {_some(rooted)}: Ansible lets ssh choose the login (your own user name, "
            "or ~/.ssh/config's User); rdmaprov logs in as root unless ssh.user says otherwise."
        )
    kinds = {str(v.value) for variables in effective.values() if (v := variables.get("ansible_connection"))}
    others = sorted(kinds - {"ssh", "smart", "paramiko", "paramiko_ssh", "None"})
    if others:
        notes.append(f"ansible_connection {', '.join(others)} is used: rdmaprov reaches every host over SSH.")
    return Converted(
        name, known_hosts, cluster, list(hosts.values()), list(groups.values()), notes, expected, inventory
    )


def _place(
    field_name: str,
    inventory: AnsibleInventory,
    conv: _Converter,
    values: dict[str, dict[str, tuple[Any, str, Var] | None]],
    cluster: Entry,
    groups: dict[str, Entry],
    hosts: dict[str, Entry],
) -> None:
    """Write one SSH setting where the Ansible inventory set it: `all`'s value for the cluster, a
    group's for the group (where members use it), and on a host whatever it would not inherit so.

    rdmaprov reads host > group > cluster, and refuses a host whose groups disagree unless the host
    sets the key itself: every host whose inherited value is not Ansible's (or is ambiguous) gets it
    set on itself, so the loader's answer is Ansible's by construction (and checked after rendering)."""
    per_host = {h: found[field_name] for h, found in values.items()}
    wanted = {h: _used(v, field_name) for h, v in per_host.items()}

    def candidate(group_name: str, members: list[str]) -> Setting | None:
        """The group's own value, if usable, used by a member, and (for a key, which rdmaprov cannot
        unset below) not over a member that has none."""
        group = inventory.groups[group_name]
        picked = _pick(_own_vars(group.vars, group.dir_vars), CONNECTION[field_name])
        if picked is None or not members:
            return None
        var_name, var = picked
        try:
            value = conv.value(field_name, var_name, var, group_name)
        except _Refused:
            return None  # no member uses it as it is (each member's own value was checked)
        if value not in (wanted[h] for h in members):
            return None
        if field_name == "key" and any(per_host[h] is None for h in members):
            return None
        return Setting(field_name, value, var_name, var.origin)

    everyone = list(inventory.hosts)
    top = candidate(ALL, everyone)
    if top is None and len(set(wanted.values())) == 1 and all(per_host.values()):
        first = next(v for v in per_host.values() if v is not None)
        top = Setting(field_name, first[0], first[1], first[2].origin)
    if top is not None:
        cluster.ssh[field_name] = top
    given: dict[str, set[Any]] = {h: set() for h in everyone}  # what the groups give each host
    for group_name, entry in groups.items():
        setting = candidate(group_name, entry.members)
        if setting is not None:
            entry.ssh[field_name] = setting
            for member in entry.members:
                given[member].add(setting.value)
    for host_name, found in per_host.items():
        inherited = given[host_name] or {top.value if top else _DEFAULTS[field_name]}
        if inherited == {wanted[host_name]}:
            continue
        if found is None:  # not set in Ansible: rdmaprov's default, said explicitly (keys never get here)
            entry = hosts[host_name]
            hosts[host_name].ssh[field_name] = Setting(
                field_name, wanted[host_name], "not set: the default", entry.origin
            )
        else:
            hosts[host_name].ssh[field_name] = Setting(field_name, found[0], found[1], found[2].origin)
