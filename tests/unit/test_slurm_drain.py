"""Drain etiquette as a pure function: every combination of a node's Slurm state, who drained it
and what the check found; the share limit; and the race bound, checked over every interleaving of
nodes that decide at once."""

from __future__ import annotations

from dataclasses import dataclass, replace

import pytest

from rdmaprov.parsers.slurm import HANDS_OFF, STARTING, SlurmNode
from rdmaprov.slurm.drain import (
    Action,
    CheckOutcome,
    DrainLimits,
    decide,
    drain_reason,
    excess_drains,
)

OURS = "rdmaprov: rdma.device_present rxe0: missing"
ADMIN = "bad DIMM, ticket 4711"
LIMITS = DrainLimits(drain=True, max_fraction=0.5)


def _node(name: str, *states: str, reason: str = "", at: str = "", partitions=("main",)) -> SlurmNode:
    return SlurmNode(name, frozenset(states or ("IDLE",)), tuple(partitions), reason, at)


def _failing(name: str, *failures: str) -> CheckOutcome:
    return CheckOutcome(name, False, failures or ("rdma.device_present rxe0: missing",))


def _healthy(name: str) -> CheckOutcome:
    return CheckOutcome(name, True)


# Every way one node can look to Slurm, with what rdmaprov may do with it: (states, reason, owner)
# where owner is "none" (not drained), "ours", "admin" or "slurm" (a state Slurm manages).
SHAPES = [
    (("IDLE",), "", "none"),
    (("ALLOCATED",), "", "none"),
    (("MIXED",), "", "none"),
    (("IDLE", "DRAIN"), OURS, "ours"),
    (("ALLOCATED", "DRAIN"), OURS, "ours"),  # draining: jobs still run, no new ones start
    (("MIXED", "DRAIN"), OURS, "ours"),
    (("IDLE", "DRAIN"), ADMIN, "admin"),
    (("ALLOCATED", "DRAIN"), ADMIN, "admin"),
    (("IDLE", "DRAIN"), "", "admin"),  # drained with no reason: not ours either
    (("IDLE", "DRAIN"), "RDMAPROV: typed by hand", "admin"),  # the prefix is exact
    (("IDLE", "DRAIN"), "maintenance; rdmaprov: later", "admin"),
    *[((state,), "Not responding", "slurm") for state in sorted(HANDS_OFF - STARTING)],
    # slurmd starting (first start; after a restart): drained when it fails, never resumed
    (("UNKNOWN",), "", "starting"),
    (("IDLE", "NOT_RESPONDING"), "", "starting"),
    (("UNKNOWN", "NOT_RESPONDING"), "", "starting"),
    (("DOWN", "DRAIN"), OURS, "slurm"),  # down wins even over our own drain
    (("DOWN", "NOT_RESPONDING"), "", "slurm"),  # down and not responding: Slurm's
    (("IDLE", "DRAIN", "NOT_RESPONDING"), OURS, "ours-starting"),  # still fails: stays drained
    (("IDLE", "DRAIN", "NOT_RESPONDING"), ADMIN, "admin"),
    (("IDLE", "POWERED_DOWN"), "", "slurm"),
    (("IDLE", "REBOOT_REQUESTED"), "", "slurm"),
]


@pytest.mark.parametrize("states, reason, owner", SHAPES, ids=lambda v: str(v))
@pytest.mark.parametrize("verdict", ["healthy", "failing", "inconclusive"])
def test_every_state_reason_and_verdict_of_one_node(states, reason, owner, verdict):
    node = _node("n1", *states, reason=reason, at="2026-01-01T00:00:00")
    outcome = {
        "healthy": _healthy("n1"),
        "failing": _failing("n1"),
        "inconclusive": CheckOutcome("n1", False, ("node-check.report n1: did not finish",), conclusive=False),
    }[verdict]
    actions = decide([node, _node("n2")], [outcome], LIMITS)
    kinds = [a.kind for a in actions]
    if verdict == "inconclusive" or owner in ("slurm", "admin"):
        assert kinds == ["report"]  # never touched, whatever the check says
        assert "left" in actions[0].why
    elif owner == "starting":
        assert kinds == (["drain"] if verdict == "failing" else ["report"]), actions  # never resumed
    elif owner == "ours-starting":
        assert kinds == ["report"] and ("stays drained" in actions[0].why or "left alone" in actions[0].why)
    elif owner == "ours":
        assert kinds == (["resume"] if verdict == "healthy" else ["report"])
    elif verdict == "failing":
        assert kinds == ["drain"] and actions[0].why == "rdmaprov: rdma.device_present rxe0: missing"
    else:
        assert actions == []  # healthy and in service: nothing to say


