"""The cluster's gates, typed: what each gate runs and the bounds it judges by (cluster.gates after
fill_defaults). Which gates run, and how, is the workflows' business; what the settings mean is here."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from rdmaprov.inventory.settings import Section


@dataclass(frozen=True)
class NodeGate:
    """all_reduce_perf over each node's own GPUs, all nodes at once."""

    enabled: bool
    min_busbw_gbs: float | None
    min_bytes: str
    max_bytes: str
    timeout_s: int


@dataclass(frozen=True)
class Bandwidth:
    """What an ib_write_bw gate sends and judges by, the same settings in the pair, rail and incast
    gates: `size`-byte writes for `duration_s` (the run killed at `timeout_s`); a pass at `fraction`
    × the port rate (or `min_gbps`), a warning under `warn_fraction` ×, a measurement error over
    `max_fraction` ×."""

    fraction: float
    warn_fraction: float
    max_fraction: float
    min_gbps: float | None
    size: int
    duration_s: int
    timeout_s: int

    @staticmethod
    def read(settings: Section) -> tuple[float, float, float, float | None, int, int, int]:
        """The fields above from a gate's section, in their order (a gate's own fields follow)."""
        return (
            settings.number("fraction"),
            settings.number("warn_fraction"),
            settings.number("max_fraction"),
            settings.optional_number("min_gbps"),
            settings.integer("size"),
            settings.integer("duration_s"),
            settings.integer("timeout_s"),
        )


@dataclass(frozen=True)
class IbWriteBwGate(Bandwidth):
    """ib_write_bw between pairs of nodes, judged against the port rate (or min_gbps)."""

    enabled: bool
    pairs: str  # ring or all


@dataclass(frozen=True)
class RailGate(Bandwidth):
    """ib_write_bw on every rail of a pair at once, each HCA judged against its own port rate."""

    enabled: bool
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
class IncastGate(Bandwidth):
    """Several senders write to one receiver at once; the sum against the receiver's port rate,
    every node's counters around it. Off unless written: it congests the fabric on purpose."""

    enabled: bool
    senders: int

    @classmethod
    def from_settings(cls, settings: Section) -> IncastGate:
        if not settings:
            return cls(0.9, 0.95, 1.05, None, 1 << 20, 5, 60, False, 3)
        return cls(*Bandwidth.read(settings), settings.flag("enabled"), settings.integer("senders"))


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
    def from_settings(cls, settings: Section) -> WorkloadGate:
        if not settings:
            return cls(False, "", 1, None, True, 1800, 29500, ())
        fg = settings.section("figure")
        figure = (
            Figure(
                fg.text("pattern"),
                fg.text("unit"),
                fg.text("better"),
                fg.text("take"),
                fg.optional_number("min"),
                fg.optional_number("max"),
            )
            if fg
            else None
        )
        return cls(
            settings.flag("enabled"),
            settings.optional_text("command") or "",  # left out only where enabled is false
            settings.integer("per_node"),
            figure,
            settings.flag("require_rdma"),
            settings.integer("timeout_s"),
            settings.integer("master_port"),
            settings.texts("hosts"),
        )


def launched_via(gates: Section, slurm: bool) -> str:
    """How the gates launch their jobs: gates.via as written, else slurm where the inventory
    declares Slurm, else ssh."""
    return gates.optional_text("via") or ("slurm" if slurm else "ssh")


@dataclass(frozen=True)
class ContainerGate:
    """ib_write_bw between containers of the site's image on the ib_write_bw gate's pairs (and the
    latency gate's ib_write_lat where it runs); off unless written."""

    enabled: bool
    image: str

    @classmethod
    def from_settings(cls, settings: Section) -> ContainerGate:
        if not settings:
            return cls(False, "")
        return cls(settings.flag("enabled"), settings.optional_text("image") or "")  # left out only where disabled


@dataclass(frozen=True)
class GatesConfig:
    node: NodeGate
    ib_write_bw: IbWriteBwGate
    all_reduce: AllReduceGate
    rail: RailGate
    latency: LatencyGate
    baseline: BaselineConfig
    workload: WorkloadGate = WorkloadGate.from_settings(Section({}))
    container: ContainerGate = ContainerGate.from_settings(Section({}))
    incast: IncastGate = IncastGate.from_settings(Section({}))
    via: str = "ssh"  # how workloads are launched: ssh (mpirun, commands over SSH) or slurm (srun)

    @classmethod
    def from_settings(cls, settings: Mapping[str, object], slurm: bool = False) -> GatesConfig:
        """The typed view of cluster.gates after fill_defaults; `slurm`: the inventory declares
        Slurm, so the gates run as Slurm jobs unless gates.via says ssh."""
        gates = Section.of(settings, ("cluster", "gates"))
        nd, ib, ar = gates.section("node"), gates.section("ib_write_bw"), gates.section("all_reduce")
        rl, lt, bl = gates.section("rail"), gates.section("latency"), gates.section("baseline")
        return cls(
            NodeGate(
                nd.flag("enabled"),
                nd.optional_number("min_busbw_gbs"),
                nd.text("min_bytes"),
                nd.text("max_bytes"),
                nd.integer("timeout_s"),
            ),
            IbWriteBwGate(*Bandwidth.read(ib), ib.flag("enabled"), ib.text("pairs")),
            AllReduceGate(
                ar.flag("enabled"),
                ar.number("fraction"),
                ar.number("warn_fraction"),
                ar.number("max_fraction"),
                ar.optional_number("min_busbw_gbs"),
                ar.text("min_bytes"),
                ar.text("max_bytes"),
                ar.integer("retries"),
                ar.integer("timeout_s"),
                ar.texts("hosts"),
                ar.optional_text("launcher_ifname"),
            ),
            RailGate(*Bandwidth.read(rl), rl.flag("enabled"), rl.text("gpudirect")),
            LatencyGate(
                lt.flag("enabled"),
                lt.optional_number("max_p99_us"),
                lt.number("warn_fraction"),
                lt.integer("size"),
                lt.integer("iterations"),
                lt.integer("timeout_s"),
            ),
            BaselineConfig(
                bl.flag("enabled"),
                bl.number("max_drop"),
                bl.integer("runs"),
                bl.text("action"),
                bl.number("max_latency_rise"),
            ),
            WorkloadGate.from_settings(gates.section("workload")),
            ContainerGate.from_settings(gates.section("container")),
            IncastGate.from_settings(gates.section("incast")),
            launched_via(gates, slurm),
        )
