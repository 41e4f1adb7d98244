"""Load an inventory file: YAML → schema check → cross-field checks → typed Inventory.

Every problem found is reported at once; nothing is half-loaded.
"""

from __future__ import annotations

import gc
import os
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from rdmaprov.errors import Problem, UserError
from rdmaprov.inventory.config import NodeConfig, SshTrustConfig
from rdmaprov.inventory.docpath import DocPath, format_path
from rdmaprov.inventory.foreign import foreign_inventory
from rdmaprov.inventory.gates import GatesConfig
from rdmaprov.inventory.model import (
    HostSpec,
    Inventory,
    SSHSettings,
    deep_merge,
    fill_defaults,
    flatten,
    node_schema,
    resolve_path,
    ssh_settings,
)
from rdmaprov.inventory.semantics import ISSUE_KEYS, NodeIssue, gate_problems, node_issues, slurm_problems
from rdmaprov.inventory.settings import Section
from rdmaprov.inventory.slurm import SlurmConfig
from rdmaprov.inventory.source import SourceMap, parse_yaml, read_text
from rdmaprov.inventory.validate import schema_problems


def _host_definitions(data: Section) -> list[tuple[str, str | None, DocPath, object]]:
    """(host, group or None, document path, body) for every place a host is named."""
    places: list[tuple[str, str | None, DocPath, object]] = []
    for name, body in data.section("hosts").data.items():
        places.append((name, None, ("hosts", name), body))
    groups = data.section("groups")
    for group in groups.data:
        for name, body in groups.section(group).section("hosts").data.items():
            places.append((name, group, ("groups", group, "hosts", name), body))
    return places


@dataclass(frozen=True)
class _LocalFile:
    """A file on the control machine that the inventory names, and the setting that names it."""

    path: str
    where: DocPath
    what: str
    missing_fix: str
    private_key: bool = False


_SSH_FILE_FIX = "create it (for the lab: `rdmaprov lab up`) or point the setting at an existing file"
_ARCHIVE_FIX = "build the tarball (for the lab: `rdmaprov lab mpi`) or point mpi.archive.path at it"


def _check_file(file: _LocalFile, smap: SourceMap) -> tuple[Problem | None, str]:
    """(problem, severity): "missing" (fatal only when connecting), "fatal" (unusable) or "warning"."""
    path, where, what = file.path, file.where, file.what
    try:
        info = os.stat(path)
    except FileNotFoundError:
        return smap.problem(where, f"{what} {path} does not exist", file.missing_fix), "missing"
    except OSError as exc:
        return smap.problem(
            where,
            f"{what} {path} cannot be read: {exc.strerror}",
            "fix its permissions or point the setting at a readable file",
        ), "fatal"
    if stat.S_ISDIR(info.st_mode):
        return smap.problem(
            where, f"{what} {path} cannot be read: Is a directory", "point the setting at the file itself"
        ), "fatal"
    if not stat.S_ISREG(info.st_mode):
        # Opening a FIFO would block for ever; a device is no key either.
        return smap.problem(
            where, f"{what} {path} is not a regular file (a pipe or a device?)", "point the setting at the file itself"
        ), "fatal"
    try:
        with open(path, "rb") as handle:
            head = handle.read(4096)
    except OSError as exc:
        return smap.problem(
            where,
            f"{what} {path} cannot be read: {exc.strerror}",
            "fix its permissions or point the setting at a readable file",
        ), "fatal"
    if file.private_key and b"PRIVATE KEY" not in head:
        return smap.problem(
            where,
            f"{what} {path} is not a private key",
            "point it at the private half of the key pair (not the .pub file)",
        ), "fatal"
    if file.private_key and info.st_mode & 0o077:
        return smap.problem(
            where,
            f"{what} {path} can be read by other users (mode {stat.S_IMODE(info.st_mode):04o}); OpenSSH refuses such "
            "keys",
            f"chmod 600 {path}",
        ), "warning"
    return None, ""


