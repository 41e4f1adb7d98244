"""slurm.conf, gres.conf and the slurmd options as the slurm deploy renders them, the node
hardware they declare (parsed from real lscpu/meminfo output), and the deploy's operations
against given facts: munge key, slurm.conf kept for unreached nodes, files left alone where
Slurm is not rdmaprov's."""

from __future__ import annotations

import pytest

from rdmaprov.facts.files import FileDigest, FileState, ManagedFile
from rdmaprov.facts.slurm import MungeKey, SlurmHardware
from rdmaprov.inventory import load_inventory
from rdmaprov.operations.files import managed_file
from rdmaprov.operations.services import unit_running
from rdmaprov.operations.slurm import SlurmMember, munge_key_created, munge_key_shared, slurm_conf
from rdmaprov.parsers.slurm import NodeHardware, conf_node_lines, conf_value, parse_hardware
from rdmaprov.parsers.slurm_release import SlurmVersion
from rdmaprov.quoting import slurm_word
from rdmaprov.slurm.conf import SlurmNodeLine, render_gres_conf, render_slurm_conf, render_slurmd_defaults
from tests.conftest import FIXTURES
from tests.support.inventories import write
from tests.support.ops import FactState, commands, run_notes

HARDWARE = FIXTURES / "slurm" / "hardware_kvm_2cpu.txt"
ONE = NodeHardware("vm1", 1, 1, 1, 1, 964)


def _slurm(tmp_path, extra: str = ""):
    text = (
        "cluster:\n  name: lab\n  slurm:\n    enabled: true\n    controller: node1\n"
        "    health_check: {interval_s: 30, max_drain_fraction: 0.5}\n" + extra + "hosts:\n"
        "  node1: {address: 10.79.41.11}\n  node2: {address: 10.79.41.12}\n"
    )
    inventory = load_inventory(write(tmp_path, text), require_files=False)
    assert inventory.slurm is not None
    return inventory.slurm


def test_node_hardware_from_real_lscpu_and_meminfo():
    hardware = parse_hardware(HARDWARE.read_text().splitlines())
    # 24,105 MiB of MemTotal, declared with 2 % to spare: a kernel update that takes a few MiB
    # must not leave the node drained for "Low RealMemory"
    assert hardware == NodeHardware("vm", 2, 1, 2, 1, 23622)
    assert hardware.slurm_words() == [
        "CPUs=2",
        "Boards=1",
        "SocketsPerBoard=1",
        "CoresPerSocket=2",
        "ThreadsPerCore=1",
        "RealMemory=23622",
    ]
    assert parse_hardware([]) is None
    assert parse_hardware(["vm", "CPU(s): 2"]) is None  # no lscpu figures, no memory: unknown, not guessed


def test_slurm_conf_declares_nodes_gpus_partitions_and_the_health_check(tmp_path):
    slurm = _slurm(tmp_path)
    nodes = [SlurmNodeLine("node1", "10.79.41.11", ONE, 0), SlurmNodeLine("node2", "10.79.41.12", ONE, 8)]
    partitions = [("main", ["node1", "node2"], True, "INFINITE")]
    text = render_slurm_conf(slurm, ("vm1", "10.79.41.11"), nodes, partitions, version=SlurmVersion(22, 5, 8))
    lines = text.splitlines()
    assert lines[0].startswith("# Managed by rdmaprov")
    assert "ClusterName=lab" in lines and "SlurmctldHost=vm1(10.79.41.11)" in lines
    assert "HealthCheckProgram=/usr/local/sbin/rdmaprov-slurm-health-check" in lines
    assert "HealthCheckInterval=30" in lines and "HealthCheckNodeState=ANY,CYCLE" in lines
    assert "GresTypes=gpu" in lines and "ReturnToService=2" in lines
    assert "PropagateResourceLimitsExcept=MEMLOCK" in lines  # jobs keep the node's memlock
    assert (
        "NodeName=node1 NodeAddr=10.79.41.11 CPUs=1 Boards=1 SocketsPerBoard=1 CoresPerSocket=1 "
        "ThreadsPerCore=1 RealMemory=964 State=UNKNOWN"
    ) in lines
    assert any(line.startswith("NodeName=node2 ") and "Gres=gpu:8 State=UNKNOWN" in line for line in lines)
    assert lines[-1] == "PartitionName=main Nodes=node1,node2 Default=YES MaxTime=INFINITE State=UP"
    # what the file says about the nodes reads back as it was written
    assert set(conf_node_lines(text)) == {"node1", "node2"} and conf_value(text, "ClusterName") == "lab"


def test_gres_conf_names_each_gpu_device_and_slurmd_gets_its_node_name():
    assert render_gres_conf([("node1", 0), ("node2", 8), ("node3", 1)]).splitlines()[1:] == [
        "NodeName=node2 Name=gpu File=/dev/nvidia[0-7]",
        "NodeName=node3 Name=gpu File=/dev/nvidia0",
    ]
    assert render_gres_conf([("node1", 0)]) is None
    assert render_slurmd_defaults("gpu-001").splitlines()[-1] == 'SLURMD_OPTIONS="-N gpu-001"'


