"""cluster.slurm: the typed settings and every mistake named with file, line, path and fix."""

from __future__ import annotations

from rdmaprov.inventory import load_inventory
from tests.support.inventories import problems, write

HOSTS = "hosts:\n  node1: {address: 10.0.0.1}\n  node2: {address: 10.0.0.2}\n  gpu.3: {address: 10.0.0.3}\n"


def _inventory(tmp_path, slurm: str):
    return write(tmp_path, f"cluster:\n  name: Lab.One\n  slurm:\n{slurm}{HOSTS}")


def test_slurm_defaults_and_typed_settings(tmp_path):
    path = _inventory(
        tmp_path,
        "    enabled: true\n    controller: node1\n    node_names: {gpu.3: gpu3}\n"
        "    health_check: {interval_s: 60, max_drain_fraction: 0.5}\n",
    )
    slurm = load_inventory(path).slurm
    assert slurm is not None and slurm.manages and slurm.controller == "node1"
    assert slurm.cluster_name == "lab-one"  # ClusterName: lower case, no dots
    [main] = slurm.partitions
    assert (main.name, main.default, main.max_time, main.hosts) == (
        "main",
        True,
        "INFINITE",
        ("node1", "node2", "gpu.3"),
    )
    assert slurm.node_name("gpu.3") == "gpu3" and slurm.node_name("node2") == "node2"
    check = slurm.health_check
    assert (check.interval_s, check.max_drain_fraction, check.drain, check.report_timeout_s) == (60, 0.5, True, 30)
    assert check.node_state_value == "ANY,CYCLE"
    assert slurm.mpi == "pmix"
    assert slurm.compute_hosts(["node1", "node2", "gpu.3"]) == ["node1", "node2", "gpu.3"]


def test_no_slurm_section_or_disabled_is_none(tmp_path):
    assert load_inventory(write(tmp_path, "cluster: {name: c}\n" + HOSTS)).slurm is None
    assert load_inventory(_inventory(tmp_path, "    enabled: false\n")).slurm is None


def test_partitions_choose_the_compute_nodes(tmp_path):
    path = _inventory(
        tmp_path,
        "    enabled: true\n    controller: node1\n    node_names: {gpu.3: gpu3}\n    partitions:\n"
        "      - {name: gpu, hosts: [node2, gpu.3], default: true, max_time: '2-00:00:00'}\n"
        "      - {name: debug, hosts: [node2]}\n",
    )
    slurm = load_inventory(path).slurm
    assert slurm is not None
    assert [(p.name, p.hosts, p.default, p.max_time) for p in slurm.partitions] == [
        ("gpu", ("node2", "gpu.3"), True, "2-00:00:00"),
        ("debug", ("node2",), False, "INFINITE"),
    ]
    assert slurm.compute_hosts(["node1", "node2", "gpu.3"]) == ["node2", "gpu.3"]  # the controller only controls


def test_health_check_mode_needs_no_controller_and_covers_every_host(tmp_path):
    path = _inventory(tmp_path, "    enabled: true\n    mode: health_check\n    node_names: {gpu.3: gpu3}\n")
    slurm = load_inventory(path).slurm
    assert slurm is not None and not slurm.manages
    assert slurm.compute_hosts(["node1", "node2", "gpu.3"]) == ["node1", "node2", "gpu.3"]


def test_every_slurm_mistake_named_with_its_place_and_fix(tmp_path):
    path = _inventory(
        tmp_path,
        "    enabled: true\n    partitions:\n"
        "      - {name: gpu, hosts: [node1, node9], default: true}\n"
        "      - {name: gpu, default: true}\n"
        "    node_names: {node2: node1, node7: n7}\n",
    )
    expected = [
        "4:5: cluster.slurm: slurm mode full needs a controller (fix: set slurm.controller to the host that runs "
        "slurmctld)",
        "4:5: cluster.slurm: host 'gpu.3' is no Slurm NodeName (only letters, digits, '_' and '-') (fix: map it to "
        "one: slurm.node_names: {gpu.3: gpu-3})",
        "6:36: cluster.slurm.partitions[0].hosts[1]: partition 'gpu' names 'node9', which is not a host of this "
        "inventory (fix: known: node1, node2, gpu.3)",
        "7:16: cluster.slurm.partitions[1].name: partition 'gpu' is declared twice (fix: give each partition its own "
        "name, or merge their hosts)",
        "7:30: cluster.slurm.partitions[1].default: more than one partition is the default (fix: mark one partition "
        "default: true)",
        "8:17: cluster.slurm.node_names: hosts 'node1' and 'node2' would both be Slurm node 'node1' (fix: give each "
        "host its own name in slurm.node_names)",
        "8:32: cluster.slurm.node_names.node7: node_names maps 'node7', which is not a host of this inventory (fix: "
        "known: node1, node2, gpu.3)",
    ]
    assert sorted(problems(path)) == sorted(f"{path}:{line}" for line in expected)


def test_slurm_values_that_cannot_reach_slurm_conf_are_refused_by_the_schema(tmp_path):
    path = _inventory(
        tmp_path,
        "    enabled: true\n    controller: node1\n    node_names: {gpu.3: 'gpu 3'}\n"
        "    partitions: [{name: 'a=b'}]\n    health_check: {max_drain_fraction: 0, interval_s: 0}\n",
    )
    found = problems(path)
    assert (
        f"{path}:6:25: cluster.slurm.node_names.gpu.3: string 'gpu 3' does not have the expected form (fix: A "
        "Slurm NodeName: letters, digits, '_' and '-'.)" in found
    )
    assert any("cluster.slurm.partitions[0].name: string 'a=b' does not have the expected form" in p for p in found)
    assert any("cluster.slurm.health_check.max_drain_fraction: " in p for p in found), found
    assert any("cluster.slurm.health_check.interval_s: " in p for p in found), found


def test_a_node_state_that_would_never_resume_rdmaprovs_drains_is_refused(tmp_path):
    slurm = "    enabled: true\n    controller: node1\n    node_names: {gpu.3: gpu3}\n"
    path = _inventory(tmp_path, slurm + "    health_check: {node_state: [ALLOC, NONDRAINED_IDLE]}\n")
    assert problems(path) == [
        f"{path}:7:40: cluster.slurm.health_check.node_state[1]: NONDRAINED_IDLE leaves drained nodes unchecked: "
        "a node rdmaprov drained would never be checked again, so never resumed (fix: use IDLE (idle nodes, "
        "drained or not) or ANY, or set health_check.drain: false)"
    ]
    # reporting only, nothing is drained: nothing to resume
    path = _inventory(tmp_path, slurm + "    health_check: {node_state: [NONDRAINED_IDLE], drain: false}\n")
    check = load_inventory(path).slurm.health_check
    assert check.node_state == ("NONDRAINED_IDLE",) and not check.drain
