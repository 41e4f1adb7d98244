"""Who receives a built archive from whom: nodes pass it on to nodes, the number of holders
doubling every round, so the control machine sends at most a few copies whatever the cluster's
size (it sent one to every node: 2,000 nodes pulled ~100 GB of NCCL through one machine).

Every node that needs the archive gets an ordered list of sources: its parent in a binomial tree
over the holders (the nodes that hold a copy when shipping starts: usually the builder), then that
parent's own sources, which hold it earlier, then the control machine as the last resort. A
receiver checks each copy's sha256 before it keeps it or passes it on; a source that is dead,
slow or gives a damaged copy is left for the next one on the list.
"""

from __future__ import annotations

CONTROL = ""  # a source that is the control machine itself (its cache), not a node
CONTROL_SEEDS = 2  # nodes the control machine sends to when no node holds the archive yet

# How long a receiver waits for a source to hold its copy, and a transfer may take, before it
# routes around it: a minute, plus the archive's size at 20 MB/s (a slow link, not a dead one).
WAIT_BASE_S = 60
SLOW_BYTES_PER_S = 20 * 1000 * 1000


def routes(holders: list[str], targets: list[str], seeds: int = CONTROL_SEEDS) -> dict[str, tuple[str, ...]]:
    """{target: sources to try in order} for `targets` (in the run's order), given the nodes that
    already hold the archive. Round r of the binomial tree: the first k·2^(r-1) nodes of
    holders + targets each send to one node of the next k·2^(r-1) (k: the number of roots)."""
    order = [*holders, *targets]
    roots = len(holders) if holders else min(seeds, len(targets))
    if not roots:
        return {}
    sources: dict[str, tuple[str, ...]] = {}
    for position, node in enumerate(order):
        if position < roots:
            if not holders:
                sources[node] = (CONTROL,)  # the control machine seeds the first few
            continue
        step = roots
        while step * 2 <= position:
            step *= 2
        parent = order[position - step]
        sources[node] = (parent, *sources.get(parent, ()))
        if sources[node][-1] != CONTROL:
            sources[node] = (*sources[node], *[h for h in holders if h != parent], CONTROL)
    return sources


def rounds(holders: int, targets: int, seeds: int = CONTROL_SEEDS) -> int:
    """How many rounds shipping takes when nobody fails (the control machine's seeding counts as one)."""
    roots = holders or min(seeds, targets)
    if not targets or not roots:
        return 0
    count, have = (0, roots) if holders else (1, roots)
    while have < roots + targets if holders else have < targets:
        have *= 2
        count += 1
    return count


def wait_s(size: int) -> float:
    """Seconds a receiver gives one source (to come to hold its copy, then to send it)."""
    return WAIT_BASE_S + size / SLOW_BYTES_PER_S
