"""Fault localization: from "the cluster is slow" to "this node is", in two rounds of pair tests.

Round 1 pairs every node with a neighbour, all pairs at once (a node left over pairs with the
first node, in a round of its own). A pair that passes clears both nodes. Round 2 tests each node
of a failing pair against a node round 1 cleared: a node that fails against a known-good peer is
a suspect, one that passes is cleared. Pairs run in rounds where no node is in two tests at once,
so the time is rounds × one test, not nodes × one test.

The pair test is every rail of the two nodes at once where they have several compute HCAs (the
rail gate's test: a slow HCA other than the first is found too), else ib_write_bw between the two
nodes' first RDMA devices (the same gate as verify's), or, where that gate is off (nodes without
RDMA, such as the container lab), the all_reduce gate over the two nodes. Then each suspect's
rails are tested against a cleared node (which HCA is slow) and the node gate runs on the
suspects (skipped where there is no GPU).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from rdmaprov.engine.session import Session
from rdmaprov.health.gates.all_reduce import run_all_reduce_pairs
from rdmaprov.health.gates.ib_write_bw import run_pairs
from rdmaprov.health.gates.node import run_node_gate
from rdmaprov.health.gates.perftest import rail_devices
from rdmaprov.health.gates.rail import run_rails
from rdmaprov.health.gates.result import GateResult
from rdmaprov.health.gates.subject import Subject
from rdmaprov.parsers.counters import ALL_COUNTER_FILES, parse_port_counters, trouble_growth
from rdmaprov.parsers.node import NodeReport

PairTest = Callable[[list[tuple[str, str]]], list[GateResult]]

# The steps of a diagnosis, in the order they run, each test tagged with its own (details["step"]):
# the JSON's tests are in order, but which round a test belongs to could not otherwise be told.
STEPS = {
    "round 1": "every node with a neighbour, all pairs at once",
    "round 2": "each node of a failing pair against a node round 1 cleared",
    "alone": "each undecided node against itself, through its own HCA",
    "again": "round 1's failing pairs again, every counter read before and after",
    "suspect rails": "each suspect's rails against a cleared node",
    "node gate": "the node gate on the suspects",
}


def neighbour_pairs(names: list[str]) -> list[tuple[str, str]]:
    """⌈N/2⌉ pairs covering every node once; an odd node out pairs with the first node."""
    pairs = [(names[i], names[i + 1]) for i in range(0, len(names) - 1, 2)]
    if len(names) % 2 and len(names) > 1:
        pairs.append((names[0], names[-1]))
    return pairs


@dataclass
class Diagnosis:
    """Who is suspect, on what evidence, and who was cleared; every test that was run."""

    suspects: dict[str, list[str]] = field(default_factory=dict)
    cleared: list[str] = field(default_factory=list)
    undecided: dict[str, str] = field(default_factory=dict)  # no known-good peer to tell
    lost: dict[str, str] = field(default_factory=dict)  # stopped answering: when, and in which step
    tests: list[GateResult] = field(default_factory=list)
    rounds: int = 0
    advice: str = ""  # what would settle the nodes left undecided

    @property
    def exit_code(self) -> int:
        return 4 if self.suspects or self.undecided or self.lost else 0

    def to_json(self) -> dict[str, object]:
        return {
            "suspects": self.suspects,
            "cleared": self.cleared,
            "undecided": self.undecided,
            "lost": self.lost,
            "advice": self.advice,
            "rounds": self.rounds,
            "tests": [t.to_json() for t in self.tests],
        }


def in_step(step: str, results: list[GateResult]) -> list[GateResult]:
    """`results`, each tagged with the step of the diagnosis that ran it (one of STEPS)."""
    for result in results:
        result.details["step"] = step
    return results


def _evidence(result: GateResult) -> str:
    return f"{result.subject}: {result.reason}"


def _note_lost(diagnosis: Diagnosis, results: list[GateResult]) -> None:
    """A node that stopped answering during a pair test is lost, not suspect: its test said
    nothing about its peer either, which stays to be tested against another node."""
    for result in results:
        host = result.details.get("lost")
        if isinstance(host, str) and host and host not in diagnosis.lost:
            diagnosis.lost[host] = result.reason.removeprefix("not judged: ")


def localize(names: list[str], test: PairTest) -> Diagnosis:
    """Run the two rounds with `test` (which runs a list of pairs, at once where it can) and
    name the suspects."""
    diagnosis = Diagnosis()
    first = in_step("round 1", test(neighbour_pairs(names)))
    diagnosis.tests += first
    diagnosis.rounds = 1
    _note_lost(diagnosis, first)
    good = [n for n in names if n not in diagnosis.lost and any(r.passed and n in _pair(r) for r in first)]
    doubtful = [n for n in names if n not in good and n not in diagnosis.lost]
    if not doubtful:
        diagnosis.cleared = list(good)
        return diagnosis
    if not good:
        for name in doubtful:
            failures = [_evidence(r) for r in first if name in _pair(r)]
            diagnosis.undecided[name] = "no node passed round 1, so none can vouch for a peer: " + "; ".join(failures)
        return diagnosis
    # Round 2: each doubtful node against a different known-good node where there are enough.
    retest = [(good[i % len(good)], name) for i, name in enumerate(doubtful)]
    second = in_step("round 2", test(retest))
    diagnosis.tests += second
    diagnosis.rounds = 2
    _note_lost(diagnosis, second)
    by_node = {_pair(r)[1]: r for r in second}
    for name in doubtful:
        result = by_node.get(name)
        if name in diagnosis.lost:
            continue
        if result is not None and result.passed:
            good.append(name)
        elif result is not None and result.details.get("lost"):
            diagnosis.undecided[name] = f"its known-good peer was lost during the test: {_evidence(result)}"
        else:
            evidence = [_evidence(r) for r in first + second if name in _pair(r) and not r.passed]
            diagnosis.suspects[name] = evidence
    diagnosis.cleared = [n for n in names if n in good and n not in diagnosis.lost]
    return diagnosis


def _pair(result: GateResult) -> tuple[str, str]:
    """(server, client) of a pair test (an all_reduce over a pair too: its two nodes)."""
    hosts = result.hosts
    return (hosts[0], hosts[-1]) if hosts else ("", "")


def pair_test(session: Session, reports: dict[str, NodeReport]) -> PairTest:
    """Every rail of the pair where nodes have several compute HCAs and the rail gate is on (one
    slow HCA of eight is the fault to find, and the quick pair gate tests the first only); else
    ib_write_bw between the pair where that gate is on; else an all_reduce over the two nodes
    (nccl-tests on GPU nodes, the CPU probe elsewhere)."""
    gates, hosts = session.inventory.gates, session.inventory.hosts
    if gates.rail.enabled and any(len(rail_devices(hosts[n].node, r)) > 1 for n, r in reports.items()):
        return lambda pairs: pair_verdicts(pairs, run_rails(session, pairs, reports))
    if gates.ib_write_bw.enabled:
        return lambda pairs: run_pairs(session, pairs, reports)
    return lambda pairs: run_all_reduce_pairs(session, pairs, reports)


def pair_verdicts(pairs: list[tuple[str, str]], rails: list[GateResult]) -> list[GateResult]:
    """One verdict per pair from its rails: passed only when every rail passed, the failing rails
    as the reason, every rail's result kept in the details (a lost node stays named)."""
    verdicts = []
    for server, client in pairs:
        mine = [r for r in rails if _pair(r) == (server, client)]
        failing = [r for r in mine if not r.passed]
        reason = "; ".join(_evidence(r) for r in failing) or (
            f"all {len(mine)} rails pass" if mine else "no rail of the pair was tested"
        )
        details: dict[str, object] = {"rails": [r.to_json() for r in mine]}
        lost = next((r.details["lost"] for r in mine if r.details.get("lost")), None)
        if lost:
            details["lost"] = lost
        verdicts.append(
            GateResult("rail", Subject.pair(server, client), bool(mine) and not failing, reason, details=details)
        )
    return verdicts


