"""Checks the schema cannot express: settings that are each well-formed but do not fit together.

Each check looks at one host's merged node settings and returns the key that is wrong, what is
wrong and the fix; the loader points the problem at the line that set the key and names the hosts.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from rdmaprov.errors import Problem
from rdmaprov.inventory.config import NodeConfig
from rdmaprov.inventory.docpath import DocPath, format_path
from rdmaprov.inventory.gates import launched_via
from rdmaprov.inventory.model import fill_defaults
from rdmaprov.inventory.settings import Section
from rdmaprov.inventory.slurm import MARGIN_S
from rdmaprov.inventory.source import SourceMap
from rdmaprov.nvidia import ARCHS, arch_problem, driver_problem, module_flavor, parse_version
from rdmaprov.parsers.figure import pattern_problem
from rdmaprov.parsers.units import parse_size
from rdmaprov.schemas import load_schema

# AIACC NCCL plugin version → the NCCL versions it supports (first, last minor of NCCL 2).
AIACC_NCCL = {"1.0.2": ((2, 8), (2, 16))}


@dataclass(frozen=True)
class NodeIssue:
    key: DocPath
    message: str
    fix: str


def _gpu_issues(node: NodeConfig) -> list[NodeIssue]:
    gpu = node.gpu
    if gpu is None:
        return []
    issues = []
    if gpu.arch:
        why = arch_problem(gpu.arch, gpu.cuda_version)
        if why:
            issues.append(
                NodeIssue(
                    ("gpu", "arch"),
                    why,
                    "set gpu.arch to the GPUs' compute capability "
                    "(A100 sm_80, H100 sm_90), or a CUDA version that builds for it",
                )
            )
    if gpu.arch and gpu.arch in ARCHS:
        try:
            module_flavor(gpu.kernel_modules, [gpu.arch], gpu.driver_version or "0")
        except ValueError as error:
            issues.append(
                NodeIssue(("gpu", "kernel_modules"), str(error), "or correct gpu.arch if it is not the GPUs' own")
            )
    if gpu.driver_version and gpu.cuda_version:
        why = driver_problem(gpu.driver_version, gpu.cuda_version)
        if why:
            issues.append(
                NodeIssue(("gpu", "driver_version"), why, "raise gpu.driver_version or lower gpu.cuda_version")
            )
    return issues


def _nccl_issues(node: NodeConfig) -> list[NodeIssue]:
    nccl = node.nccl
    kind = nccl.source_kind
    issues = []
    needs = {
        "file": ("path", "give the local NCCL source tarball as nccl.source.path"),
        "tarball": ("url", "give the tarball's URL (e.g. an internal mirror) as nccl.source.url"),
    }
    if kind in needs and not nccl.source.get(needs[kind][0]):
        key, fix = needs[kind]
        issues.append(NodeIssue(("nccl", "source", "kind"), f"NCCL source kind `{kind}` needs nccl.source.{key}", fix))
    if node.gpu is not None and kind != "packages" and not nccl.version:
        issues.append(
            NodeIssue(
                ("nccl",), "NCCL is built on GPU nodes but nccl.version is not set", "set nccl.version, e.g. 2.18.3-1"
            )
        )
    if node.gpu is not None and nccl.version and not node.gpu.cuda_version:
        issues.append(
            NodeIssue(
                ("gpu", "cuda_version"),
                f"NCCL {nccl.version} is built (or installed from packages) "
                "for a CUDA version, but gpu.cuda_version is not set",
                "set gpu.cuda_version, e.g. 12.2",
            )
        )
    return issues


def _aiacc_issues(node: NodeConfig) -> list[NodeIssue]:
    erdma, version = node.erdma, node.nccl.version
    if node.fabric != "erdma" or not erdma.aiacc_plugin or not version:
        return []
    supported = AIACC_NCCL.get(erdma.aiacc_version)
    if supported is None:
        return [
            NodeIssue(
                ("erdma", "aiacc_version"),
                f"AIACC NCCL plugin {erdma.aiacc_version} is not one rdmaprov knows (known: {', '.join(AIACC_NCCL)})",
                "use a known aiacc_version",
            )
        ]
    low, high = supported
    nccl = parse_version(version)[:2]
    if low <= nccl <= high:
        return []
    return [
        NodeIssue(
            ("nccl", "version"),
            f"NCCL {version} is outside what the AIACC NCCL plugin {erdma.aiacc_version} "
            f"supports ({low[0]}.{low[1]}–{high[0]}.{high[1]})",
            f"use NCCL {low[0]}.{low[1]}.x to {high[0]}.{high[1]}.x on eRDMA nodes (e.g. 2.16.5-1), "
            "or remove erdma.aiacc_plugin",
        )
    ]


def _build_issues(node: NodeConfig) -> list[NodeIssue]:
    issues = []
    seen: set[str] = set()
    for index, build in enumerate(node.builds):
        source = build.get("source") or {}
        kind = source.get("kind", "file")
        need = {"git": "url", "url": "url", "file": "path"}[kind]
        if not source.get(need):
            issues.append(
                NodeIssue(
                    ("builds", index, "source"),
                    f"build {build['name']!r}: source kind {kind} needs `{need}`",
                    f"add `{need}:` to the build's source",
                )
            )
        if build["name"] in seen:
            issues.append(
                NodeIssue(
                    ("builds", index, "name"),
                    f"build {build['name']!r} is declared twice",
                    "give each build its own name",
                )
            )
        seen.add(build["name"])
    return issues


def _derived_issues(node: NodeConfig) -> list[NodeIssue]:
    """What the deploys derive from the settings alone, derived here first: a setting they would
    refuse after connecting (a ValueError at plan time) is found by `validate` instead. The
    same code serves both, so validate and apply can never disagree.
    """
    checks = [
        (("nccl", "env", "NCCL_IB_HCA"), node.nccl_environment, "list the compute HCAs in rdma.devices"),
        (("mtu",), node.wanted_mtus, "make mtu and erdma.jumbo_frames agree"),
        (("mpi",), lambda: node.mpi.install_prefix, "set what it names, or make mpi.source say which MPI"),
    ]
    issues = []
    for key, derive, fix in checks:
        try:
            derive()
        except ValueError as exc:
            issues.append(NodeIssue(key, str(exc), fix))
    if node.fabric == "softroce" and not node.rdma.netdevs:
        issues.append(
            NodeIssue(
                ("rdma", "netdevs"),
                "fabric softroce needs rdma.netdevs (the Ethernet devices to put rxe links on)",
                "list the netdevs, e.g. rdma: {netdevs: [eth0]}",
            )
        )
    return issues


def _qos_issues(node: NodeConfig) -> list[NodeIssue]:
    """A chain that breaks itself (CNPs in the RoCE class), and NCCL variables set by hand that
    say another class than roce_qos."""
    fix = "give CNPs a priority and DSCP of their own"
    qos = node.roce_qos
    issues = [NodeIssue(("roce_qos", "cnp"), why, fix) for why in qos.conflicts()] if qos.enabled else []
    issues += [
        NodeIssue(("nccl", "env", name), why, f"drop {name} from nccl.env: roce_qos sets it")
        for name, why in node.qos_mismatches().items()
    ]
    return issues


def _container_issues(node: NodeConfig) -> list[NodeIssue]:
    """A shared-memory size that would never be used: with ipc host, /dev/shm is the node's."""
    if node.containers.shm_size is None or node.containers.ipc != "host":
        return []
    why = "containers.shm_size sizes a container's own /dev/shm, but with ipc: host containers use the node's"
    return [NodeIssue(("containers", "shm_size"), why, "set containers.ipc: private, or drop shm_size")]


