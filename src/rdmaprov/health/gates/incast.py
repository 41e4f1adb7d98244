"""Gate: incast. Several nodes write to one at once, so that the receiver's switch port is
congested on purpose, as an all-to-all or a reduce-scatter congests it in training. Whether the
lossless chain holds shows only then: the switch pauses the senders on the RoCE priority (and on
no other), or marks ECN and the receiver answers with CNPs that the senders act on; nothing is
lost. Every node's counters are read just before and just after the traffic and judged as the
periodic checks judge them (health/counters.py: ECN marks no CNP answered among them), plus what
only congestion shows: a lost packet on a lossless fabric, CNPs no sender handled. The senders' figures
added up are held to the receiver's port rate.

The nodes are split into groups of `senders` + 1 and each node of a group is the receiver once,
the groups at once: `senders` + 1 rounds (a few more where the selection does not split evenly)
however large the cluster. With newcomers (bootstrap) only each newcomer receives, from nodes
already there. One HCA each: the receiver's first compute HCA, as the ib_write_bw gate tests.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, replace

from rdmaprov.engine.session import Session
from rdmaprov.health.counters import CounterRead, counter_findings, window_checks
from rdmaprov.health.gates.bandwidth import Bounds, Reference, Verdict, failed, judge
from rdmaprov.health.gates.ib_write_bw import bandwidth_tool, pair_bounds
from rdmaprov.health.gates.pairs import run_in_rounds
from rdmaprov.health.gates.perftest import (
    Lane,
    LaneOutput,
    endpoint,
    last_lines,
    no_result,
    nodes_problem,
    rail_devices,
    run_lanes,
)
from rdmaprov.health.gates.result import GateResult
from rdmaprov.health.gates.subject import Subject
from rdmaprov.inventory.config import NodeConfig
from rdmaprov.parsers.counters import ALL_COUNTER_FILES, CONGESTION_COUNTERS, loss_growth, parse_port_counters
from rdmaprov.parsers.node import NodeReport
from rdmaprov.parsers.perftest import parse_bw_output
from rdmaprov.parsers.roce_qos import PAUSE_WORDS, parse_qos_state
from rdmaprov.quoting import sh, sh_join

GATE = "incast"
INCAST_BASE_PORT = 18800
Test = tuple[str, ...]  # (receiver, *senders)
Ports = dict[str, dict[str, int]]  # {"mlx5_0/1" or a NIC netdev: {counter: value}}
Problem = tuple[tuple[str, ...], str]  # the nodes it names, and what it says
# A sender under this share of an even split of what the senders moved was starved: PFC and
# DCQCN share a congested port about evenly among its flows; a victim flow gets next to nothing.
STARVED_SHARE = 0.1


def incast_groups(hosts: list[str], senders: int) -> list[list[str]]:
    """The hosts in order, split into as many groups of at least `senders` + 1 as they fill, the
    ones left over shared among them; a single group of all where they fill none (at least 3)."""
    if len(hosts) < 3:
        return []
    count = max(1, len(hosts) // (senders + 1))
    size, extra = divmod(len(hosts), count)
    groups, start = [], 0
    for index in range(count):
        end = start + size + (1 if index < extra else 0)
        groups.append(hosts[start:end])
        start = end
    return groups


def incast_tests(hosts: list[str], senders: int, newcomers: list[str] | None = None) -> list[Test]:
    """(receiver, *senders) for every test: each node of a group receives from the rest of it;
    with newcomers, each newcomer receives from `senders` nodes already there, taken in turn
    (fewer than two there: the groups of all, newcomers among them)."""
    existing = [h for h in hosts if h not in (newcomers or ())]
    if newcomers and len(existing) >= 2:
        count = min(senders, len(existing))
        return [
            (new, *(existing[(i * count + j) % len(existing)] for j in range(count))) for i, new in enumerate(newcomers)
        ]
    return [
        (receiver, *(h for h in group if h != receiver))
        for group in incast_groups(hosts, senders)
        for receiver in group
    ]


def counters_command(netdevs: Sequence[str]) -> str:
    """Every counter of every RDMA port, then the pause counters of these NIC netdevs in the form
    the node report's roce_qos section prints them (`ethtool NETDEV LINE`)."""
    command = f"grep -H . {ALL_COUNTER_FILES} 2>/dev/null; "
    if netdevs:
        command += (
            f'for e in {sh_join(netdevs)}; do ethtool -S "$e" 2>/dev/null | grep -E {sh(PAUSE_WORDS)} | '
            'while IFS= read -r l; do printf \'ethtool %s %s\\n\' "$e" "$l"; done; done; '
        )
    return command + "true"


