"""Read every selected node's report (one round trip each) and judge it."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field

import requests

from rdmaprov.engine.session import Readings, Session, read_everywhere
from rdmaprov.facts.node import NodeFacts
from rdmaprov.health.checks import report_arguments, verify_node
from rdmaprov.health.counters import counter_checks, counter_findings, sound_read, state_file
from rdmaprov.health.diagnose import Diagnosis, diagnose_in
from rdmaprov.health.findings import Finding, finding
from rdmaprov.health.fleet import fleet_findings
from rdmaprov.health.gates.result import GateResult
from rdmaprov.health.gates.runner import cluster_gate_failed, run_gates
from rdmaprov.health.state import updating
from rdmaprov.inventory.model import HostSpec, Inventory
from rdmaprov.parsers.node import NodeReport


@dataclass
class HostVerification:
    name: str
    address: str
    status: str = "ok"  # ok, failed, unreachable
    error: str | None = None
    findings: list[Finding] = field(default_factory=list)

    @property
    def failures(self) -> list[Finding]:
        return [f for f in self.findings if not f.ok]

    def to_json(self) -> dict[str, object]:
        return {
            "name": self.name,
            "address": self.address,
            "status": self.status,
            "error": self.error,
            "findings": [asdict(f) for f in self.findings],
        }


def exporter_findings(spec: HostSpec) -> list[Finding]:
    """Where the exporter is enabled: it answers /metrics from here, with RDMA port metrics in it."""
    settings = spec.node.exporter
    if not settings.enabled:
        return []
    address, _, port = settings.listen.rpartition(":")
    target = spec.address if address in ("0.0.0.0", "::", "") else address
    url = f"http://{target}:{port}/metrics"
    deadline = time.monotonic() + 30  # a service started by this apply may still be starting
    while True:
        try:
            response = requests.get(url, timeout=10)
            found = f"HTTP {response.status_code}" + (
                ", with rdma_port_state" if "rdma_port_state" in response.text else ", no rdma_port_state"
            )
            ok = response.ok and "rdma_port_state" in response.text
            break
        except requests.ConnectionError as exc:
            found, ok = f"no answer ({type(exc).__name__})", False
            if time.monotonic() > deadline:
                break
            time.sleep(2)
        except requests.RequestException as exc:
            found, ok = f"no answer ({type(exc).__name__})", False
            break
    return [
        finding(
            spec.name,
            spec.node.fabric,
            "exporter.answers",
            url,
            ok,
            "HTTP 200 with rdma_port_state",
            found,
            "run `rdmaprov apply` (exporter deploy); check `systemctl status rdmaprov-exporter` and the firewall",
        )
    ]


def _counter_findings(
    inventory: Inventory, reports: dict[str, NodeReport | Exception], readable: list[str]
) -> dict[str, list[Finding]]:
    """Each readable host's port error counters against its previous read, which this read replaces."""
    now = time.time()
    found: dict[str, list[Finding]] = {name: [] for name in inventory.hosts}
    with updating(state_file(inventory.name), "hosts") as reads:
        for name in readable:
            report = reports[name]
            if isinstance(report, NodeReport) and report.counters:
                node = inventory.hosts[name].node
                kept = reads.get(name)
                previous = kept if sound_read(kept) else None  # a damaged read: a new baseline
                found[name] = counter_findings(
                    name, node.fabric, now, report.counters, previous, report.boot_id, counter_checks(node)
                )
                reads[name] = {"at": now, "boot": report.boot_id, "ports": report.counters}
    return found


def read_reports(session: Session, dcgm_level: int = 0) -> dict[str, NodeReport | Exception]:
    """Every connected node's report; `dcgm_level`: DCGM's diagnostic at that level on GPU nodes."""
    hosts = session.inventory.hosts
    return session.fact(NodeFacts, lambda name: report_arguments(hosts[name], dcgm_level))


def read_reports_everywhere(inventory: Inventory, hosts: list[str], dcgm_level: int = 0) -> Readings[NodeReport]:
    """read_reports without keeping the connections: across processes when there are many hosts."""
    return read_everywhere(
        inventory, hosts, NodeFacts, lambda name: report_arguments(inventory.hosts[name], dcgm_level)
    )


def verify_hosts(
    session: Session | Readings[NodeReport], hosts: list[str], reports: dict[str, NodeReport | Exception] | None = None
) -> list[HostVerification]:
    """A verification per host: its findings, or why it could not be read."""
    inventory = session.inventory
    reports = (
        reports if reports is not None else session.values if isinstance(session, Readings) else read_reports(session)
    )
    # HTTP checks of all hosts at once: a silent exporter costs its retry window once, not per host.
    readable = [name for name in hosts if name not in session.unreachable and isinstance(reports.get(name), NodeReport)]
    exporters = session.each(readable, lambda name: exporter_findings(inventory.hosts[name]))
    results = []
    counters = _counter_findings(inventory, reports, readable)
    fleet = fleet_findings(
        inventory.hosts, {n: r for n, r in reports.items() if n in readable and isinstance(r, NodeReport)}
    )
    for name in hosts:
        result = HostVerification(name, inventory.hosts[name].address)
        report = reports.get(name)
        if name in session.unreachable:
            result.status, result.error = "unreachable", session.unreachable[name]
        elif isinstance(report, Exception) or report is None:
            result.status, result.error = "failed", f"could not read the node's state: {report}"
        else:
            exporter = exporters[name]
            if isinstance(exporter, Exception):
                raise exporter
            result.findings = verify_node(inventory.hosts[name], report) + exporter + counters[name] + fleet[name]
            if result.failures:
                result.status = "failed"
        results.append(result)
    return results


GatePicker = Callable[[list[HostVerification] | None], list[str]]


@dataclass
class Health:
    """What verify, the gates and (after a failed cluster gate) the diagnosis found."""

    verify: list[HostVerification] | None
    gates: list[GateResult]
    diagnosis: Diagnosis | None = None


def post_deploy(
    inventory: Inventory,
    hosts: list[str],
    gates: bool,
    verify: bool = True,
    newcomers: list[str] | None = None,
    gate_hosts: GatePicker | None = None,
    connect: list[str] | None = None,
    diagnose: bool = False,
    dcgm_level: int = 1,
) -> Health:
    """verify on `hosts` (unless verify is False), then the gates (unless gates is False) over
    `hosts`, or over the hosts `gate_hosts` picks from the verifications (none: no gates), all
    through one set of SSH connections to `connect` (default `hosts`); `newcomers` focuses the
    pairwise gate on new nodes. With `diagnose`, a failed cluster gate (ib_write_bw, all_reduce)
    is followed by the diagnosis over the gated hosts, on the same connections. Verifying runs
    DCGM's diagnostic at `dcgm_level` on GPU nodes that have DCGM."""
    level = dcgm_level if verify else 0
    if not gates:  # nothing needs the connections afterwards (no gate, so no diagnosis): read across processes
        readings = read_reports_everywhere(inventory, connect or hosts, level)
        return Health(verify_hosts(readings, hosts) if verify else None, [])
    with Session(inventory, connect or hosts) as session:
        reports = read_reports(session, level)
        verifications = verify_hosts(session, hosts, reports) if verify else None
        chosen = gate_hosts(verifications) if gate_hosts else hosts
        gate_results = run_gates(session, chosen, reports, newcomers) if gates and chosen else []
        diagnosis = None
        if diagnose and len(chosen) > 1 and cluster_gate_failed(gate_results):
            diagnosis = diagnose_in(session, chosen, reports)
    return Health(verifications, gate_results, diagnosis)