def test_the_commands_are_scontrols_own_and_one_argument_each():
    drain = Action("gpu-001", "drain", "rdmaprov: gpu.xid kernel log: Xid 79 on 0000:3b:00.0")
    assert drain.command() == [
        "scontrol",
        "update",
        "nodename=gpu-001",
        "state=drain",
        "reason=rdmaprov: gpu.xid kernel log: Xid 79 on 0000:3b:00.0",
    ]
    assert Action("gpu-001", "resume", "passes").command() == ["scontrol", "update", "nodename=gpu-001", "state=resume"]
    assert Action("gpu-001", "report", "is DOWN").command() is None


def test_the_drain_reason_is_one_printable_line_naming_the_first_failure():
    assert drain_reason(
        ["nccl.library nccl: /usr/lib/libnccl.so.2 → /usr/lib/libnccl.so.2.18.3", "gpu.count gpus: 7"]
    ) == ("rdmaprov: nccl.library nccl: /usr/lib/libnccl.so.2 -> /usr/lib/libnccl.so.2.18.3 (+1 more)")
    long = drain_reason(["rdma.port_errors mlx5_0/1: " + "symbol_error +999; " * 30])
    assert len(long) == 160 and long.endswith("...") and long.startswith("rdmaprov: rdma.port_errors mlx5_0/1: ")
    assert drain_reason(["x\tsubject: \u00e9t\u00e9\nnext"]) == "rdmaprov: x?subject: ?t??next"


def test_never_more_than_the_share_of_a_partition_the_rest_is_reported():
    nodes = [_node(f"n{i}") for i in range(1, 5)]  # 4 nodes, 50 %: two may be drained
    actions = decide(nodes, [_failing(f"n{i}") for i in range(1, 5)], LIMITS)
    assert [a.kind for a in actions] == ["drain", "drain", "report", "report"]
    assert actions[2].why == "fails, not drained: partition main has 2 of 4 nodes drained by rdmaprov (at most 2)"


def test_drains_already_held_count_and_a_resume_frees_its_place():
    nodes = [_node("n1", "IDLE", "DRAIN", reason=OURS), _node("n2"), _node("n3"), _node("n4")]
    assert [a.kind for a in decide(nodes, [_failing("n2"), _failing("n3")], LIMITS)] == ["drain", "report"]
    # n1 passes again in the same decision: resumed first, so two new drains fit
    both = decide(nodes, [_failing("n2"), _failing("n3"), _healthy("n1")], LIMITS)
    assert [(a.node, a.kind) for a in both] == [("n2", "drain"), ("n3", "drain"), ("n1", "resume")]


def test_an_admins_drain_does_not_use_up_rdmaprovs_share():
    nodes = [_node("n1", "IDLE", "DRAIN", reason=ADMIN), _node("n2")]
    assert [a.kind for a in decide(nodes, [_failing("n2")], LIMITS)] == ["drain"]


def test_at_least_one_node_may_be_drained_however_small_the_share():
    nodes = [_node(f"n{i}") for i in range(1, 4)]
    small = DrainLimits(drain=True, max_fraction=0.1)
    assert [a.kind for a in decide(nodes, [_failing("n1"), _failing("n2")], small)] == ["drain", "report"]
    assert [small.allowed(n) for n in (1, 9, 10, 19, 20, 2000)] == [1, 1, 1, 1, 2, 200]
    assert DrainLimits(True, 0.3).allowed(10) == 3  # 0.3 × 10 is 3, not 2.999…


def test_a_node_in_two_partitions_needs_room_in_both():
    nodes = [
        _node("a1", partitions=("gpu", "debug")),
        _node("a2", "IDLE", "DRAIN", reason=OURS, partitions=("debug",)),
        _node("a3", partitions=("gpu",)),
        _node("a4", partitions=("gpu",)),
    ]
    [action] = decide(nodes, [_failing("a1")], LIMITS)
    assert action.kind == "report" and "debug has 1 of 2 nodes drained by rdmaprov (at most 1)" in action.why