def parse_counters(text: str) -> Ports:
    """What counters_command printed: the RDMA ports' counters and the NICs' pause counters."""
    lines = text.splitlines()
    return (
        parse_port_counters(lines)
        | parse_qos_state("\n".join(line for line in lines if line.startswith("ethtool "))).pause
    )


def _read(session: Session, watched: dict[str, tuple[str, ...]]) -> tuple[float, dict[str, Ports]]:
    """When, and each node's counters of what the test used (those that answered): {node: its
    tested port ("mlx5_0/1") first, then that HCA's NIC netdevs}. Other HCAs' traffic (storage,
    other jobs) is not the test's."""

    def one(name: str) -> Ports:
        port, *netdevs = watched[name]
        ports = parse_counters(session.run(name, counters_command(netdevs)).stdout)
        return {key: counters for key, counters in ports.items() if key in watched[name]}

    at = time.time()
    read = session.each(list(watched), one)
    return at, {name: ports for name, ports in read.items() if isinstance(ports, dict)}


def lossless(node: NodeConfig) -> bool:
    """Whether the fabric drops nothing under congestion: InfiniBand's credits, or RoCE whose hosts
    set PFC (roce_qos declared on NICs with DCB)."""
    qos = node.qos
    return node.fabric == "infiniband" or (qos is not None and qos.dcb_scope(node.fabric) is None)


@dataclass(frozen=True)
class Around:
    """Every node's counters just before and just after the traffic, and when each was read."""

    before_at: float
    before: dict[str, Ports]
    after_at: float
    after: dict[str, Ports]

    def grown(self, host: str, counter: str) -> int | None:
        """How much a counter grew on a node's ports; None where no port has it in both reads."""
        before, after = self.before.get(host, {}), self.after.get(host, {})
        both = [
            (before[p][counter], c[counter]) for p, c in after.items() if counter in c and counter in before.get(p, {})
        ]
        return sum(max(0, new - old) for old, new in both) if both else None

    def lost(self, host: str) -> list[str]:
        """The node's counters of lost packets that grew (parsers/counters.loss_growth); none where
        it was not read both times."""
        if host not in self.before or host not in self.after:
            return []
        return loss_growth(self.before[host], self.after[host])


def counter_problems(session: Session, receiver: str, senders: Sequence[str], around: Around) -> list[Problem]:
    """What the counters say went wrong on each node, naming it: the periodic checks' limits over
    the test's window, a lost packet on a lossless fabric, ECN marks or CNPs not answered."""
    problems: list[Problem] = []
    for host in (receiver, *senders):
        node = session.inventory.hosts[host].node
        if host not in around.before or host not in around.after:
            problems.append(((host,), f"{host}: its counters could not be read"))
            continue
        previous: CounterRead = {"at": around.before_at, "ports": around.before[host]}
        for found in counter_findings(
            host, node.fabric, around.after_at, around.after[host], previous, checks=window_checks(node)
        ):
            if not found.ok:
                problems.append(((host,), f"{host} {found.subject}: {found.found} ({found.id})"))
        lost = around.lost(host)
        if lost and lossless(node):
            problems.append(((host,), f"{host}: packets lost on a lossless fabric: {', '.join(lost)}"))
    qos = session.inventory.hosts[receiver].node.qos
    if qos is not None and qos.ecn and qos.dcb_scope(session.inventory.hosts[receiver].node.fabric) is None:
        # marks with no CNP, and CNPs a node ignored, are counter_findings' (roce.dcqcn); what needs
        # both ends of the incast is here
        sent = around.grown(receiver, "np_cnp_sent")
        handled = {s: n for s in senders if (n := around.grown(s, "rp_cnp_handled")) is not None}
        if sent and handled and not any(handled.values()):
            why = (
                f"{receiver} sent {sent} CNPs but no sender handled one: DCQCN's reaction point is off on "
                f"{', '.join(handled)} (roce_rp/enable/{qos.priority}), or the CNPs were lost (their priority "
                f"{qos.cnp_priority} must not be dropped)"
            )
            problems.append((tuple(handled), why))
    return problems