@pytest.mark.parametrize("value", ["a b", "x#y", 'q"uote', "k=v", "line\nbreak", "", "tab\there"])
def test_a_value_that_could_break_a_slurm_conf_line_is_refused(value):
    with pytest.raises(ValueError, match="cannot be written to slurm.conf"):
        slurm_word(value, "node name")
    with pytest.raises(ValueError):
        SlurmNodeLine(value, "10.0.0.1", ONE, 0).line()


def test_the_munge_key_is_made_on_the_controller_only_when_missing():
    created = commands(munge_key_created, {MungeKey: FileDigest()}, controller=True)
    assert created == [
        "if [ ! -s /etc/munge/munge.key ]; then mungekey --create --keyfile=/etc/munge/munge.key && chown munge:munge "
        "/etc/munge/munge.key && chmod 400 /etc/munge/munge.key && systemctl restart munge; fi"
    ]
    assert (
        commands(munge_key_created, {MungeKey: FileDigest("ab" * 32, "400", "munge", "munge")}, controller=True) == []
    )
    loose = commands(munge_key_created, {MungeKey: FileDigest("ab" * 32, "644", "root", "root")}, controller=True)
    assert loose == ["chown munge:munge /etc/munge/munge.key && chmod 400 /etc/munge/munge.key"]
    assert commands(munge_key_created, {MungeKey: FileDigest()}, controller=False) == []


def test_a_node_gets_the_controllers_key_only_when_its_digest_differs():
    controller = FileDigest("c0" * 32, "400", "munge", "munge")
    cluster = {MungeKey: {"node1": controller, "node2": FileDigest("d0" * 32, "400", "munge", "munge")}}
    differs = {MungeKey: FileDigest("d0" * 32, "400", "munge", "munge")}
    args = {"controller": "node1", "member": True}
    out, _ = run_notes(munge_key_shared, differs, cluster, host="node2", **args)
    assert out == ["call _copy_key('node1',)"]  # runs on the control machine: the key is no command's text
    assert run_notes(munge_key_shared, {MungeKey: controller}, cluster, host="node2", **args)[0] == []
    loose = {MungeKey: FileDigest("c0" * 32, "644", "root", "root")}
    fixed, _ = run_notes(munge_key_shared, loose, cluster, host="node2", **args)
    assert fixed == ["chown munge:munge /etc/munge/munge.key && chmod 400 /etc/munge/munge.key"]
    # the controller is the key's source; a host outside Slurm is left alone
    assert run_notes(munge_key_shared, differs, cluster, host="node1", **args)[0] == []
    assert run_notes(munge_key_shared, differs, cluster, host="node2", controller="node1", member=False)[0] == []
    _, notes = run_notes(munge_key_shared, differs, {MungeKey: {}}, host="node2", **args)
    assert notes.warnings["node2"] == [
        "munge key: the controller node1 is not in this run; node2's key is left as it is"
    ]


def _conf(slurm, facts, cluster, nodes):
    return run_notes(
        slurm_conf,
        facts,
        cluster,
        member=True,
        slurm=slurm,
        controller="node1",
        controller_address="10.79.41.11",
        nodes=nodes,
        after_change="systemctl try-restart slurmctld slurmd || true",
    )


def test_slurm_conf_keeps_the_line_of_a_node_this_run_did_not_reach(tmp_path):
    slurm = _slurm(tmp_path)
    nodes = [SlurmMember("node1", "node1", "10.79.41.11", 0), SlurmMember("node2", "node2", "10.79.41.12", 8)]
    both = {SlurmHardware: {"node1": ONE, "node2": NodeHardware("vm2", 2, 1, 2, 1, 2000)}}
    out, _ = _conf(slurm, {ManagedFile: FileState(False)}, both, nodes)
    written = out[1].split("\n", 1)[1]
    assert out[-1] == "systemctl try-restart slurmctld slurmd || true"
    current = FileState(True, written.encode(), "644", "root", "root")
    assert _conf(slurm, {ManagedFile: current}, both, nodes)[0] == []  # converged: nothing to do
    only_one = {SlurmHardware: {"node1": ONE}}
    out, notes = _conf(slurm, {ManagedFile: current}, only_one, nodes)
    assert out == []  # node2's line kept as the file has it: the same file
    assert notes.warnings["node1"] == [
        "slurm.conf: node2 was not reached this run; its node line is kept as the file has it"
    ]
    out, notes = _conf(slurm, {ManagedFile: FileState(False)}, only_one, nodes)
    assert out == [] and notes.warnings["node1"] == [
        "slurm.conf left as it is: the hardware of node2 is not known (not reached this run)"
    ]


