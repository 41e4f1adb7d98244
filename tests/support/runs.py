"""Whole runs for the readiness report's tests, made as rdmaprov makes them: real captured outputs
(tests/fixtures) judged by the gates' own functions, nodes verified by verify's own checks, a
diagnosis localized by its own rounds, baselines kept by their own module.

The cluster: N nodes of the SoftRoCE lab's node report (the fleet's kernel differs on a bad
node), 8 rails of the 25 Gb/s irdma capture on each, ring pairs, ib_write_lat on every rail,
all_reduce_perf's 8 × A100 sweep for the node gate and the cluster gate. A bad node has a wrong
MTU, a kernel the rest of the fleet has not, one rail at the SoftRoCE capture's speed and tail
latencies from a RoCE capture above its own past; the cluster's all_reduce then dies mid-sweep.

`python -m tests.support.runs OUT.json [NODES] [BAD]` writes a run's JSON (as `--json` prints
it) for `rdmaprov report`: docs/report.png is the page of `python -m tests.support.runs run.json
8 node07`.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile

from rdmaprov.engine.results import RunResult
from rdmaprov.health.baselines import apply_baselines
from rdmaprov.health.checks import verify_node
from rdmaprov.health.diagnose import localize, pair_verdicts
from rdmaprov.health.fleet import fleet_findings
from rdmaprov.health.gates.all_reduce import all_reduce_bounds, judge_run, sweep_rows
from rdmaprov.health.gates.ib_write_bw import TCP_PORT, judge_bandwidth, pair_bounds
from rdmaprov.health.gates.latency import LATENCY_BASE_PORT, judge_lane, latency_limit
from rdmaprov.health.gates.node import judge_node
from rdmaprov.health.gates.pairs import ring_pairs
from rdmaprov.health.gates.perftest import Endpoint, Lane, LaneOutput
from rdmaprov.health.gates.rail import RAIL_BASE_PORT, rail_bounds
from rdmaprov.health.gates.result import GateResult
from rdmaprov.health.gates.subject import Subject
from rdmaprov.health.verify import HostVerification
from rdmaprov.parsers.nccl_tests import parse_nccl_tests
from rdmaprov.parsers.node import Gpu, NodeReport, parse_node_report
from tests.conftest import FIXTURES
from tests.support.inventories import gates_config, lab_host

RAILS = 8
STARTED = "2026-11-26T08:00:00+00:00"
NODE_REPORT = (FIXTURES / "lab" / "node_report_rxe_full.txt").read_text()
BW_OK = (FIXTURES / "seed" / "ib_write_bw_client_roce_25g.txt").read_text()  # 23.14 Gb/s, irdma 25G
BW_SLOW = (FIXTURES / "softroce-lab" / "ib_write_bw_client_rxe_tcg.txt").read_text()  # 0.048 Gb/s
LAT_OK = (FIXTURES / "public" / "ib_write_lat_client_cx3_ib_cpufreq_warnings_tabs.txt").read_text()  # p99 1 µs
LAT_SLOW = (FIXTURES / "public" / "ib_send_lat_all_sizes_percentiles_DC_server_cx_roce.txt").read_text()  # 6.34
SWEEP = (FIXTURES / "public" / "all_reduce_perf_redop_no_root_error_column_8xA100.txt").read_text()  # 235 GB/s
# a 128-node sweep that died after its 16G row: an NCCL failure, the rows before it kept
SWEEP_DIED = (FIXTURES / "public" / "all_reduce_perf_died_midsweep_test_nccl_failure_mpirun_128node.txt").read_text()
A100 = [Gpu("A100-SXM4-40GB", "8.0", "535.129.03")] * 8
# A 25 Gb/s port held to 90 % of its rate (the capture carries 92.6 %), p99 to 10 µs, the
# cluster's busbw to an absolute minimum, and each part's baseline from one run.
GATES = gates_config(
    {
        "ib_write_bw": {"fraction": 0.9, "warn_fraction": 0.92},
        "rail": {"fraction": 0.9, "warn_fraction": 0.92},
        "latency": {"max_p99_us": 10},
        "all_reduce": {"min_busbw_gbs": 200},
        "baseline": {"runs": 1},
    }
)


def node_names(count: int) -> list[str]:
    return [f"node{i:02d}" for i in range(1, count + 1)]


def _lane(server: str, client: str, rail: int, base_port: int) -> Lane:
    return Lane(
        rail,
        Endpoint(server, f"irdma{rail}", 1, 3, 25.0, True),
        Endpoint(client, f"irdma{rail}", 1, 3, 25.0, True),
        base_port + rail,
    )


def rail_results(pairs: list[tuple[str, str]], bad: str | None) -> list[GateResult]:
    """Every rail of each pair: the bad node's rail 3 at SoftRoCE's speed, the rest at the 25G capture's."""
    bounds = rail_bounds(GATES.rail, GATES.ib_write_bw)
    results = []
    for server, client in pairs:
        for rail in range(RAILS):
            lane = _lane(server, client, rail, RAIL_BASE_PORT)
            output = BW_SLOW if rail == 3 and bad in (server, client) else BW_OK
            results.append(judge_bandwidth("rail", lane.subject, LaneOutput(lane, output, 0, "", 0), bounds))
    return results