def congestion(receiver: str, senders: Sequence[str], around: Around, priority: int | None) -> dict[str, object]:
    """The congestion the test made, for the details: pause frames on the RoCE priority, ECN marks
    and CNPs, and counters of lost packets, per node where any grew."""
    figures: dict[str, object] = {}
    for host in (receiver, *senders):
        names = list(CONGESTION_COUNTERS)
        if priority is not None:
            names += [f"rx_pfc_prio{priority}", f"tx_pfc_prio{priority}"]
        mine: dict[str, object] = {name: grown for name in names if (grown := around.grown(host, name))}
        if lost := around.lost(host):
            mine["lost"] = lost
        if mine:
            figures[host] = mine
    return figures


def _figures(outputs: list[LaneOutput]) -> tuple[dict[str, float], list[Problem]]:
    """Each sender's Gb/s, and why a sender gave none, broke or got nothing through. Where none
    got anything through the receiver is the likelier fault (its HCA, its GID): it is named, with
    what its servers said. A sender under a tenth of an even share beside others that got through
    is named: the sum may pass, but a flow starved under congestion is what the gate looks for."""
    figures: dict[str, float] = {}
    missing: list[Problem] = []
    for output in outputs:
        sender = output.lane.client.host
        try:
            parsed, why = parse_bw_output(output.client), ""
        except ValueError as exc:
            parsed, why = None, str(exc)
        if parsed is None:
            missing.append(((sender,), no_result("ib_write_bw", output, why)))
            continue
        figures[sender] = parsed.average_gbps
        if output.client_status not in (0, None):
            missing.append(((sender,), f"ib_write_bw on {sender} exited {output.client_status}"))
    if not outputs:
        return figures, missing
    receiver = outputs[0].lane.server.host
    through = [sender for sender, gbps in figures.items() if gbps > 0]
    if not through:
        said = " | ".join(last_lines(outputs[0].server)) or "nothing"
        missing.insert(0, ((receiver,), f"no sender got through to {receiver} (its first server said: {said})"))
        return figures, missing
    even = sum(figures.values()) / len(figures)
    for sender, gbps in figures.items():
        if gbps >= STARVED_SHARE * even:
            continue
        got = (
            f"{sender} got nothing through to {receiver} in its window (0 Gb/s)"
            if gbps <= 0
            else f"{sender} got {gbps:g} Gb/s through to {receiver}, under a tenth of an even share ({even:.4g} Gb/s)"
        )
        others = ", ".join(s for s in through if s != sender)
        missing.append(((sender,), f"{got} while {others} did: starved by the others' traffic, or its path stalled"))
    return figures, missing


def incast_bounds(session: Session) -> Bounds:
    """The pair gate's bounds on the incast's own settings; a sum over max_fraction has its own why."""
    return replace(
        pair_bounds(session.inventory.gates.incast),
        too_high="the senders did not run at once, or the declared rate is wrong",
    )


def incast_reference(lanes: list[Lane]) -> Reference | None:
    """What the incast can carry: the receiver's port rate, or the senders' rates added up where
    they are less (three 100G senders cannot fill a 400G port); None where a rate is unknown."""
    receiver = lanes[0].server
    if not receiver.rate_gbps:
        return None
    own = Reference(
        receiver.rate_gbps,
        f"{receiver.device} on {receiver.host} at {receiver.rate_gbps:g} Gb/s",
        "the receiver's port rate",
    )
    rates = [lane.client.rate_gbps for lane in lanes]
    if not all(rates) or sum(r or 0 for r in rates) >= receiver.rate_gbps:
        return own
    shown = " + ".join(f"{lane.client.host} {lane.client.rate_gbps:g}" for lane in lanes)
    return Reference(sum(r or 0 for r in rates), f"{shown} Gb/s", "the senders' port rates")


