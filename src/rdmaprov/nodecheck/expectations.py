"""The node's expectations: what verify would hold this node to, rendered from the inventory into
a JSON file on the node (the node_check deploy writes it), read back there by `node-check`.

The file carries the inventory's own node settings, but only those the checks read (devices,
rates, MTUs, netns mode, memlock, GPU count and driver, NCCL version and prefix, the nccl-tests
whose linkage is judged, the eRDMA net plugin), in the
inventory's shape; on the node the schema's defaults complete them and the same typed model
(NodeConfig) is built from them, so every check means there what it means in verify. Mirror URLs,
build scripts and the rest of the inventory stay on the control machine.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TypedDict

from rdmaprov.errors import Problem, UserError
from rdmaprov.inventory.config import NodeConfig
from rdmaprov.inventory.model import HostSpec, SSHSettings, fill_defaults, node_schema
from rdmaprov.inventory.slurm import BEFORE_TIMEOUT
from rdmaprov.nodecheck.options import EXPECTATIONS as PATH

FORMAT = 1
# How long the node report may take before node-check gives up on it (a hung nvidia-smi, a stuck
# sysfs read): well inside Slurm's own limit on a HealthCheckProgram (60 s by default).
REPORT_TIMEOUT_S = 30


def node_settings(node: NodeConfig) -> dict[str, object]:
    """The settings the checks read, in the inventory's shape (its keys and values as written)."""
    rdma = node.rdma
    rdma_settings: dict[str, object] = {
        "devices": list(rdma.devices),
        "storage_hcas": list(rdma.storage_hcas),
        "netdevs": list(rdma.netdevs),
        "port": rdma.port,
    }
    gpu: dict[str, object] = {"count": 0}
    nccl: dict[str, object] = {
        "source": {"kind": node.nccl.source_kind},
        "prefix": node.nccl.prefix,
        "tests": {"enabled": node.nccl.tests_enabled, "prefix": node.nccl.tests_prefix},
    }
    erdma: dict[str, object] = {"jumbo_frames": node.erdma.jumbo_frames}
    settings: dict[str, object] = {
        "rdma": rdma_settings,
        "mtu": dict(node.mtu),
        "limits": {"memlock": node.memlock},
        "gpu": gpu,
        "nccl": nccl,
        "erdma": erdma,
    }
    if node.erdma.aiacc_plugin:
        erdma["aiacc_plugin"] = node.erdma.aiacc_plugin
    if rdma.rate_gbps is not None:
        rdma_settings["rate_gbps"] = rdma.rate_gbps
    if rdma.gid_index is not None:
        rdma_settings["gid_index"] = rdma.gid_index
    if node.fabric is not None:
        settings["fabric"] = node.fabric
    if node.netns_mode is not None:
        settings["netns_mode"] = node.netns_mode
    if node.containers.enroot:
        settings["containers"] = {"enroot": True}  # its finding (health/container_checks.py)
    if node.gpu is not None:
        gpu["count"] = node.gpu.count
        if node.gpu.driver_version:
            gpu["driver_version"] = node.gpu.driver_version
    if node.nccl.version:
        nccl["version"] = node.nccl.version
    gid = node.nccl.env.get("NCCL_IB_GID_INDEX")
    if gid is not None:
        nccl["env"] = {"NCCL_IB_GID_INDEX": gid}
    if node.roce_qos.enabled:
        settings["roce_qos"] = node.roce_qos.settings()
    return settings


class _SlurmKeys(TypedDict):
    """The keys every "slurm" section has; SlurmSection adds the one it may lack (NotRequired is Python 3.11's)."""

    node_name: str
    drain: bool
    max_drain_fraction: float


class SlurmSection(_SlurmKeys, total=False):
    """The expectations file's "slurm" section, as SlurmSide.to_json writes it (files from before
    budget_s have none)."""

    budget_s: int


@dataclass(frozen=True)
class SlurmSide:
    """What the Slurm health check needs beyond the checks: the node's Slurm name and the drain limits."""

    node_name: str
    drain: bool
    max_drain_fraction: float
    # The check's own time: slurmd's limit on this cluster's release less node-check's start and exit
    budget_s: int = BEFORE_TIMEOUT.budget_s

    def to_json(self) -> SlurmSection:
        return {
            "node_name": self.node_name,
            "drain": self.drain,
            "max_drain_fraction": self.max_drain_fraction,
            "budget_s": self.budget_s,
        }

    @classmethod
    def from_json(cls, slurm: SlurmSection) -> SlurmSide:
        """The section as render wrote it; files from before budget_s keep the 60 s limit's budget."""
        budget = int(slurm.get("budget_s", cls.budget_s))
        return cls(str(slurm["node_name"]), bool(slurm["drain"]), float(slurm["max_drain_fraction"]), budget)


@dataclass(frozen=True)
class Expectations:
    cluster: str
    host: HostSpec  # the node as verify sees it: its name and its typed settings
    report_timeout_s: int
    slurm: SlurmSide | None
    path: str = PATH  # where they were read from


def render(cluster: str, host: HostSpec, slurm: SlurmSide | None, report_timeout_s: int = REPORT_TIMEOUT_S) -> str:
    """The expectations file's text: stable (sorted keys), so a re-apply with the same inventory
    writes the same bytes."""
    document = {
        "format": FORMAT,
        "cluster": cluster,
        "host": host.name,
        "address": host.address,
        "report_timeout_s": report_timeout_s,
        "node": node_settings(host.node),
        "slurm": slurm.to_json() if slurm else None,
    }
    return json.dumps(document, indent=2, sort_keys=True) + "\n"


def _problem(path: str, what: str) -> UserError:
    return UserError(Problem(path, what, fix="run `rdmaprov apply` (its node_check deploy writes this file)"))


def parse(text: str, path: str = PATH) -> Expectations:
    """The expectations from the file's text; a clear error naming the file for anything else."""
    try:
        document = json.loads(text)
    except json.JSONDecodeError as exc:
        raise _problem(path, f"not JSON ({exc})") from None
    if not isinstance(document, dict) or document.get("format") != FORMAT:
        found = document.get("format") if isinstance(document, dict) else type(document).__name__
        raise _problem(path, f"format {found!r}; this node-check reads format {FORMAT}")
    try:
        schema, root = node_schema()
        node = NodeConfig.from_settings(fill_defaults(document["node"], schema, root))
        slurm = document.get("slurm")
        return Expectations(
            cluster=str(document["cluster"]),
            host=HostSpec(str(document["host"]), str(document.get("address", "")), SSHSettings(), (), node),
            report_timeout_s=int(document.get("report_timeout_s", REPORT_TIMEOUT_S)),
            slurm=SlurmSide.from_json(slurm) if slurm else None,
            path=path,
        )
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise _problem(path, f"missing or wrong entry ({type(exc).__name__}: {exc})") from None


def load(path: str = PATH) -> Expectations:
    try:
        with open(path, encoding="utf-8") as handle:
            text = handle.read()
    except OSError as exc:
        raise _problem(path, f"cannot be read ({exc.strerror})") from None
    return parse(text, path)
