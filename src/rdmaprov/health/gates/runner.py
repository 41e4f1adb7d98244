"""Run the gates the inventory enables over the selected hosts, then hold each figure to its own
past (health/baselines.py)."""

from __future__ import annotations

from rdmaprov.engine.session import Session
from rdmaprov.health.baselines import apply_baselines
from rdmaprov.health.gates.all_reduce import run_all_reduce
from rdmaprov.health.gates.container import run_container_gate
from rdmaprov.health.gates.ib_write_bw import run_ib_write_bw
from rdmaprov.health.gates.incast import run_incast_gate
from rdmaprov.health.gates.latency import run_latency_gate
from rdmaprov.health.gates.node import run_node_gate
from rdmaprov.health.gates.rail import run_rail_gate
from rdmaprov.health.gates.result import GateResult
from rdmaprov.health.gates.workload import run_workload
from rdmaprov.parsers.node import NodeReport

# The gates that judge the cluster as a whole; when one fails, `diagnose` finds the node.
CLUSTER_GATES = frozenset({"ib_write_bw", "all_reduce"})


def run_gates(
    session: Session, hosts: list[str], reports: dict[str, NodeReport | Exception], newcomers: list[str] | None = None
) -> list[GateResult]:
    gates = session.inventory.gates
    readable = {name: r for name, r in reports.items() if isinstance(r, NodeReport)}
    results: list[GateResult] = []
    if gates.node.enabled:
        with session.during("the node gate"):
            results.extend(run_node_gate(session, hosts, readable))
    pairs: list[GateResult] = []
    if gates.ib_write_bw.enabled:
        with session.during("the ib_write_bw gate"):
            pairs = run_ib_write_bw(session, hosts, readable, newcomers)
    results.extend(pairs)
    if gates.container.enabled:
        with session.during("the container gate"):
            results.extend(run_container_gate(session, hosts, readable, newcomers))
    if gates.rail.enabled:
        with session.during("the rail gate"):
            results.extend(run_rail_gate(session, hosts, readable, newcomers))
    if gates.latency.enabled:
        with session.during("the latency gate"):
            results.extend(run_latency_gate(session, hosts, readable, newcomers))
    if gates.incast.enabled:
        with session.during("the incast gate"):
            results.extend(run_incast_gate(session, hosts, readable, newcomers))
    if gates.all_reduce.enabled:
        with session.during("the all_reduce gate"):
            results.append(run_all_reduce(session, hosts, readable, pairs))
    if gates.workload.enabled:
        with session.during("the workload gate"):
            results.append(run_workload(session, hosts, readable))
    apply_baselines(results, session.inventory.name, gates.baseline)
    return results


def cluster_gate_failed(results: list[GateResult]) -> bool:
    """Whether a cluster gate failed in a way a diagnosis can localize: its test ran and fell
    short or broke. Not a baseline drift (judged against the part's own past, which the pair
    tests do not know: they would clear every node and contradict the gate), nor a job refused
    before it ran because the nodes' MPI series cannot mix (every pair across them fails alike)."""
    return any(
        r.gate in CLUSTER_GATES
        and not r.passed
        and not (r.baseline and r.baseline["drift"])
        and not r.details.get("mixed_mpi")
        for r in results
    )