def judge_incast(
    session: Session, lanes: list[Lane], outputs: list[LaneOutput], around: Around
) -> tuple[Verdict, dict[str, object]]:
    """The senders' sum against the receiver's port rate, failed by what the counters say."""
    receiver, senders = lanes[0].server, [lane.client.host for lane in lanes]
    figures, missing = _figures(outputs)
    reference = incast_reference(lanes)
    total = round(sum(figures.values()), 4)
    bounds = incast_bounds(session)
    verdict = judge(total, "Gb/s", bounds, reference) if figures else failed("no sender gave a figure", "Gb/s")
    problems = missing + counter_problems(session, receiver.host, senders, around)
    if problems:
        said = "; ".join(text for _, text in problems)
        verdict = replace(verdict, status="fail", reason=f"{said} (senders {total:.4g} Gb/s: {verdict.reason})")
    qos = session.inventory.hosts[receiver.host].node.qos
    details: dict[str, object] = {
        # the nodes the failure names (the report counts a failure against these, not the group)
        "named": list(dict.fromkeys(host for hosts, _ in problems for host in hosts)),
        "receiver_device": receiver.device,
        "senders": {host: figures.get(host) for host in senders},
        "traffic_class": receiver.tclass,
        "window_s": round(around.after_at - around.before_at, 3),
        "congestion": congestion(receiver.host, senders, around, qos.priority if qos else None),
    }
    return verdict, details


def _problem(session: Session, names: Sequence[str], reports: dict[str, NodeReport]) -> str:
    """Why a test cannot run ("" when it can)."""
    if problem := nodes_problem(session, names, reports):
        return problem
    for name in names:
        if not rail_devices(session.inventory.hosts[name].node, reports[name]):
            return f"{name}: no compute HCA to test: declare rdma.devices"
    return ""


def run_incast(session: Session, test: Test, reports: dict[str, NodeReport]) -> GateResult:
    """One receiver, its senders at once, the counters of all of them around it."""
    receiver, *senders = test
    subject = Subject.incast(senders, receiver)
    problem = _problem(session, test, reports)
    if problem:
        return GateResult(GATE, subject, False, problem)
    ends = {}
    for name in test:
        node = session.inventory.hosts[name].node
        ends[name] = endpoint(name, node, reports[name], rail_devices(node, reports[name])[0])
    lanes = [Lane(i, ends[receiver], ends[s], INCAST_BASE_PORT + i) for i, s in enumerate(senders)]
    watched = {
        name: (f"{end.device}/{end.port}", *reports[name].roce_qos.netdevs.get(end.device, ()))
        for name, end in ends.items()
    }
    before_at, before = _read(session, watched)
    outputs = run_lanes(session, bandwidth_tool(session.inventory.gates.incast, "incast"), lanes)
    after_at, after = _read(session, watched)
    if isinstance(outputs, str):  # the receiver's servers never listened
        return GateResult(GATE, subject, False, outputs, details={"named": [receiver]})
    verdict, details = judge_incast(session, lanes, outputs, Around(before_at, before, after_at, after))
    return GateResult.of(GATE, subject, verdict, details={"via": outputs[0].via, **details})


def run_incast_gate(
    session: Session, hosts: list[str], reports: dict[str, NodeReport], newcomers: list[str] | None = None
) -> list[GateResult]:
    """Every test, those sharing no node at once; fewer than 3 nodes: one skipped result saying so
    (a bootstrap of one newcomer beside one node already there is such a case)."""
    tests = incast_tests(hosts, session.inventory.gates.incast.senders, newcomers)
    if not tests:
        why = f"skipped: an incast needs at least 3 nodes ({len(hosts)} selected)"
        return [GateResult(GATE, Subject.job(hosts), True, why, status="skipped")]
    return run_in_rounds(
        GATE, tests, lambda *test: [run_incast(session, test, reports)], lambda t: Subject.incast(list(t[1:]), t[0])
    )
