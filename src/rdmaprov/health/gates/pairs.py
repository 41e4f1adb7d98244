"""Which pairs of nodes the pair gates test, and in which rounds: a node is in one test at a time,
so a round takes one test's time however many pairs it holds."""

from __future__ import annotations

import time
from collections.abc import Callable

import gevent

from rdmaprov.health.gates.result import GateResult
from rdmaprov.health.gates.subject import Subject

Pair = tuple[str, str]  # (server, client)


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


def rounds(pairs: list[Pair]) -> list[list[Pair]]:
    """Group pairs so that no node is in two pairs of the same round (greedy, order kept). One
    pass over the pairs per round: a 2,000-node ring's 2,000 pairs took 4 s when each was
    removed from the list as it was placed."""
    remaining = list(pairs)
    out: list[list[Pair]] = []
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


def run_in_rounds(gate: str, pairs: list[Pair], test: Callable[[str, str], list[GateResult]]) -> list[GateResult]:
    """test(server, client) for every pair, the pairs of a round at once; a test that crashed is
    that pair's failure, not the run's."""

    def timed(server: str, client: str) -> list[GateResult]:
        started = time.monotonic()
        try:
            results = test(server, client)
        except Exception as exc:  # the pair's result, not a greenlet's traceback on stderr
            results = [GateResult.broken(gate, Subject.pair(server, client), exc)]
        for result in results:
            result.duration_s = round(time.monotonic() - started, 3)
        return results

    results: list[GateResult] = []
    for batch in rounds(pairs):
        jobs = [gevent.spawn(timed, server, client) for server, client in batch]
        gevent.joinall(jobs)
        for job in jobs:
            results.extend(job.get())
    return results