def _local_files(
    ssh: SSHSettings,
    node: NodeConfig,
    base: Path,
    where: DocPath,
    groups: list[str],
    body: Section,
    data: Section,
) -> list[_LocalFile]:
    """The files on the control machine one host needs: its SSH key and known_hosts, and the
    site MPI's tarball where its MPI comes from one (a node of another source ignores it)."""
    files = [
        _LocalFile(path, _ssh_origin(key, where, groups, body, data), what, _SSH_FILE_FIX, key == "key")
        for key, what in (("key", "SSH key file"), ("known_hosts", "known_hosts file"))
        if (path := getattr(ssh, key)) is not None
    ]
    if node.mpi.source == "archive" and node.mpi.archive is not None:
        origin = _node_origin(("mpi", "archive", "path"), where, groups, body, data)
        files.append(_LocalFile(resolve_path(node.mpi.archive.path, base), origin, "MPI archive", _ARCHIVE_FIX))
    return files


def _group_conflicts(name: str, groups: list[str], data: Section, body: Section, smap: SourceMap) -> list[Problem]:
    """Two groups of one host setting the same key differently is ambiguous unless the host decides.

    Node settings (`vars`) and connection settings (`ssh`) alike: the last group must not win silently.
    """
    problems = []
    for section in ("vars", "ssh"):
        host_leaves = flatten(body.section(section).data)
        seen: dict[tuple[str, ...], tuple[str, object]] = {}
        for group in groups:
            settings = _group(data, group).section(section)
            for key, value in flatten(settings.data).items():
                if key in host_leaves:
                    continue
                if key in seen and seen[key][1] != value:
                    other, other_value = seen[key]
                    dotted = ".".join(key)
                    own, label = ("vars", dotted) if section == "vars" else ("ssh settings", f"ssh.{dotted}")
                    problems.append(
                        smap.problem(
                            ("groups", group, section) + key,
                            f"host {name!r} is in groups {other!r} and {group!r}, which set {label} differently "
                            f"({other_value!r} vs {value!r})",
                            f"set {dotted} in the host's own {own}, or make the groups agree",
                        )
                    )
                else:
                    seen.setdefault(key, (group, value))
    return problems


def in_file_order(problems: list[Problem]) -> list[Problem]:
    """Each problem once, in the order a reader of the file meets them. Problems at the same
    place keep the order they were found in (a set's order would change from run to run)."""
    unique = list(dict.fromkeys(problems))
    return sorted(unique, key=lambda p: (p.line or 0, p.column or 0))


def load_inventory(path: str | Path, require_files: bool = True) -> Inventory:
    """Load and fully validate one inventory; raises UserError listing every problem.

    With require_files=False (plain `validate`), files on this machine that do not exist yet (SSH
    key, known_hosts, the MPI archive) are warnings: the inventory may be written before the keys
    are made or the archive built. Unusable files are always errors.
    """
    path = Path(path)
    with _cycle_collection_paused():
        return _load(path, require_files)