def test_report_only_when_draining_is_off_and_unknown_nodes_are_named():
    off = DrainLimits(drain=False, max_fraction=1.0)
    [report] = decide([_node("n1")], [_failing("n1")], off)
    assert (report.kind, report.why) == ("report", "fails; draining is off (slurm.health_check.drain)")
    # a node drained by rdmaprov earlier is still resumed when it passes
    assert decide([_node("n1", "IDLE", "DRAIN", reason=OURS)], [_healthy("n1")], off)[0].kind == "resume"
    [unknown] = decide([_node("n1")], [_failing("ghost")], LIMITS)
    assert str(unknown) == "slurm: ghost is not a node of this Slurm cluster: left alone"


def test_excess_drains_undoes_only_the_later_drain():
    first = _node("n1", "IDLE", "DRAIN", reason=OURS, at="2026-01-01T10:00:00")
    second = _node("n2", "IDLE", "DRAIN", reason=OURS, at="2026-01-01T10:00:05")
    nodes = [first, second, _node("n3"), _node("n4"), _node("n5")]  # 5 nodes × 0.5: at most 2
    assert excess_drains(nodes, "n2", LIMITS) == []
    tight = DrainLimits(True, 0.2)  # at most 1
    assert excess_drains(nodes, "n1", tight) == []
    assert excess_drains(nodes, "n2", tight) == ["main: 2 drained by rdmaprov at once (n1, n2), at most 1"]
    # drained in the same second: neither can tell who was first, both undo
    tie = replace(second, reason_time=first.reason_time)
    assert excess_drains([first, tie, *nodes[2:]], "n1", tight) and excess_drains([first, tie, *nodes[2:]], "n2", tight)
    # an admin's drain is not rdmaprov's to undo
    assert excess_drains([replace(first, reason=ADMIN), second, *nodes[2:]], "n2", tight) == []
    # a stamp that could not be read (another time format): the drain counts as the earlier one
    unread = replace(first, reason_time="")
    assert excess_drains([unread, second, *nodes[2:]], "n2", tight)
    assert excess_drains([first, replace(second, reason_time=""), *nodes[2:]], "n2", tight)


@dataclass(frozen=True)
class _World:
    """slurmctld's node table as the etiquette sees it, and its clock (seconds): a reason is stamped
    with the second it was committed in."""

    nodes: tuple[SlurmNode, ...]
    second: int = 0

    def commit(self, action: Action, tick: int) -> _World:
        second = self.second + tick
        nodes = []
        for node in self.nodes:
            if node.name == action.node and action.kind == "drain":
                node = replace(
                    node, states=frozenset({"IDLE", "DRAIN"}), reason=action.why, reason_time=f"{second:08d}"
                )
            elif node.name == action.node and action.kind == "resume":
                node = replace(node, states=frozenset({"IDLE"}), reason="", reason_time="")
            nodes.append(node)
        return _World(tuple(nodes), second)


@dataclass(frozen=True)
class _Check:
    """One failing node's HealthCheckProgram as a state machine: read; decide and drain; read
    again; undo when over the limit. `seen` is what its first read saw."""

    name: str
    step: int = 0
    seen: tuple[SlurmNode, ...] = ()
    undo: bool = False

    @property
    def done(self) -> bool:
        return self.step == 4

    def run(self, world: _World, limits: DrainLimits, tick: int) -> tuple[_Check, _World]:
        """One step; a commit (drain or undo) happens in `world`'s second plus `tick`."""
        if self.step == 0:
            return replace(self, step=1, seen=world.nodes), world
        if self.step == 1:
            [action] = decide(list(self.seen), [_failing(self.name)], limits)
            if action.kind != "drain":
                return replace(self, step=4), world
            return replace(self, step=2), world.commit(action, tick)
        if self.step == 2:
            return replace(self, step=3, undo=bool(excess_drains(list(world.nodes), self.name, limits))), world
        if self.undo:
            return replace(self, step=4), world.commit(Action(self.name, "resume", "undone"), tick)
        return replace(self, step=4), world


