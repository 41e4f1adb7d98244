"""The pairwise tests at 2,000 nodes: every pair that shares no node runs in the same round, so
a ring of ib_write_bw pairs, and diagnose's first round, take two or three rounds whatever the
cluster's size, not a round per node."""

from __future__ import annotations

from rdmaprov.health.diagnose import neighbour_pairs
from rdmaprov.health.gates.pairs import newcomer_pairs, ring_pairs, rounds

NODES = [f"gpu{i:04d}" for i in range(2000)]


def _disjoint(batch: list[tuple[str, str]]) -> bool:
    seen = [n for pair in batch for n in pair]
    return len(seen) == len(set(seen))


def test_a_ring_of_2000_nodes_runs_in_two_rounds_of_1000_pairs():
    batches = rounds(ring_pairs(NODES))
    assert [len(b) for b in batches] == [1000, 1000] and all(_disjoint(b) for b in batches)
    assert len(rounds(ring_pairs(NODES[:1999]))) == 3  # an odd ring needs a third for its last pair


def test_diagnose_pairs_every_node_with_a_neighbour_in_one_round():
    pairs = neighbour_pairs(NODES)
    assert len(rounds(pairs)) == 1 and {n for p in pairs for n in p} == set(NODES)


def test_new_nodes_each_meet_a_different_existing_node_at_once():
    batches = rounds(newcomer_pairs(NODES, NODES[-100:]))
    assert len(batches) == 1 and len(batches[0]) == 100