# The top-level node keys the checks below read: a host whose own vars touch none of them has
# the issues of its groups' settings (the loader reuses them instead of checking 10,000 times).
ISSUE_KEYS = frozenset({"fabric", "gpu", "nccl", "erdma", "builds", "rdma", "mtu", "mpi", "roce_qos", "containers"})


def node_issues(node: NodeConfig) -> list[NodeIssue]:
    """Everything that does not fit together in one host's merged settings."""
    return (
        _gpu_issues(node)
        + _nccl_issues(node)
        + _aiacc_issues(node)
        + _build_issues(node)
        + _derived_issues(node)
        + _qos_issues(node)
        + _container_issues(node)
    )


@dataclass(frozen=True)
class _Ordered:
    """Two settings of one gate where `low` must be below `high` (or at most `high`, unless
    `strict`); `why` says what an inverted pair would do. With `only_if_written`, the pair is
    checked only where the inventory writes that key (a default that does not fit is no mistake of
    the user's: a `fraction` raised above the default warn_fraction just has no warning band)."""

    gate: str
    low: str
    high: str
    strict: bool
    why: str
    fix: str
    measure: Callable[[Any], float] = float
    only_if_written: str = ""


_SWEEP = ("", "make min_bytes the smallest message size of the sweep and max_bytes the largest")
# A result at or above fraction passes, with a warning below warn_fraction: a warn_fraction under
# fraction asks for a warning that can never come (equal ones mean no warning band).
_WARN = (
    "a result passes from fraction up and warns only below warn_fraction, so it could never warn",
    "make warn_fraction at least fraction (equal: no warning band), or turn fraction down",
)
# perftest measures for duration_s inside a `timeout timeout_s`.
_RUN = (
    "timeout_s stops each run, so every run would be cut off before its measurement ends",
    "make timeout_s larger than duration_s, with a few seconds for perftest to connect",
)
ORDERED_BOUNDS = (
    _Ordered("node", "min_bytes", "max_bytes", False, *_SWEEP, measure=parse_size),
    _Ordered("all_reduce", "min_bytes", "max_bytes", False, *_SWEEP, measure=parse_size),
    *(
        _Ordered(gate, "fraction", "warn_fraction", False, *_WARN, only_if_written="warn_fraction")
        for gate in ("ib_write_bw", "rail", "all_reduce", "incast")
    ),
    *(_Ordered(gate, "duration_s", "timeout_s", True, *_RUN) for gate in ("ib_write_bw", "rail", "incast")),
)