def _final_states(checks: tuple[_Check, ...], world: _World, limits: DrainLimits, seen: set) -> set[int]:
    """How many nodes rdmaprov holds drained at the end, over every order of the checks' steps and
    every choice of slurmctld's clock ticking (or not) before each commit."""
    key = (checks, world)
    if key in seen:
        return set()
    seen.add(key)
    if all(c.done for c in checks):
        return {sum(n.by_rdmaprov for n in world.nodes)}
    found: set[int] = set()
    for index, check in enumerate(checks):
        if check.done:
            continue
        commits = check.step == 1 or (check.step == 3 and check.undo)
        for tick in (0, 1) if commits else (0,):
            after, new_world = check.run(world, limits, tick)
            found |= _final_states(checks[:index] + (after,) + checks[index + 1 :], new_world, limits, seen)
    return found


@pytest.mark.parametrize("racing, size, fraction", [(2, 2, 0.5), (3, 3, 0.34), (3, 4, 0.5), (3, 6, 0.2), (3, 9, 0.34)])
def test_nodes_deciding_at_once_never_drain_more_than_the_share(racing, size, fraction):
    """Every interleaving of `racing` failing nodes' checks, with slurmctld's clock standing still or
    ticking before any commit: at most the limit stays drained; when the checks do not overlap,
    exactly the limit does."""
    limits = DrainLimits(True, fraction)
    allowed = limits.allowed(size)
    world = _World(tuple(_node(f"n{i}") for i in range(1, size + 1)))
    checks = tuple(_Check(f"n{i}") for i in range(1, racing + 1))
    finals = _final_states(checks, world, limits, set())
    assert max(finals) <= allowed and min(finals) >= 0
    sequential = world
    for check in checks:
        while not check.done:
            check, sequential = check.run(sequential, limits, 1)
    assert sum(n.by_rdmaprov for n in sequential.nodes) == min(racing, allowed) == max(finals)


# Slurm 24.11.5 (Debian 13) as the lab showed one node through a slurmd start with its HCA gone:
# (capture, states, reason, what a failing check does, what a passing one does)
FROM_24_11 = [
    # slurmctld started without saved state, slurmd not registered yet
    ("unknown_cold_start", {"UNKNOWN"}, "", "drain", "Slurm manages it"),
    # slurmctld restarted from its state: UNKNOWN, with the reason of a drain long resumed
    ("unknown_stale_admin_reason", {"UNKNOWN"}, "DIMM swap, ticket 4711", "drain", "Slurm manages it"),
    # the start-up check's drain, before slurmd registered: kept, and not resumed until it has
    ("unknown_drained_at_start", {"UNKNOWN", "DRAIN"}, "ours", "stays drained", "Slurm manages it"),
    # registered two seconds later: the drain stayed; the next passing check resumes it
    ("idle_drained_after_start", {"IDLE", "DRAIN"}, "ours", "stays drained", "resume"),
    # 24.11 keeps the reason after a resume: a node in service, not one rdmaprov holds
    ("idle_resumed_reason_kept", {"IDLE"}, "ours", "drain", None),
    # 24.11 still shows IDLE two seconds after a clean `systemctl stop slurmd`
    ("idle_slurmd_stopped", {"IDLE"}, "DIMM swap, ticket 4711", "drain", None),
    ("admin_drained", {"IDLE", "DRAIN"}, "DIMM swap, ticket 4711", "someone else", "someone else"),
]


@pytest.mark.parametrize(("capture", "states", "reason", "failing", "passing"), FROM_24_11)
def test_slurm_24_11_start_up_states_as_the_lab_captured_them(capture, states, reason, failing, passing):
    from rdmaprov.parsers.slurm import parse_scontrol_nodes
    from tests.conftest import FIXTURES

    [node] = parse_scontrol_nodes((FIXTURES / "slurm" / f"scontrol_show_node_24.11.5_{capture}.txt").read_text())
    assert (node.name, node.states, node.partitions) == ("node3", states, ("main",))
    assert node.reason == ("rdmaprov: rdma.device_present rxe0: missing (+1 more)" if reason == "ours" else reason)
    assert node.reason_time.startswith("2026-11-26T19:1") == bool(reason)

    def act(outcome: CheckOutcome) -> str | None:
        actions = decide([node], [outcome], DrainLimits(True, 0.5))
        return (actions[0].kind if actions[0].kind != "report" else actions[0].why) if actions else None

    for outcome, expected in ((_failing("node3"), failing), (_healthy("node3"), passing)):
        done = act(outcome)
        assert done == expected or (expected is not None and done is not None and expected in done), done
