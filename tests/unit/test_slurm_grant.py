"""slurm/grant.py: which nodes a build's broadcast asks Slurm for, on real `scontrol -o show node`
outputs (tests/fixtures/slurm/, sources in tests/fixtures/README.md)."""

from __future__ import annotations

from rdmaprov.parsers.slurm import parse_scontrol_nodes
from rdmaprov.slurm.grant import grant_groups
from tests.conftest import FIXTURES

SLURM = FIXTURES / "slurm"


def _nodes(name: str):
    return parse_scontrol_nodes((SLURM / name).read_text())


def test_busy_drained_and_unknown_nodes_are_named_with_slurms_state_and_left_to_the_ssh_tree():
    busy = _nodes("scontrol_show_node_22.05.8_allocated_and_admin_drained.txt")  # node1 drained, node2 in a job
    idle = _nodes("scontrol_show_node_24.11.5_idle_resumed_reason_kept.txt")  # node3 idle (an old reason kept)
    groups, refused = grant_groups(busy + idle, ["node2", "node1", "node3", "gpu9"])
    assert groups == {"main": ["node3"]}
    assert refused == {
        "node2": "Slurm has it ALLOCATED",
        "node1": "Slurm has it DRAIN+IDLE",
        "gpu9": "Slurm does not know it",
    }


def test_a_node_whose_slurmd_has_not_registered_is_not_asked_for():
    groups, refused = grant_groups(_nodes("scontrol_show_node_24.11.5_unknown_cold_start.txt"), ["node3"])
    assert groups == {} and refused == {"node3": "Slurm has it UNKNOWN"}


def test_free_nodes_are_asked_for_in_their_own_partition_in_the_order_given():
    lines = [
        "NodeName=a State=IDLE Partitions=gpu,debug",
        "NodeName=b State=MIXED Partitions=cpu",
        "NodeName=c State=IDLE Partitions=gpu",
        "NodeName=d State=IDLE Partitions=",
    ]
    groups, refused = grant_groups(parse_scontrol_nodes("\n".join(lines)), ["c", "b", "a", "d"])
    assert groups == {"gpu": ["c", "a"], "cpu": ["b"]} and refused == {"d": "it is in no partition"}