@contextmanager
def _cycle_collection_paused() -> Iterator[None]:
    """Loading makes hundreds of thousands of dicts, lists and events for a large cluster (ten
    per host and more), none of them in a reference cycle; CPython's cycle collector would walk
    them again and again as they pile up (a tenth of validate's time at 10,000 hosts), to free
    nothing. Plain reference counting frees what loading drops."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _load(path: Path, require_files: bool) -> Inventory:
    data, smap = _document(path)
    problems: list[Problem] = []
    bodies, memberships = _host_bodies(data, smap, problems)
    builder = _HostBuilder(data, smap, path.resolve().parent, require_files, problems)
    hosts = {
        name: builder.build(name, groups, *bodies.get(name, ((), Section({})))) for name, groups in memberships.items()
    }
    problems += builder.misfit_problems()
    cluster = data.section("cluster")
    if not hosts:
        problems.append(
            smap.problem((), "the inventory declares no hosts", "add hosts under `hosts:` or under a group's `hosts:`")
        )
    slurm_on = cluster.section("slurm").get("enabled") is True
    problems.extend(gate_problems(cluster.section("gates").data, set(hosts), smap, slurm_on))
    problems.extend(slurm_problems(cluster.section("slurm").data, list(hosts), smap))
    if problems:
        raise UserError(in_file_order(problems))

    _, root = node_schema()
    schema = Section.of(root).section("properties").section("cluster").data
    filled = Section.of(fill_defaults(cluster.data, schema, root), cluster.where)
    members: dict[str, list[str]] = {g: [] for g in data.section("groups").data}
    for name, in_groups in memberships.items():
        for group in in_groups:
            members[group].append(name)
    return Inventory(
        path=path,
        name=cluster.text("name"),
        hosts=hosts,
        groups={g: tuple(names) for g, names in members.items()},
        gates=GatesConfig.from_settings(filled.section("gates").data, slurm=filled.section("slurm").flag("enabled")),
        ssh_trust=SshTrustConfig.from_settings(filled.section("ssh_trust").data),
        parallel=cluster.optional_integer("parallel"),
        slurm=SlurmConfig.from_settings(filled.section("slurm").data, cluster.text("name"), list(hosts)),
        raw=data.data,
        warnings=in_file_order(builder.warnings),
    )


def _document(path: Path) -> tuple[Section, SourceMap]:
    """The file as YAML that passed the schema, with its source map; a file that is not an
    inventory (another tool's, or not a mapping) is refused saying what it looks like."""
    text = read_text(path)
    try:
        data, smap, problems = parse_yaml(text, str(path))
    except UserError:
        # Not YAML: an Ansible INI inventory (DeepOps') is the likely file; say so, not the YAML error.
        foreign = foreign_inventory(path, text, None)
        if foreign is None:
            raise
        raise UserError(foreign) from None
    if not isinstance(data, dict):
        foreign = foreign_inventory(path, text, data)
        raise UserError(
            foreign
            or problems
            or Problem(
                str(path),
                "an inventory must be a YAML mapping with at least `cluster:`",
                1,
                1,
                fix="see inventories/lab.yaml for the layout",
            )
        )
    problems += schema_problems(data, smap)
    if problems:
        raise UserError(foreign_inventory(path, text, data) or in_file_order(problems))
    return Section.of(data), smap


def _host_bodies(
    data: Section, smap: SourceMap, problems: list[Problem]
) -> tuple[dict[str, tuple[DocPath, Section]], dict[str, list[str]]]:
    """Each host's one body (where it is defined, what it sets) and its groups, hosts in the order
    in which the file first names them, wherever that is; a second body is a problem."""
    bodies: dict[str, tuple[DocPath, Section]] = {}
    memberships: dict[str, list[str]] = {}
    for name, group, where, body in sorted(
        _host_definitions(data), key=lambda place: smap.locate(place[2], prefer_key=True)
    ):
        memberships.setdefault(name, [])
        if group is not None:
            memberships[name].append(group)
        if body is None:
            continue
        if name in bodies:
            first = smap.locate(bodies[name][0])[0]
            problems.append(
                smap.problem(
                    where,
                    f"host {name!r} is defined twice (first at line {first}, {format_path(bodies[name][0])})",
                    f"define it once; list it in other groups with no body, as `{name}:`",
                    prefer_key=True,
                )
            )
            continue
        bodies[name] = (where, Section.of(body, where))
    return bodies, memberships


class _HostBuilder:
    """Makes each host's HostSpec, collecting problems and warnings. Thousands of hosts share a
    few group combinations: what depends only on the groups (the merged node settings, SSH
    settings, the checks of key files, the settings that do not fit) is worked out once for each."""

    def __init__(
        self, data: Section, smap: SourceMap, base: Path, require_files: bool, problems: list[Problem]
    ) -> None:
        self.data, self.smap, self.base, self.require_files = data, smap, base, require_files
        self.problems = problems
        self.warnings: list[Problem] = []
        self.schema, self.root = node_schema()
        self.addresses: dict[str, str] = {}
        self.misfits: dict[tuple[DocPath, str, str], list[str]] = {}
        self.bases: dict[tuple[str, ...], dict[str, object]] = {}
        self.ssh_cache: dict[tuple[str, ...], SSHSettings] = {}
        self.file_checks: dict[_LocalFile, tuple[Problem | None, str]] = {}
        self.configs: dict[tuple[str, ...], NodeConfig] = {}
        self.issues_of: dict[tuple[str, ...], list[NodeIssue]] = {}

    def build(self, name: str, groups: list[str], where: DocPath, body: Section) -> HostSpec:
        data, smap = self.data, self.smap
        host_vars = body.section("vars").data
        if len(groups) > 1:
            self.problems.extend(_group_conflicts(name, groups, data, body, smap))
        key = tuple(groups)
        if key not in self.bases:
            merged = dict(data.section("defaults").data)
            for group in groups:
                merged = deep_merge(merged, _group(data, group).section("vars").data)
            self.bases[key] = fill_defaults(merged, self.schema, self.root)
            self.configs[key] = NodeConfig.from_settings(self.bases[key])
        node, config = self.bases[key], self.configs[key]
        if host_vars:
            node = fill_defaults(deep_merge(node, host_vars), self.schema, self.root, only=host_vars)
            config = config.with_settings(node, host_vars)
        ssh = self._ssh(key, groups, body)
        self._check_files(ssh, config, where, groups, body)
        address = body.optional_text("address") or name
        endpoint = f"{address}:{ssh.port}"
        if endpoint in self.addresses:
            self.problems.append(
                smap.problem(
                    where + ("address",),
                    f"host {name!r} has the same address and port as {self.addresses[endpoint]!r} ({endpoint})",
                    "give each host its own address (a host listed twice is a duplicated host)",
                )
            )
        self.addresses[endpoint] = name
        # Settings that do not fit together are judged once per group combination, and again
        # for a host only where its own vars reach the settings judged.
        if ISSUE_KEYS.isdisjoint(host_vars):
            if key not in self.issues_of:
                self.issues_of[key] = node_issues(self.configs[key])
            issues = self.issues_of[key]
        else:
            issues = node_issues(config)
        for issue in issues:
            origin = _node_origin(issue.key, where, groups, body, data)
            self.misfits.setdefault((origin, issue.message, issue.fix), []).append(name)
        return HostSpec(name=name, address=address, ssh=ssh, groups=key, node=config)

    def _ssh(self, key: tuple[str, ...], groups: list[str], body: Section) -> SSHSettings:
        """The host's SSH settings: cluster, then its groups', then its own."""
        own_ssh = body.section("ssh").data
        ssh = None if own_ssh else self.ssh_cache.get(key)
        if ssh is None:
            groups_ssh = [_group(self.data, g).section("ssh").data for g in groups]
            cluster_ssh = self.data.section("cluster").section("ssh").data
            ssh = ssh_settings([cluster_ssh, *groups_ssh, own_ssh], self.base)
            if not own_ssh:
                self.ssh_cache[key] = ssh
        return ssh

    def _check_files(
        self, ssh: SSHSettings, node: NodeConfig, where: DocPath, groups: list[str], body: Section
    ) -> None:
        """Files on this machine the host needs (SSH key, known_hosts, the MPI archive): a missing
        one is a warning only when require_files is off; an unusable one is always an error."""
        for local in _local_files(ssh, node, self.base, where, groups, body, self.data):
            if local not in self.file_checks:
                self.file_checks[local] = _check_file(local, self.smap)
            problem, severity = self.file_checks[local]
            if problem:
                fatal = severity == "fatal" or (severity == "missing" and self.require_files)
                (self.problems if fatal else self.warnings).append(problem)

    def misfit_problems(self) -> list[Problem]:
        """Settings that do not fit together, once per place they are written, naming the hosts."""
        return [
            self.smap.problem(origin, f"{message} (host{'s' if len(names) > 1 else ''} {', '.join(names)})", fix)
            for (origin, message, fix), names in self.misfits.items()
        ]


def _group(data: Section, group: str) -> Section:
    """A group's body (a group may be written with none)."""
    return data.section("groups").section(group)


def _ssh_origin(field_name: str, host_where: DocPath, groups: list[str], body: Section, data: Section) -> DocPath:
    """Document path of the layer that set an SSH field last (to point errors at the right line)."""
    if field_name in body.section("ssh"):
        return host_where + ("ssh", field_name)
    for group in reversed(groups):
        if field_name in _group(data, group).section("ssh"):
            return ("groups", group, "ssh", field_name)
    return ("cluster", "ssh", field_name)


def _has(mapping: object, key: DocPath) -> bool:
    for part in key:
        if isinstance(mapping, dict) and part in mapping:
            mapping = mapping[part]
        elif isinstance(mapping, list) and isinstance(part, int) and part < len(mapping):
            mapping = mapping[part]
        else:
            return False
    return True


def _node_origin(key: DocPath, host_where: DocPath, groups: list[str], body: Section, data: Section) -> DocPath:
    """Document path of the layer (host vars > group vars > defaults) that set a node key last."""
    layers = [(host_where + ("vars",), body.section("vars").data)]
    layers += [(("groups", g, "vars"), _group(data, g).section("vars").data) for g in reversed(groups)]
    layers.append((("defaults",), data.section("defaults").data))
    for depth in range(len(key), 0, -1):
        for where, layer in layers:
            if _has(layer, key[:depth]):
                return where + tuple(key[:depth])
    return ("defaults",)