def test_where_slurm_is_not_rdmaprovs_nothing_is_touched():
    site = FileState(True, b"ClusterName=site\n", "644", "root", "root")
    assert commands(managed_file, {ManagedFile: site}, path="/etc/slurm/cgroup.conf", content=None, managed=False) == []
    assert commands(unit_running, {}, unit="slurmd.service", running=None) == []
    state = FactState()
    out, _ = run_notes(
        slurm_conf,
        {},
        state=state,
        member=False,
        slurm=None,
        controller=None,
        controller_address="",
        nodes=[],
        after_change="true",
    )
    assert out == []


def test_scontrol_nodes_drained_by_rdmaprov_and_by_an_admin_as_slurm_22_05_prints_them():
    from rdmaprov.parsers.slurm import parse_scontrol_nodes

    text = (FIXTURES / "slurm" / "scontrol_show_node_drained_not_responding.txt").read_text()
    ours, admin = parse_scontrol_nodes(text)
    assert ours.name == "node2" and ours.partitions == ("main",)
    assert ours.states == {"UNKNOWN", "DRAIN", "NOT_RESPONDING"} and ours.drained and ours.by_rdmaprov
    assert ours.reason == "rdmaprov: rdma.device_present rxe0: missing (+1 more)"
    assert ours.reason_time == "2026-11-23T19:24:42" and ours.hands_off == "NOT_RESPONDING"
    assert admin.reason == "DIMM swap, ticket 4711" and admin.drained and not admin.by_rdmaprov
    [resumed] = parse_scontrol_nodes(
        (FIXTURES / "slurm" / "scontrol_show_node_resumed_unknown_not_responding.txt").read_text()
    )
    assert resumed.states == {"UNKNOWN", "NOT_RESPONDING"} and resumed.reason == "" and not resumed.drained
    # slurmd starting on these nodes (its health check runs before it registers): a failing
    # check drains the clean one before it takes jobs; ours stays drained; none is resumed
    from rdmaprov.slurm.drain import CheckOutcome, DrainLimits, decide

    failing = CheckOutcome("node2", False, ("rdma.device_present rxe0: missing",))
    [drain] = decide([resumed], [failing], DrainLimits(True, 1.0))
    assert drain.command() == [
        "scontrol",
        "update",
        "nodename=node2",
        "state=drain",
        "reason=rdmaprov: rdma.device_present rxe0: missing",
    ]
    [kept] = decide([ours, admin], [failing], DrainLimits(True, 1.0))
    assert (kept.kind, kept.why) == ("report", f"still fails, stays drained ({ours.reason})")
    [waits] = decide([ours, admin], [CheckOutcome("node2", True)], DrainLimits(True, 1.0))
    assert (waits.kind, waits.why) == ("report", "is NOT_RESPONDING: Slurm manages it, left alone")


def test_scontrol_reason_ends_at_its_stamp_when_later_releases_print_fields_after_it():
    # Slurm 23.02 and later print Comment=, Extra=, ReservationName= after Reason=: the lab's 22.05
    # line with such fields appended must give the same reason, its time, and the fields
    from rdmaprov.parsers.slurm import parse_scontrol_nodes

    text = (FIXTURES / "slurm" / "scontrol_show_node_lab_node2_drained_by_rdmaprov.txt").read_text()
    line = text.splitlines()[1] + " Comment=(null) Extra=(null) ReservationName=maint_0412"
    [node2] = parse_scontrol_nodes(line)
    assert node2.reason == "rdmaprov: rdma.device_present rxe0: missing (+1 more)"
    assert node2.reason_time == "2026-11-23T20:33:49" and node2.partitions == ("main",)
    # a reason without a stamp runs to the end of the line, as 22.05 prints it
    [bare] = parse_scontrol_nodes(line.split(" [root@")[0])
    assert bare.reason == node2.reason and bare.reason_time == ""


def test_scontrol_nodes_with_slurmd_running_whose_os_field_has_spaces():
    from rdmaprov.parsers.slurm import parse_scontrol_nodes

    text = (FIXTURES / "slurm" / "scontrol_show_node_lab_node2_drained_by_rdmaprov.txt").read_text()
    node1, node2 = parse_scontrol_nodes(text)
    assert node1.name == "node1" and node1.states == {"IDLE"} and not node1.drained and node1.reason == ""
    assert node2.states == {"IDLE", "DRAIN"} and node2.drained and node2.by_rdmaprov and node2.partitions == ("main",)
    assert node2.reason == "rdmaprov: rdma.device_present rxe0: missing (+1 more)"
    assert node2.reason_time == "2026-11-23T20:33:49" and not node2.hands_off
    # repaired, node2's next check resumes it (its own drain); a healthy node1 is left as it is
    from rdmaprov.slurm.drain import CheckOutcome, DrainLimits, decide

    [resume] = decide(
        [node1, node2], [CheckOutcome("node1", True), CheckOutcome("node2", True)], DrainLimits(True, 0.5)
    )
    assert (resume.node, resume.kind) == ("node2", "resume")
