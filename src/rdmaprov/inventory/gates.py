"""The cluster's gates, typed: what each gate runs and the bounds it judges by (cluster.gates after
fill_defaults). Which gates run, and how, is the workflows' business; what the settings mean is here."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from rdmaprov.inventory.config import strings


@dataclass(frozen=True)
class NodeGate:
    """all_reduce_perf over each node's own GPUs, all nodes at once."""

    enabled: bool
    min_busbw_gbs: float | None
    min_bytes: str
    max_bytes: str
    timeout_s: int


@dataclass(frozen=True)
class IbWriteBwGate:
    """ib_write_bw between pairs of nodes, judged against the port rate (or min_gbps)."""

    enabled: bool
    pairs: str  # ring or all
    fraction: float
    warn_fraction: float
    max_fraction: float
    min_gbps: float | None
    duration_s: int
    timeout_s: int
    size: int


@dataclass(frozen=True)
class RailGate:
    """ib_write_bw on every rail of a pair at once, each HCA judged against its own port rate."""

    enabled: bool
    fraction: float
    warn_fraction: float
    max_fraction: float
    min_gbps: float | None
    size: int
    duration_s: int
    timeout_s: int
    gpudirect: str  # auto, off or required


@dataclass(frozen=True)
class LatencyGate:
    """ib_write_lat on every rail of a pair at once, judged on p99 (default by fabric)."""

    enabled: bool
    max_p99_us: float | None
    warn_fraction: float
    size: int
    iterations: int
    timeout_s: int


@dataclass(frozen=True)
class BaselineConfig:
    """Each gate's figures against their own past, kept on the control machine."""

    enabled: bool
    max_drop: float
    runs: int
    action: str  # warn or fail
    # A p99 latency jitters between healthy runs far more than an average bandwidth does, so a
    # latency part has its own tolerance (a rise, as a fraction of its baseline).
    max_latency_rise: float = 0.25


@dataclass(frozen=True)
class AllReduceGate:
    """One allreduce sweep across the nodes, judged on busbw at the largest size."""

    enabled: bool
    fraction: float
    warn_fraction: float
    max_fraction: float
    min_busbw_gbs: float | None
    min_bytes: str
    max_bytes: str
    retries: int
    timeout_s: int
    hosts: tuple[str, ...]  # empty: the hosts selected
    launcher_ifname: str | None


@dataclass(frozen=True)
class Figure:
    """How a workload's figure is read from its log (parsers/figure.py) and the bounds it must keep."""

    pattern: str
    unit: str
    better: str  # higher or lower
    take: str  # median, min, max, first or last (parsers/figure.TAKE)
    minimum: float | None
    maximum: float | None

    @property
    def lower_is_better(self) -> bool:
        return self.better == "lower"


@dataclass(frozen=True)
class WorkloadGate:
    """The site's own command across the nodes, as its jobs run it; off unless written."""

    enabled: bool
    command: str
    per_node: int
    figure: Figure | None
    require_rdma: bool
    timeout_s: int
    master_port: int
    hosts: tuple[str, ...]  # empty: the hosts selected

    @classmethod
    def from_settings(cls, settings: dict[str, Any] | None) -> WorkloadGate:
        if not settings:
            return cls(False, "", 1, None, True, 1800, 29500, ())
        fg = settings.get("figure")
        figure = (
            Figure(fg["pattern"], fg["unit"], fg["better"], fg["take"], fg.get("min"), fg.get("max")) if fg else None
        )
        return cls(
            settings["enabled"],
            settings.get("command", ""),  # left out only where enabled is false
            settings["per_node"],
            figure,
            settings["require_rdma"],
            settings["timeout_s"],
            settings["master_port"],
            strings(settings.get("hosts")),
        )


def launched_via(gates: dict[str, Any], slurm: bool) -> str:
    """How the gates launch their jobs: gates.via as written, else slurm where the inventory
    declares Slurm, else ssh."""
    return gates.get("via") or ("slurm" if slurm else "ssh")


@dataclass(frozen=True)
class ContainerGate:
    """ib_write_bw between containers of the site's image on the ib_write_bw gate's pairs; off unless written."""

    enabled: bool
    image: str

    @classmethod
    def from_settings(cls, settings: dict[str, Any] | None) -> ContainerGate:
        if not settings:
            return cls(False, "")
        return cls(settings["enabled"], settings.get("image", ""))  # left out only where enabled is false


@dataclass(frozen=True)
class GatesConfig:
    node: NodeGate
    ib_write_bw: IbWriteBwGate
    all_reduce: AllReduceGate
    rail: RailGate
    latency: LatencyGate
    baseline: BaselineConfig
    workload: WorkloadGate = WorkloadGate.from_settings(None)
    container: ContainerGate = ContainerGate.from_settings(None)
    via: str = "ssh"  # how workloads are launched: ssh (mpirun, commands over SSH) or slurm (srun)

    @classmethod
    def from_settings(cls, gates: dict[str, Any], slurm: bool = False) -> GatesConfig:
        """The typed view of cluster.gates after fill_defaults; `slurm`: the inventory declares
        Slurm, so the gates run as Slurm jobs unless gates.via says ssh."""
        nd, ib, ar = gates["node"], gates["ib_write_bw"], gates["all_reduce"]
        rl, lt, bl = gates["rail"], gates["latency"], gates["baseline"]
        return cls(
            NodeGate(nd["enabled"], nd.get("min_busbw_gbs"), nd["min_bytes"], nd["max_bytes"], nd["timeout_s"]),
            IbWriteBwGate(
                ib["enabled"],
                ib["pairs"],
                ib["fraction"],
                ib["warn_fraction"],
                ib["max_fraction"],
                ib.get("min_gbps"),
                ib["duration_s"],
                ib["timeout_s"],
                ib["size"],
            ),
            AllReduceGate(
                ar["enabled"],
                ar["fraction"],
                ar["warn_fraction"],
                ar["max_fraction"],
                ar.get("min_busbw_gbs"),
                ar["min_bytes"],
                ar["max_bytes"],
                ar["retries"],
                ar["timeout_s"],
                strings(ar.get("hosts")),
                ar.get("launcher_ifname"),
            ),
            RailGate(
                rl["enabled"],
                rl["fraction"],
                rl["warn_fraction"],
                rl["max_fraction"],
                rl.get("min_gbps"),
                rl["size"],
                rl["duration_s"],
                rl["timeout_s"],
                rl["gpudirect"],
            ),
            LatencyGate(
                lt["enabled"], lt.get("max_p99_us"), lt["warn_fraction"], lt["size"], lt["iterations"], lt["timeout_s"]
            ),
            BaselineConfig(bl["enabled"], bl["max_drop"], bl["runs"], bl["action"], bl["max_latency_rise"]),
            WorkloadGate.from_settings(gates.get("workload")),
            ContainerGate.from_settings(gates.get("container")),
            launched_via(gates, slurm),
        )
