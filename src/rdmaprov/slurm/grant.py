"""Which nodes Slurm can grant a job now, and in which partition: what a broadcast of a build
(operations/builds.py) asks for, one allocation per partition, so that one busy, drained or down
node, or a node of another partition, does not cost every other node its copy."""

from __future__ import annotations

from rdmaprov.parsers.slurm import SlurmNode

# A node takes a new job at once only in these states, with no flag beside them (DRAIN,
# NOT_RESPONDING, POWERED_DOWN, RESERVED, COMPLETING… all keep a job waiting).
FREE = frozenset({"IDLE", "MIXED"})


def grant_groups(nodes: list[SlurmNode], wanted: list[str]) -> tuple[dict[str, list[str]], dict[str, str]]:
    """({partition: the wanted nodes to ask for in it}, {wanted node: why not}) from `scontrol -o
    show node`; each node goes to its first partition, in `wanted`'s order."""
    known = {node.name: node for node in nodes}
    groups: dict[str, list[str]] = {}
    refused: dict[str, str] = {}
    for name in wanted:
        node = known.get(name)
        if node is None:
            refused[name] = "Slurm does not know it"
        elif not node.states or not node.states <= FREE:
            refused[name] = f"Slurm has it {'+'.join(sorted(node.states)) or 'in no state'}"
        elif not node.partitions:
            refused[name] = "it is in no partition"
        else:
            groups.setdefault(node.partitions[0], []).append(name)
    return groups, refused