def latency_results(pairs: list[tuple[str, str]], bad: str | None) -> list[GateResult]:
    """ib_write_lat on every rail: the bad node's pairs with a 6.34 µs tail, the rest 1 µs."""
    limit = latency_limit(GATES.latency, "roce")
    assert limit is not None
    return [
        judge_lane(
            LaneOutput(_lane(s, c, rail, LATENCY_BASE_PORT), LAT_SLOW if bad in (s, c) else LAT_OK, 0, "", 0),
            GATES.latency,
            limit,
        )
        for s, c in pairs
        for rail in range(RAILS)
    ]


def pair_results(pairs: list[tuple[str, str]], bad: str | None) -> list[GateResult]:
    """ib_write_bw between each pair's first HCAs (rail 0: the bad node's slow rail is another)."""
    bounds = pair_bounds(GATES.ib_write_bw)
    return [
        judge_bandwidth(
            "ib_write_bw", Subject.pair(s, c), LaneOutput(_lane(s, c, 0, TCP_PORT), BW_OK, 0, "", 0), bounds
        )
        for s, c in pairs
    ]


def node_results(names: list[str]) -> list[GateResult]:
    """The node gate on each node: the 8 × A100 sweep against the model's default."""
    return [
        GateResult.of(
            "node", Subject.node(name), judge_node(SWEEP, True, A100, GATES.node), details={"gpus": 8, "via": "ssh"}
        )
        for name in names
    ]


def all_reduce_result(names: list[str], sweep: str) -> GateResult:
    """The all_reduce over every node, from a captured sweep, with its rows as the gate keeps them."""
    run = parse_nccl_tests(sweep)
    details = {"kind": "nccl-tests", "ranks": 8 * len(names), "via": "ssh", "rows": sweep_rows(run)}
    verdict = judge_run(run, all_reduce_bounds(GATES.all_reduce), None)
    return GateResult.of("all_reduce", Subject.job(names), verdict, 1, details)


def verifications(names: list[str], bad: str | None) -> list[HostVerification]:
    """verify's findings for each node; the bad one with an MTU the inventory does not want, and a
    kernel the rest of the fleet does not run."""
    reports: dict[str, NodeReport] = {
        name: parse_node_report(NODE_REPORT.replace("6.1.0-50-amd64", "6.1.0-41-amd64") if name == bad else NODE_REPORT)
        for name in names
    }
    hosts = {name: lab_host(name, **({"mtu": {"eth0": 9000}} if name == bad else {})) for name in names}
    fleet = fleet_findings(hosts, reports)
    results = []
    for number, name in enumerate(names, start=11):
        result = HostVerification(
            name, f"10.77.0.{number}", findings=verify_node(hosts[name], reports[name]) + fleet[name]
        )
        result.status = "failed" if result.failures else "ok"
        results.append(result)
    return results


def gate_results(names: list[str], bad: str | None, cluster: str) -> list[GateResult]:
    """Every gate verify --gates runs, in its order, each part held to its past: a run of the
    healthy cluster first records the baselines this run is judged against. With a bad node the
    all_reduce dies mid-sweep."""
    pairs = ring_pairs(names)
    healthy = node_results(names) + pair_results(pairs, None) + rail_results(pairs, None)
    apply_baselines(healthy + latency_results(pairs, None) + [all_reduce_result(names, SWEEP)], cluster, GATES.baseline)
    results = node_results(names) + pair_results(pairs, bad) + rail_results(pairs, bad) + latency_results(pairs, bad)
    results.append(all_reduce_result(names, SWEEP_DIED if bad else SWEEP))
    apply_baselines(results, cluster, GATES.baseline)
    return results


def verify_run(count: int, bad: str | None = None, cluster: str = "prod") -> RunResult:
    """`rdmaprov verify --gates` of `count` nodes, `bad` the one at fault (None: a healthy
    cluster), with the diagnosis its failed cluster gate is followed by."""
    names = node_names(count)
    result = RunResult("verify", "inventories/prod.yaml", cluster, STARTED, 734.2, [], verifications(names, bad))
    result.gates = gate_results(names, bad, cluster)
    if bad:
        result.diagnosis = localize(names, lambda pairs: pair_verdicts(pairs, rail_results(pairs, bad)))
    return result


if __name__ == "__main__":
    os.environ.setdefault("RDMAPROV_STATE", tempfile.mkdtemp(prefix="rdmaprov-runs-"))  # never the user's baselines
    count = int(sys.argv[2]) if len(sys.argv) > 2 else 8
    with open(sys.argv[1], "w", encoding="utf-8") as handle:
        json.dump(verify_run(count, sys.argv[3] if len(sys.argv) > 3 else None).to_json(), handle, indent=2)