def _disordered(gates: Section, smap: SourceMap) -> list[Problem]:
    """Each pair of ORDERED_BOUNDS whose values (written or the schema's defaults) are not in
    order; the problem points at the key the inventory wrote."""
    root = load_schema("inventory")
    filled = Section.of(fill_defaults(gates.data, root["$defs"]["gates"], root), gates.where)
    problems = []
    for pair in ORDERED_BOUNDS:
        written, values = gates.section(pair.gate), filled.section(pair.gate)
        if not values:  # a gate that is off unless written, and is not
            continue
        if pair.only_if_written and pair.only_if_written not in written:
            continue
        low, high = pair.measure(values.get(pair.low)), pair.measure(values.get(pair.high))
        if low < high or (low == high and not pair.strict):
            continue
        low_text, high_text = (
            f"{key} {values.get(key)}" + ("" if key in written else " (the default)") for key in (pair.low, pair.high)
        )
        relation = "is not below" if pair.strict else "is larger than"
        message = f"{low_text} {relation} {high_text}" + (f": {pair.why}" if pair.why else "")
        key = pair.low if pair.low in written else pair.high
        problems.append(smap.problem(("cluster", "gates", pair.gate, key), message, pair.fix))
    return problems


def gate_problems(
    settings: Mapping[str, object], hosts: set[str], smap: SourceMap, slurm: bool = False
) -> list[Problem]:
    """The cluster's gate settings against each other, the hosts that exist and Slurm."""
    gates = Section.of(settings, ("cluster", "gates"))
    problems = _disordered(gates, smap)
    if gates.get("via") == "slurm" and not slurm:
        problems.append(
            smap.problem(
                ("cluster", "gates", "via"),
                "gates.via is slurm but the inventory declares no Slurm",
                "enable cluster.slurm (mode full or health_check), or use via: ssh",
            )
        )
    container = gates.section("container")
    if container and container.get("enabled") is not False and launched_via(gates, slurm) == "slurm":
        problems.append(
            smap.problem(
                ("cluster", "gates", "container"),
                "the container gate starts its containers over SSH only: under srun they would run outside "
                "the job's cgroup, and Slurm could neither hold nor stop them",
                "set gates.via: ssh, or turn the container gate off (enabled: false)",
            )
        )
    for gate in ("all_reduce", "workload"):
        problems += host_list_problems(
            gates.section(gate).texts("hosts"),
            ("cluster", "gates", gate, "hosts"),
            f"{gate}.hosts",
            hosts,
            f"use host names defined under hosts: or groups ({_known(sorted(hosts))})",
            smap,
        )
    return problems + _figure_problems(gates.section("workload").section("figure"), smap)