def rail_evidence(suspect: str, rails: list[GateResult]) -> list[str]:
    """What a suspect's rails against a cleared node say: each failing HCA with its figure, and
    how the others fared."""
    mine = [r for r in rails if suspect in r.hosts]
    failing = [f"{r.subject}: {r.reason}" for r in mine if not r.passed]
    passed = [r for r in mine if r.passed and r.measured is not None]
    if failing and passed:
        lowest = min(passed, key=lambda r: r.measured or 0.0)
        failing.append(f"every other rail of {suspect} >= {lowest.measured:.4g} {lowest.unit}")
    return failing


UNDECIDABLE = (
    "nodes that pass alone but fail together cannot tell which end of their link is at fault "
    "(a cable, a switch port, one end's port): rerun `rdmaprov diagnose` with a third node known to "
    "be good (--limit {names},GOOD), or move the pair to another cable or switch port and test again"
)


def _read_counters(session: Session, names: list[str]) -> dict[str, dict[str, dict[str, int]]]:
    """Every counter of every port of each node that answered."""
    command = f"grep -H . {ALL_COUNTER_FILES} 2>/dev/null"
    read = session.each(names, lambda name: parse_port_counters(session.run(name, command).stdout.splitlines()))
    return {name: ports for name, ports in read.items() if isinstance(ports, dict)}


