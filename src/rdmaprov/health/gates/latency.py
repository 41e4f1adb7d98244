"""Gate: latency of every rail of each pair (the rail gate's pairs), ib_write_lat with small
messages, all rails of a pair at once, judged on the 99th percentile: a flapping or congested
link shows in the tail long before it shows in bandwidth.

perftest prints the percentiles only when it keeps every sample, so the test runs a number of
iterations (`-n`), never a duration (`-D` prints the average alone). It runs in host memory:
perftest refuses ib_write_lat on GPU memory (write without immediate).

Defaults by fabric, for 2-byte writes: InfiniBand p99 ≤ 4.2 µs, the bound Imbue's host validation
holds NDR links to (NVIDIA's ngc_multinode_perf fails a write test whose average is above
2.5 µs); RoCE p99 ≤ 5 µs, the per-interface ib_write_lat bound of oci-hpc's health checks on its
RoCE GPU shapes. eRDMA (no published latency figure found) and SoftRoCE (software, its latency
depends on the host) have no default: `gates.latency.max_p99_us` sets it.
"""

from __future__ import annotations

from rdmaprov.engine.session import Session
from rdmaprov.health.gates.bandwidth import Verdict, failed
from rdmaprov.health.gates.pairs import Pair, gate_pairs, run_in_rounds
from rdmaprov.health.gates.perftest import LaneOutput, Tool, failed_on_exit, judged_lanes, no_result, pair_lanes
from rdmaprov.health.gates.result import GateResult
from rdmaprov.inventory.gates import LatencyGate
from rdmaprov.parsers.node import NodeReport
from rdmaprov.parsers.perftest import LatencyResult, parse_lat_output

LATENCY_BASE_PORT = 18700
UNIT = "µs"
DEFAULT_P99_US = {
    "infiniband": (4.2, "the InfiniBand default"),
    "roce": (5.0, "the RoCE default"),
}


def latency_limit(settings: LatencyGate, fabric: str | None) -> tuple[float, str] | None:
    """(most p99 in µs, what set it): the inventory's, else the fabric's default."""
    if settings.max_p99_us is not None:
        return settings.max_p99_us, "gates.latency.max_p99_us"
    return DEFAULT_P99_US.get(fabric or "")


def microseconds(value: float) -> str:
    """µs as people write them: 4.2, 30314.2, 1000000 (`:g` alone writes a million as 1e+06, and
    999999.7, rounded to six digits, too)."""
    shown = f"{value:g}"
    return f"{value:.0f}" if "e+" in shown else shown


def judge_latency(result: LatencyResult | None, size: int, limit: tuple[float, str], warn_fraction: float) -> Verdict:
    """p99 at `size` against the limit, with the sums; a run without percentiles cannot pass."""
    row = result.row(size) if result is not None else None
    if result is None or row is None:
        return failed(f"no {size}-byte row in ib_write_lat's output", UNIT)
    if row.p99_us is None:
        why = "it ran for a duration (-D)" if result.layout == "duration" else "perftest before July 2016"
        return failed(f"ib_write_lat printed no 99% percentile ({why}): install a newer perftest", UNIT)
    most, source = limit
    clock = " (perftest: the CPU clock was not at its maximum, which inflates latency)" if result.warnings else ""
    p99, bound = microseconds(row.p99_us), microseconds(most)
    if row.p99_us > most:
        reason = f"p99 {p99} {UNIT} > {bound} {UNIT} = {source}{clock}"
        return Verdict("fail", row.p99_us, most, UNIT, reason)
    reason = f"p99 {p99} {UNIT} <= {bound} {UNIT} = {source}"
    if row.p99_us > warn_fraction * most:
        level = f"{warn_fraction:.2f} × {bound} {UNIT} = {microseconds(float(f'{warn_fraction * most:.3g}'))} {UNIT}"
        return Verdict("warn", row.p99_us, most, UNIT, f"{reason}; above the warning level {level}{clock}")
    return Verdict("pass", row.p99_us, most, UNIT, reason)


def latency_tool(settings: LatencyGate) -> Tool:
    args = ("-s", str(settings.size), "-n", str(settings.iterations), "-F")
    return Tool("ib_write_lat", args, settings.timeout_s, "gates.latency.timeout_s")


def judge_lane(output: LaneOutput, settings: LatencyGate, limit: tuple[float, str]) -> GateResult:
    lane = output.lane
    try:
        parsed, error = parse_lat_output(output.client), ""
    except ValueError as exc:
        parsed, error = None, str(exc)
    if error or parsed is None:
        return GateResult("latency", lane.subject, False, no_result("ib_write_lat", output, error))
    verdict = failed_on_exit(
        judge_latency(parsed, settings.size, limit, settings.warn_fraction), "ib_write_lat", output.client_status
    )
    row = parsed.row(settings.size)
    details = {
        "via": output.via,
        "rail": lane.rail,
        "server_device": lane.server.device,
        "client_device": lane.client.device,
        "bytes": settings.size,
        "iterations": row.iterations if row else None,
        "t_typical_us": row.t_typical_us if row else None,
        "t_avg_us": row.t_avg_us if row else None,
        "p999_us": row.p999_us if row else None,
        "perftest_warnings": list(parsed.warnings),
    }
    return GateResult.of("latency", lane.subject, verdict, details=details)


def run_latency_pair(session: Session, server: str, client: str, reports: dict[str, NodeReport]) -> list[GateResult]:
    settings = session.inventory.gates.latency
    lanes, results, _ = pair_lanes(session, "latency", server, client, reports, LATENCY_BASE_PORT)
    if not lanes:
        return results
    fabric = session.inventory.hosts[server].node.fabric
    limit = latency_limit(settings, fabric)
    if limit is None:
        # nothing to judge against: testing would only cost the pair its time
        why = f"skipped (no p99 default for {fabric}: set cluster.gates.latency.max_p99_us, or turn the gate off)"
        return results + [GateResult("latency", lane.subject, True, why, status="skipped") for lane in lanes]
    return results + judged_lanes(
        session,
        latency_tool(settings),
        lanes,
        lambda output: judge_lane(output, settings, limit),
        lambda lane, why: GateResult("latency", lane.subject, False, why),
    )


def run_latencies(session: Session, pairs: list[Pair], reports: dict[str, NodeReport]) -> list[GateResult]:
    return run_in_rounds("latency", pairs, lambda server, client: run_latency_pair(session, server, client, reports))


def run_latency_gate(
    session: Session, hosts: list[str], reports: dict[str, NodeReport], newcomers: list[str] | None = None
) -> list[GateResult]:
    """The latency gate over the rail gate's pairs."""
    return run_latencies(session, gate_pairs(session.inventory.gates.ib_write_bw.pairs, hosts, newcomers), reports)