def _figure_problems(figure: Section, smap: SourceMap) -> list[Problem]:
    """The workload's figure: a pattern that can read a number, bounds that leave room for one."""
    where = figure.where
    problems = []
    pattern = figure.get("pattern")
    why = pattern_problem(pattern) if isinstance(pattern, str) else None
    if why:
        problems.append(
            smap.problem(
                where + ("pattern",),
                f"the figure's pattern cannot read a number: {why}",
                "write a Python regular expression with the number in a group, e.g. 'p50: \\S+ (?P<value>[0-9.]+)/s'",
            )
        )
    low, high = figure.get("min"), figure.get("max")
    if isinstance(low, (int, float)) and isinstance(high, (int, float)) and low > high:
        problems.append(
            smap.problem(
                where + ("max",),
                f"max {high:g} is below min {low:g}: no figure could pass",
                "swap them, or keep the one bound the figure needs (min for a throughput, max for a time)",
            )
        )
    return problems


# What Slurm takes as a NodeName or PartitionName in slurm.conf and hostlists: no dots, brackets or commas.
_SLURM_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]*\Z")


def _known(hosts: list[str]) -> str:
    return f"known: {', '.join(hosts[:10])}{', …' if len(hosts) > 10 else ''}"


def host_list_problems(
    names: Sequence[str], where: DocPath, owner: str, hosts: set[str], unknown_fix: str, smap: SourceMap
) -> list[Problem]:
    """A list of inventory hosts (a Slurm partition's, the all_reduce gate's): each a host of the
    inventory, each once. A host listed twice would be passed on twice (slurm.conf's Nodes=, the
    hosts the gate runs over), and is most likely a typo for a host left out."""
    problems = []
    first: dict[str, int] = {}
    for position, name in enumerate(names):
        if name not in hosts:
            problems.append(
                smap.problem(
                    where + (position,), f"{owner} names {name!r}, which is not a host of this inventory", unknown_fix
                )
            )
        elif name in first:
            problems.append(
                smap.problem(
                    where + (position,),
                    f"{owner} names {name!r} twice (first as {format_path((where[-1], first[name]))})",
                    "name each host once",
                )
            )
        first.setdefault(name, position)
    return problems


_SLURM: DocPath = ("cluster", "slurm")


def slurm_problems(settings: Mapping[str, object], hosts: list[str], smap: SourceMap) -> list[Problem]:
    """cluster.slurm against the hosts that exist: the controller, partition members and
    node_names name inventory hosts; Slurm names are usable and unique; one default partition."""
    slurm = Section.of(settings, _SLURM)
    if not slurm.get("enabled"):
        return []
    full = (slurm.optional_text("mode") or "full") == "full"
    return (
        _controller_problems(slurm.optional_text("controller"), full, hosts, smap)
        + _partition_problems(slurm.sections("partitions"), hosts, smap)
        + _health_check_problems(slurm.section("health_check"), smap)
        + _node_name_problems(slurm, full, hosts, smap)
    )


def _controller_problems(controller: str | None, full: bool, hosts: list[str], smap: SourceMap) -> list[Problem]:
    if full and controller is None:
        return [
            smap.problem(
                _SLURM, "slurm mode full needs a controller", "set slurm.controller to the host that runs slurmctld"
            )
        ]
    if controller is not None and controller not in hosts:
        return [
            smap.problem(
                _SLURM + ("controller",),
                f"slurm.controller {controller!r} is not a host of this inventory",
                _known(hosts),
            )
        ]
    return []