def _decide_alone(session: Session, diagnosis: Diagnosis, readable: dict[str, NodeReport]) -> None:
    """No node passed round 1, so none could vouch for a peer (always so with two nodes). What
    decides without one: each undecided node against itself (ib_write_bw looping back through its
    own HCA) shows a node slow on its own; round 1's failing pairs run again between two reads of
    every counter show which end retried, dropped or erred. What stays undecided gets the advice
    that would settle it."""
    names = [n for n in diagnosis.undecided if n in readable and n not in diagnosis.lost]
    if not names or not session.inventory.gates.ib_write_bw.enabled:
        diagnosis.advice = UNDECIDABLE.format(names=",".join(diagnosis.undecided))
        return
    failed = [_pair(r) for r in diagnosis.tests if not r.passed and not r.details.get("lost")]
    pairs = list(dict.fromkeys(p for p in failed if set(p) <= set(names)))
    alone = {_pair(r)[0]: r for r in in_step("alone", run_pairs(session, [(n, n) for n in names], readable))}
    before = _read_counters(session, names)
    again = in_step("again", run_pairs(session, pairs, readable))
    after = _read_counters(session, names)
    diagnosis.tests += list(alone.values()) + again
    slow_alone = [n for n in names if n in alone and not alone[n].passed]
    for name in names:
        grown = trouble_growth(before[name], after[name]) if name in before and name in after else None
        counters = (
            "its counters could not be read"
            if grown is None
            else f"during the pair test again its counters grew: {', '.join(grown)}"
            if grown
            else "during the pair test again no error, retry or drop counter of its grew"
        )
        result = alone.get(name)
        if result is None:
            continue
        if not result.passed:
            evidence = diagnosis.undecided.pop(name)
            diagnosis.suspects[name] = [evidence, f"alone, through its own HCA: {_evidence(result)}", counters]
        elif slow_alone:  # its peer is slow on its own: that explains their pair
            diagnosis.undecided.pop(name)
            diagnosis.cleared.append(name)
        else:
            diagnosis.undecided[name] += f". Alone, through its own HCA, it passed ({result.reason}); {counters}"
    if diagnosis.undecided:
        diagnosis.advice = UNDECIDABLE.format(names=",".join(diagnosis.undecided))


def diagnose_in(session: Session, hosts: list[str], reports: dict[str, NodeReport | Exception]) -> Diagnosis:
    """The whole diagnosis over connections already open: pair rounds, then the suspects' rails
    against cleared nodes and the node gate on the suspects. An unreachable or unreadable node is
    a suspect on that evidence alone."""
    with session.during("the diagnosis"):
        return _diagnose(session, hosts, reports)


def _diagnose(session: Session, hosts: list[str], reports: dict[str, NodeReport | Exception]) -> Diagnosis:
    """diagnose_in's work; a node already lost (in a gate before) is named lost, not tested."""
    readable = {name: r for name, r in reports.items() if isinstance(r, NodeReport)}
    names = [name for name in hosts if name in readable and name not in session.lost]
    diagnosis = localize(names, pair_test(session, readable))
    for name in hosts:
        if name not in readable:
            why = session.unreachable.get(name) or f"could not read the node's state: {reports.get(name)}"
            diagnosis.suspects[name] = [f"{name} is unreachable or unreadable: {why}"]
    if diagnosis.undecided and not diagnosis.cleared:
        _decide_alone(session, diagnosis, readable)
    suspects = [name for name in hosts if name in diagnosis.suspects and name in readable]
    cleared = diagnosis.cleared
    if suspects and cleared and session.inventory.gates.rail.enabled:
        pairs = [(cleared[i % len(cleared)], s) for i, s in enumerate(suspects)]
        rails = in_step("suspect rails", run_rails(session, pairs, readable))
        diagnosis.tests += rails
        for suspect in suspects:
            diagnosis.suspects[suspect] += rail_evidence(suspect, rails)
    if suspects:
        diagnosis.tests += in_step("node gate", run_node_gate(session, suspects, readable))
    for name, lost in session.lost.items():  # before the diagnosis, or during its last steps
        if name in hosts:
            diagnosis.lost.setdefault(name, str(lost))
            diagnosis.suspects.pop(name, None)
            diagnosis.undecided.pop(name, None)
            if name in diagnosis.cleared:
                diagnosis.cleared.remove(name)
    return diagnosis
