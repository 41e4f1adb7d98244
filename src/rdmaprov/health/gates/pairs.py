"""Which pairs of nodes the pair gates test, and in which rounds: a node is in one test at a time,
so a round takes one test's time however many pairs it holds."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import TypeVar

import gevent

from rdmaprov.health.gates.result import GateResult
from rdmaprov.health.gates.subject import Subject

Pair = tuple[str, str]  # (server, client)
Test = TypeVar("Test", bound=tuple[str, ...])  # the nodes one test holds: a pair, an incast


def ring_pairs(names: list[str]) -> list[Pair]:
    """(server, client): each node to the next, the last back to the first (one pair for two nodes)."""
    if len(names) < 2:
        return []
    if len(names) == 2:
        return [(names[0], names[1])]
    return [(names[i], names[(i + 1) % len(names)]) for i in range(len(names))]


def all_pairs(names: list[str]) -> list[Pair]:
    return [(a, b) for i, a in enumerate(names) for b in names[i + 1 :]]


def newcomer_pairs(names: list[str], newcomers: list[str]) -> list[Pair]:
    """(existing, new): each new node against an existing one, spread round-robin; with no
    existing node reachable, the new nodes in a ring among themselves."""
    existing = [n for n in names if n not in newcomers]
    if not existing:
        return ring_pairs(newcomers)
    return [(existing[i % len(existing)], new) for i, new in enumerate(newcomers)]


def gate_pairs(pairs_setting: str, hosts: list[str], newcomers: list[str] | None) -> list[Pair]:
    """The pairs a gate tests: with `newcomers` (bootstrap) each new node against an existing one,
    else every pair (`all`) or a ring."""
    if newcomers:
        return newcomer_pairs(hosts, newcomers)
    return all_pairs(hosts) if pairs_setting == "all" else ring_pairs(hosts)


def rounds(pairs: Sequence[Test]) -> list[list[Test]]:
    """Group tests so that no node is in two tests of the same round (greedy, order kept). One
    pass over the pairs per round: a 2,000-node ring's 2,000 pairs took 4 s when each was
    removed from the list as it was placed."""
    remaining = list(pairs)
    out: list[list[Test]] = []
    while remaining:
        busy: set[str] = set()
        this_round, later = [], []
        for pair in remaining:
            if busy.isdisjoint(pair):
                this_round.append(pair)
                busy.update(pair)
            else:
                later.append(pair)
        out.append(this_round)
        remaining = later
    return out


def _pair(pair: tuple[str, ...]) -> Subject:
    return Subject.pair(pair[0], pair[1])


def run_in_rounds(
    gate: str,
    pairs: Sequence[Test],
    test: Callable[..., list[GateResult]],
    subject: Callable[[Test], Subject] = _pair,
) -> list[GateResult]:
    """test(*nodes) for every test (a pair: server, client), the tests of a round at once; a test
    that crashed is its `subject`'s failure, not the run's."""

    def timed(nodes: Test) -> list[GateResult]:
        started = time.monotonic()
        try:
            results = test(*nodes)
        except Exception as exc:  # the test's result, not a greenlet's traceback on stderr
            results = [GateResult.broken(gate, subject(nodes), exc)]
        for result in results:
            result.duration_s = round(time.monotonic() - started, 3)
        return results

    results: list[GateResult] = []
    for batch in rounds(pairs):
        jobs = [gevent.spawn(timed, nodes) for nodes in batch]
        gevent.joinall(jobs)
        for job in jobs:
            results.extend(job.get())
    return results