def _partition_problems(partitions: list[Section], hosts: list[str], smap: SourceMap) -> list[Problem]:
    """Each partition once by name, with hosts of this inventory, and at most one default."""
    problems = []
    seen: set[str] = set()
    for index, partition in enumerate(partitions):
        name = partition.text("name")
        if name in seen:
            problems.append(
                smap.problem(
                    _SLURM + ("partitions", index, "name"),
                    f"partition {name!r} is declared twice",
                    "give each partition its own name, or merge their hosts",
                )
            )
        seen.add(name)
        problems += host_list_problems(
            partition.texts("hosts"),
            _SLURM + ("partitions", index, "hosts"),
            f"partition {name!r}",
            set(hosts),
            _known(hosts),
            smap,
        )
    defaults = [index for index, p in enumerate(partitions) if p.get("default")]
    if len(defaults) > 1:
        problems.append(
            smap.problem(
                _SLURM + ("partitions", defaults[1], "default"),
                "more than one partition is the default",
                "mark one partition default: true",
            )
        )
    return problems


def _health_check_problems(check: Section, smap: SourceMap) -> list[Problem]:
    states = check.texts("node_state")
    if "NONDRAINED_IDLE" in states and check.get("drain") is not False:
        return [
            smap.problem(
                _SLURM + ("health_check", "node_state", states.index("NONDRAINED_IDLE")),
                "NONDRAINED_IDLE leaves drained nodes unchecked: a node rdmaprov drained would never be "
                "checked again, so never resumed",
                "use IDLE (idle nodes, drained or not) or ANY, or set health_check.drain: false",
            )
        ]
    return _timeout_problems(check, smap)


def _timeout_problems(check: Section, smap: SourceMap) -> list[Problem]:
    """A declared HealthCheckTimeout below the interval (26.05's daemons insist on it) and with
    room for the node report plus node-check's own start and exit."""
    timeout = check.optional_integer("timeout_s")
    if timeout is None:
        return []
    root = load_schema("inventory")
    schema = root["$defs"]["slurm"]["properties"]["health_check"]
    filled = Section.of(fill_defaults(check.data, schema, root), check.where)
    interval, report = filled.integer("interval_s"), filled.integer("report_timeout_s")
    where = _SLURM + ("health_check", "timeout_s")
    if timeout >= interval:
        return [
            smap.problem(
                where,
                f"health_check.timeout_s {timeout} is not below interval_s {interval}: Slurm 26.05 wants "
                "HealthCheckTimeout less than HealthCheckInterval and logs an error at every start",
                f"set timeout_s to at most {interval - 1}, or raise interval_s",
            )
        ]
    if report + MARGIN_S > timeout:
        return [
            smap.problem(
                where,
                f"health_check.timeout_s {timeout} leaves no room for report_timeout_s {report}: slurmd would "
                f"kill the check before its report gives up ({MARGIN_S} s go to node-check's start and exit)",
                f"set report_timeout_s to at most {timeout - MARGIN_S}, or raise timeout_s",
            )
        ]
    return []


def _node_name_problems(slurm: Section, full: bool, hosts: list[str], smap: SourceMap) -> list[Problem]:
    """node_names maps hosts of this inventory; every Slurm host's name is a NodeName, and its own."""
    problems = []
    mapped = slurm.text_map("node_names")
    for host in mapped:
        if host not in hosts:
            problems.append(
                smap.problem(
                    _SLURM + ("node_names", host),
                    f"node_names maps {host!r}, which is not a host of this inventory",
                    _known(hosts),
                    prefer_key=True,
                )
            )
    partitions = slurm.sections("partitions")
    members = {h for p in partitions for h in (p.texts("hosts") or hosts)} if full else set(hosts)
    owners: dict[str, str] = {}
    for host in (h for h in hosts if h in members):
        name = mapped.get(host, host)
        if not _SLURM_NAME.match(name):
            problems.append(
                smap.problem(
                    _SLURM,
                    f"host {host!r} is no Slurm NodeName (only letters, digits, '_' and '-')",
                    f"map it to one: slurm.node_names: {{{host}: {re.sub(r'[^A-Za-z0-9_-]', '-', host)}}}",
                )
            )
        elif name in owners:
            problems.append(
                smap.problem(
                    _SLURM + ("node_names",) if mapped else _SLURM,
                    f"hosts {owners[name]!r} and {host!r} would both be Slurm node {name!r}",
                    "give each host its own name in slurm.node_names",
                )
            )
        owners.setdefault(name, host)
    return problems
