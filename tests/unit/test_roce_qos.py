"""RoCE's lossless chain: the profile's arithmetic, what it derives, and what validate refuses."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from dataclasses import replace
from pathlib import Path

import pytest

from rdmaprov.deploys.boot import render_unit
from rdmaprov.deploys.roce_qos import render_script
from rdmaprov.facts.node_report import node_report_command, roce_qos_command
from rdmaprov.facts.rdma import RoceQosState
from rdmaprov.health.checks import report_arguments, verify_node
from rdmaprov.health.counters import counter_checks, counter_findings
from rdmaprov.health.facts_report import FactsReport
from rdmaprov.health.gates.ib_write_bw import TCP_PORT, bandwidth_tool
from rdmaprov.health.gates.perftest import endpoint, perftest_words
from rdmaprov.inventory import load_inventory
from rdmaprov.inventory.roce_qos import RoceQos, chain_links, nic_links, qos_devices
from rdmaprov.operations.roce_qos import chain_now
from rdmaprov.parsers.mlxconfig import parse_mlxconfig_query
from rdmaprov.parsers.node import NodeReport, parse_node_report
from rdmaprov.parsers.roce_qos import QosState, dscp_value, parse_dcb, parse_mlnx_qos, parse_qos_state, pause_counters
from tests.conftest import FIXTURES, REPO
from tests.support.inventories import defaults_problems, gates_config, lab_host, node_config, problems, write
from tests.support.ops import commands, run_notes


@pytest.mark.parametrize(
    ("profile", "dscp", "tos"),
    [("dcqcn", 26, 106), ("pfc_only", 26, 104), ("dcqcn", 0, 2), ("pfc_only", 63, 252), ("dcqcn", 46, 186)],
)
def test_the_tos_is_the_dscp_shifted_with_the_ecn_capable_bit_under_dcqcn(profile, dscp, tos):
    qos = RoceQos(profile, dscp=dscp)
    assert qos.tos == tos
    assert qos.tos >> 2 == dscp  # what a capture shows as the DSCP
    assert (qos.tos & 0b11 == 0b10) is (profile == "dcqcn")


def test_pfc_is_on_for_the_roce_priority_alone_and_cnps_have_their_own_class():
    qos = RoceQos("dcqcn", priority=5, dscp=34, cnp_priority=7, cnp_dscp=56)
    assert qos.pfc == (False, False, False, False, False, True, False, False)
    assert qos.dscp_priorities == {34: 5, 56: 7}
    assert qos.nccl_env() == {"NCCL_IB_TC": "138", "NCCL_IB_SL": "5"}
    assert qos.conflicts() == []
    assert len(RoceQos("dcqcn", priority=3, cnp_priority=3, dscp=26, cnp_dscp=26).conflicts()) == 2


def test_the_defaults_are_nvidias_and_off_until_declared():
    node = node_config({"fabric": "roce"})
    assert node.roce_qos == RoceQos("off", 3, 26, 6, 48, "dcb") and node.qos is None
    assert "NCCL_IB_TC" not in node.nccl_environment()[0]
    declared = node_config({"fabric": "roce", "roce_qos": {"profile": "dcqcn"}})
    assert declared.qos == RoceQos("dcqcn")
    assert declared.nccl_environment()[0] == {"NCCL_IB_GID_INDEX": "3", "NCCL_IB_SL": "3", "NCCL_IB_TC": "106"}


@pytest.mark.parametrize(
    ("fabric", "chain", "nic"),
    [("roce", True, True), ("softroce", True, False), ("infiniband", False, False), ("erdma", False, False)],
)
def test_where_the_hosts_set_the_chain(fabric, chain, nic):
    qos = RoceQos("pfc_only")
    assert (qos.scope(fabric) is None) is chain
    assert (qos.dcb_scope(fabric) is None) is nic
    node = node_config({"fabric": fabric, "roce_qos": {"profile": "pfc_only"}, "rdma": {"netdevs": ["eth1"]}})
    assert ("NCCL_IB_TC" in node.nccl_environment()[0]) is chain


def test_nccl_variables_that_agree_are_kept_and_ones_that_disagree_are_refused_naming_both(tmp_path):
    agreeing = node_config({"fabric": "roce", "roce_qos": {"profile": "dcqcn"}, "nccl": {"env": {"NCCL_IB_TC": 106}}})
    assert agreeing.nccl_environment()[0]["NCCL_IB_TC"] == "106"
    inventory = write(
        tmp_path,
        "cluster: {name: c}\ndefaults:\n  fabric: roce\n  roce_qos: {profile: dcqcn, dscp: 26}\n"
        "  nccl:\n    env: {NCCL_IB_TC: 41, NCCL_IB_SL: 3}\ngroups:\n  g:\n    hosts: {n1: {address: 10.0.0.1}}\n",
    )
    assert problems(inventory, require_files=False) == [
        f"{inventory}:6:23: defaults.nccl.env.NCCL_IB_TC: nccl.env.NCCL_IB_TC is 41 but roce_qos (dcqcn: DSCP 26, "
        "priority 3) makes it 106 (host n1) (fix: drop NCCL_IB_TC from nccl.env: roce_qos sets it)"
    ]


def test_cnps_in_the_roce_class_are_refused(tmp_path):
    _, found = defaults_problems(tmp_path, "  fabric: roce\n  roce_qos: {profile: dcqcn, cnp: {priority: 3}}\n")
    assert len(found) == 1 and "defaults.roce_qos.cnp: roce_qos.cnp.priority is the RoCE priority 3" in found[0]


def test_the_gates_send_in_the_declared_class():
    tool = bandwidth_tool(gates_config({"ib_write_bw": {"duration_s": 3}}).ib_write_bw, "ib_write_bw")
    report = parse_node_report("")
    node = node_config({"fabric": "softroce", "rdma": {"netdevs": ["eth1"]}, "roce_qos": {"profile": "pfc_only"}})
    side = endpoint("node1", node, report, "rxe0")
    assert side.tclass == 104
    assert " ".join(perftest_words(tool, side, TCP_PORT, "10.0.0.1")) == (
        "ib_write_bw -d rxe0 -i 1 -x 1 -p 18515 -s 65536 -D 3 --report_gbits -F --tclass=104 10.0.0.1"
    )
    infiniband = node_config({"fabric": "infiniband", "roce_qos": {"profile": "dcqcn"}})
    assert endpoint("node1", infiniband, report, "mlx5_0").tclass is None


# --- what a node has, read from real outputs (tests/fixtures/roce_qos/README.md) ----------------

QOS = FIXTURES / "roce_qos"


def _prefixed(kind: str, netdev: str, fixture: str) -> str:
    """A fixture's lines as the node report's roce_qos section prints them (each tagged with its source)."""
    return "".join(f"{kind} {netdev} {line}\n" for line in (QOS / fixture).read_text().splitlines())


def _ecn(netdev: str, enabled: int) -> str:
    """mlx5's ECN files as grep -H prints them, with the values spiderpool's capture shows for
    every priority (`enabled` replaces them where a test wants DCQCN off)."""
    lines = []
    for line in (QOS / "spiderpool_rdma_qos_sh_q_ecn_sysfs_summary.txt").read_text().splitlines():
        if m := re.search(r"/sys/class/net/eth0/ecn/(\S+) = (\d+)$", line):
            value = m.group(2) if "enable" not in m.group(1) else str(enabled)
            lines.append(f"ecn {netdev} {m.group(1)}:{value}\n")
    return "".join(lines) + f"ecn {netdev} roce_np/cnp_802p_prio:6\n"


@pytest.mark.parametrize(
    ("fixture", "trust", "pfc3", "dscp26"),
    [
        ("mlnx_qos_trust_dscp_pfc3_att_netarbiter.txt", "dscp", True, 3),
        ("mlnx_qos_fw_dcbx_trust_dscp_pfc3_ets_cx5.txt", "dscp", True, 3),
        ("mlnx_qos_trust_pcp_pfc_off_centos12.txt", "pcp", False, None),
    ],
)
def test_mlnx_qos_shows_trust_pfc_and_the_dscp_table(fixture, trust, pfc3, dscp26):
    nic = parse_mlnx_qos("eth4", (QOS / fixture).read_text())
    assert (nic.trust, nic.pfc is not None and nic.pfc[3], nic.dscp_priorities.get(26)) == (trust, pfc3, dscp26)
    assert nic.unsupported is None and nic.pfc is not None and sum(nic.pfc) == pfc3
    if dscp26:
        assert len(nic.dscp_priorities) == 64 and nic.dscp_priorities[48] == 6


def test_mlnx_qos_with_tabs_as_the_tool_prints_them():
    nic = parse_mlnx_qos("rdma0", (QOS / "mlnx_qos_trust_dscp_tab_indented_partial_rdma0.txt").read_text())
    assert nic.trust == "dscp" and nic.dscp_priorities[26] == 3 and nic.pfc is None  # the capture stops there


def test_dcb_pfc_and_app_and_a_nic_without_dcb():
    on = parse_dcb("ens6", (QOS / "dcb_pfc_show_prio3_on_cx3pro_mlx4.txt").read_text(), "")
    assert on.pfc == (False, False, False, True, False, False, False, False) and on.trust == "pcp"
    off = parse_dcb("ens6", (QOS / "dcb_pfc_show_all_off_cx3pro_mlx4.txt").read_text(), "")
    assert off.pfc == (False,) * 8
    app = parse_dcb("ens6", "", (QOS / "dcb_app_show_dscp_prio_af31.txt").read_text())
    assert app.dscp_priorities == {26: 3} and app.trust == "dscp"  # AF31 is DSCP 26
    veth = parse_dcb(
        "rq0",
        (QOS / "dcb_pfc_show_veth_debian12.txt").read_text(),
        (QOS / "dcb_app_show_veth_debian12.txt").read_text(),
    )
    assert veth.unsupported == "Attribute read: Operation not supported" and veth.pfc is None
    assert [dscp_value(w) for w in ("CS6", "AF41", "EF", "26")] == [48, 34, 46, 26]


def _connectx(trust_fixture: str, tos: str = "106", tclass: str = "Global tclass=106", ecn: int = 1) -> QosState:
    return parse_qos_state(
        f"tos mlx5_0 1 {tos}\ntclass mlx5_0 {tclass}\nnetdev mlx5_0 eth4\n"
        + _prefixed("mlnx_qos", "eth4", trust_fixture)
        + _ecn("eth4", ecn)
    )


def test_a_converged_connectx_node_needs_nothing_and_passes_verify():
    state = _connectx("mlnx_qos_fw_dcbx_trust_dscp_pfc3_ets_cx5.txt")
    assert state.tos == {"mlx5_0": {1: 106}} and state.tclass == {"mlx5_0": 106}
    assert state.nics["eth4"].ecn["roce_np/cnp_dscp"] == 48
    facts = {RoceQosState: state}
    assert commands(chain_now, facts, qos=RoceQos("dcqcn", tool="mlnx_qos"), fabric="roce", named=[], storage=[]) == []
    node = _roce({"profile": "dcqcn", "tool": "mlnx_qos"})
    findings = verify_node(node, NodeReport(roce_qos=state))
    qos = [f for f in findings if f.id.startswith("roce.")]
    assert {f.id for f in qos} == {
        "roce.tos",
        "roce.tclass",
        "roce.trust",
        "roce.pfc",
        "roce.dscp_map",
        "roce.ecn",
        "roce.cnp",
    }
    assert all(f.ok and not f.unknown for f in qos), [f for f in qos if not f.ok]


def test_a_node_left_on_trust_pcp_is_set_with_the_declared_tool():
    state = _connectx("mlnx_qos_trust_pcp_pfc_off_centos12.txt", tos="-", tclass="Global tclass=0", ecn=0)
    facts = {RoceQosState: state}
    with_mlnx_qos = commands(
        chain_now, facts, qos=RoceQos("dcqcn", tool="mlnx_qos"), fabric="roce", named=[], storage=[]
    )
    assert with_mlnx_qos == [
        "for i in $(seq 60); do [ -e /sys/class/infiniband/mlx5_0 ] && break; sleep 1; done",
        "modprobe rdma_cm",
        "mountpoint -q /sys/kernel/config || mount -t configfs none /sys/kernel/config",
        "mkdir -p /sys/kernel/config/rdma_cm/mlx5_0",
        "echo 106 > /sys/kernel/config/rdma_cm/mlx5_0/ports/1/default_roce_tos",
        "echo tclass=106 > /sys/class/infiniband/mlx5_0/tc/1/traffic_class",
        "mlnx_qos -i eth4 --trust dscp",
        "mlnx_qos -i eth4 --pfc 0,0,0,1,0,0,0,0",
        "mlnx_qos -i eth4 --dscp2prio set,26,3",
        "mlnx_qos -i eth4 --dscp2prio set,48,6",
        "echo 1 > /sys/class/net/eth4/ecn/roce_np/enable/3",
        "echo 1 > /sys/class/net/eth4/ecn/roce_rp/enable/3",
    ]
    failing = {
        f.id
        for f in verify_node(_roce({"profile": "dcqcn"}), NodeReport(roce_qos=state))
        if not f.ok and f.id.startswith("roce.")
    }
    assert failing == {"roce.tos", "roce.tclass", "roce.trust", "roce.pfc", "roce.dscp_map", "roce.ecn"}


def test_pfc_only_turns_dcqcn_off_and_dcb_sets_trust_through_the_dscp_entries():
    state = _connectx("mlnx_qos_fw_dcbx_trust_dscp_pfc3_ets_cx5.txt", tos="104", tclass="Global tclass=104")
    out = commands(
        chain_now,
        {RoceQosState: state},
        qos=RoceQos("pfc_only", tool="mlnx_qos"),
        fabric="roce",
        named=[],
        storage=[],
    )
    assert out == [
        "echo 0 > /sys/class/net/eth4/ecn/roce_np/enable/3",
        "echo 0 > /sys/class/net/eth4/ecn/roce_rp/enable/3",
    ]
    dcb_state = parse_qos_state(
        "tos mlx5_0 1 104\nnetdev mlx5_0 ens6\n"
        + _prefixed("dcb_pfc", "ens6", "dcb_pfc_show_all_off_cx3pro_mlx4.txt")
        + _prefixed("dcb_app", "ens6", "dcb_app_show_dscp_prio_af31.txt")
    )
    out, notes = run_notes(
        chain_now, {RoceQosState: dcb_state}, qos=RoceQos("pfc_only"), fabric="roce", named=["mlx5_0"], storage=[]
    )
    assert out == ["dcb pfc set dev ens6 prio-pfc all:off 3:on", "dcb app replace dev ens6 dscp-prio 26:3 48:6"]
    assert notes.warnings == {
        "node1": [
            "RoCE QoS ecn left as it is: the driver of ens6 exposes no ECN settings "
            "(/sys/class/net/ens6/ecn: MLNX_OFED's mlx5 has them)"
        ]
    }


def test_a_nic_without_dcb_is_named_with_the_setting_and_the_rest_is_still_set():
    state = parse_qos_state(
        "tos mlx5_0 1 -\nnetdev mlx5_0 rq0\n"
        + _prefixed("dcb_pfc", "rq0", "dcb_pfc_show_veth_debian12.txt")
        + _prefixed("dcb_app", "rq0", "dcb_app_show_veth_debian12.txt")
    )
    out, notes = run_notes(chain_now, {RoceQosState: state}, qos=RoceQos("dcqcn"), fabric="roce", named=[], storage=[])
    assert out[-1] == "echo 106 > /sys/kernel/config/rdma_cm/mlx5_0/ports/1/default_roce_tos"  # the ToS is set
    assert notes.warnings["node1"][0] == (
        "RoCE QoS trust, pfc, dscp_map left as it is: rq0 has no DCB (dcb: Attribute read: Operation not supported)"
    )
    findings = verify_node(_roce({"profile": "dcqcn"}), NodeReport(roce_qos=state))
    failing = [f for f in findings if not f.ok and f.id.startswith("roce.")]
    assert {f.id for f in failing} == {"roce.tos", "roce.trust", "roce.pfc", "roce.dscp_map"}
    pfc = next(f for f in failing if f.id == "roce.pfc")
    # apply cannot give a NIC DCB: check calls it manual drift, not something apply would mend
    assert "has no DCB" in pfc.found and pfc.deploy is None and "apply cannot give it one" in pfc.hint


def test_softroce_sets_the_tos_alone_and_says_dcb_is_not_applicable():
    state = parse_qos_state("tos rxe0 1 -\n")
    out = commands(
        chain_now, {RoceQosState: state}, qos=RoceQos("dcqcn"), fabric="softroce", named=["rxe0"], storage=[]
    )
    assert out[-1] == "echo 106 > /sys/kernel/config/rdma_cm/rxe0/ports/1/default_roce_tos"
    spec = lab_host(roce_qos={"profile": "dcqcn"})
    findings = [f for f in verify_node(spec, NodeReport(roce_qos=state)) if f.id.startswith("roce.")]
    assert [(f.id, f.ok, f.found) for f in findings] == [
        ("roce.dcb", True, "not applicable: SoftRoCE runs on NICs without DCB (no PFC, no DSCP trust, no DCQCN)"),
        ("roce.tos", False, "unset (0)"),
    ]
    ok = verify_node(spec, NodeReport(roce_qos=parse_qos_state("tos rxe0 1 106\n")))
    assert all(f.ok for f in ok if f.id.startswith("roce."))
    missing = verify_node(spec, NodeReport(roce_qos=parse_qos_state("tos rxe0 1 -\nconfigfs missing\n")))
    assert "rdma_cm not loaded" in next(f.found for f in missing if f.id == "roce.tos")


def test_infiniband_reports_the_chain_as_not_the_hosts_business():
    spec = lab_host(fabric="infiniband", roce_qos={"profile": "dcqcn"})
    findings = [f for f in verify_node(spec, NodeReport()) if f.id.startswith("roce.")]
    assert [(f.id, f.ok, f.found) for f in findings] == [
        (
            "roce.qos",
            True,
            "not applicable: InfiniBand's quality of service is the subnet manager's (SL to VL), not the hosts'",
        )
    ]
    assert commands(chain_now, {}, qos=None, fabric="infiniband", named=[], storage=[]) == []


def test_the_boot_script_sets_every_link_whatever_it_is_now():
    state = _connectx("mlnx_qos_fw_dcbx_trust_dscp_pfc3_ets_cx5.txt")
    qos = RoceQos("dcqcn")
    script = render_script(qos, chain_links(qos, "roce", state, [], ()))
    assert script.startswith(
        "#!/bin/sh\n# Managed by rdmaprov: RoCE QoS, profile dcqcn (DSCP 26 = ToS 106 on priority 3"
    )
    assert "set -e" not in script and script.endswith("exit $rc\n")
    for line in (
        "echo 106 > /sys/kernel/config/rdma_cm/mlx5_0/ports/1/default_roce_tos",
        "dcb pfc set dev eth4 prio-pfc all:off 3:on",
        "dcb app replace dev eth4 dscp-prio 26:3 48:6",
        "echo 48 > /sys/class/net/eth4/ecn/roce_np/cnp_dscp",
        "echo 6 > /sys/class/net/eth4/ecn/roce_np/cnp_802p_prio",
    ):
        assert line + " || rc=1\n" in script
    unit = render_unit(
        "rdmaprov: RoCE QoS", "/usr/local/sbin/rdmaprov-roce-qos", ["eth4"], after="rdmaprov-rxe-links.service"
    )
    assert (
        "After=systemd-modules-load.service sys-subsystem-net-devices-eth4.device rdmaprov-rxe-links.service\n" in unit
    )


def test_inventory_names_reach_the_commands_quoted():
    state = parse_qos_state("tos mlx5_0;id 1 -\nnetdev mlx5_0;id e$(id)\n")
    links = chain_links(RoceQos("dcqcn"), "roce", state, [], ())
    lines = [line for link in links for line in link.commands]
    assert "mkdir -p '/sys/kernel/config/rdma_cm/mlx5_0;id'" in lines
    assert "dcb pfc set dev 'e$(id)' prio-pfc all:off 3:on" in lines


def _roce(qos: dict):
    return lab_host(fabric="roce", rdma={"devices": [], "storage_hcas": [], "port": 1}, roce_qos=qos)


def test_the_roce_example_inventory_derives_nccls_class_from_its_chain():
    inventory = load_inventory(REPO / "inventories" / "roce.yaml", require_files=False)
    node = inventory.hosts["gpu1"].node
    env = node.nccl_environment()[0]
    assert (env["NCCL_IB_TC"], env["NCCL_IB_SL"], env["NCCL_IB_GID_INDEX"], env["NCCL_IB_HCA"]) == (
        "106",
        "3",
        "3",
        "=mlx5_0,mlx5_1,mlx5_2,mlx5_3,mlx5_4,mlx5_5,mlx5_6,mlx5_7",
    )


def test_a_lab_vms_real_reading_rxe_over_virtio():
    """The roce_qos section's own output on a lab VM (rxe0 on virtio eth0, ToS 106 set)."""
    state = parse_qos_state((FIXTURES / "lab" / "roce_qos_rxe_virtio.txt").read_text())
    assert state.tos == {"rxe0": {1: 106}} and state.netdevs == {"rxe0": ("eth0",)} and state.configfs
    assert state.nics["eth0"].unsupported == "Attribute read: Operation not supported"
    qos = RoceQos("dcqcn")
    assert [(link.check, link.ok) for link in chain_links(qos, "softroce", state, ["rxe0"], ())] == [("roce.tos", True)]
    nic = [link for link in chain_links(qos, "roce", state, ["rxe0"], ()) if link.blocking]
    assert [link.check for link in nic] == ["roce.trust", "roce.pfc", "roce.dscp_map"]
    assert nic[0].unknown == "eth0 has no DCB (dcb: Attribute read: Operation not supported)"


def test_which_devices_carry_the_chain():
    state = parse_qos_state("tos mlx5_0 1 -\ntos mlx5_1 1 -\ntos mlx5_8 1 -\n")
    assert qos_devices(state, [], ("mlx5_8",)) == ["mlx5_0", "mlx5_1"]  # never the storage NIC
    roce = node_config({"fabric": "roce", "rdma": {"devices": ["mlx5_0", "mlx5_8"], "storage_hcas": ["mlx5_8"]}})
    assert roce.named_devices == ["mlx5_0"]
    # a fresh SoftRoCE node: its rxe links do not exist yet while apply plans, but the boot
    # script already sets their ToS
    fresh = node_config({"fabric": "softroce", "rdma": {"netdevs": ["eth0", "eth1"]}})
    assert fresh.named_devices == ["rxe0", "rxe1"]
    links = chain_links(RoceQos("dcqcn"), "softroce", QosState(), fresh.named_devices, ())
    assert [link.subject for link in links] == ["rxe0 port 1", "rxe1 port 1"]


def test_odd_readings_are_kept_apart_rather_than_failing_the_report():
    state = parse_qos_state(
        "tclass mlx5_0 Global tclass=-1\nnetdev mlx5_0 eth4\n"
        "dcb_pfc eth4 prio-pfc 0:off 1:off 2:off 3:on 4:off 5:off 6:off 7:off\n"
        "dcb_app eth4 dscp-prio LE:1 26:3\necn eth4 roce_np/enable/3:1\n"
    )
    assert state.tclass == {"mlx5_0": -1} and state.nics["eth4"].dscp_priorities == {26: 3}
    ecn = [link for link in nic_links(RoceQos("dcqcn"), state, ["mlx5_0"]) if link.check in ("roce.ecn", "roce.cnp")]
    assert [(link.subject, link.ok, link.unknown is not None) for link in ecn] == [
        ("eth4 roce_np/enable/3", True, False),
        ("eth4 roce_rp/enable/3", False, True),  # a file this driver lacks: not judged, not set
        ("eth4 roce_np/cnp_802p_prio", False, True),
        ("eth4 roce_np/cnp_dscp", False, True),
    ]
    said = parse_mlnx_qos(
        "eth4", "Traceback (most recent call last):\n  ...\nOSError: [Errno 95] Operation not supported\n"
    )
    assert said.unsupported == "OSError: [Errno 95] Operation not supported"


def test_the_node_report_reads_the_chain_only_where_it_is_declared():
    assert report_arguments(lab_host())["roce_qos"] is False
    declared = lab_host(roce_qos={"profile": "dcqcn"})
    assert report_arguments(declared)["roce_qos"] is True
    assert "mlnx_qos" in node_report_command(**report_arguments(declared))
    assert "mlnx_qos" not in node_report_command(**report_arguments(lab_host()))


def _hw_counters() -> dict[str, int]:
    """An mlx5 RoCE port's hw_counters as `rdma statistic` printed them (name value pairs)."""
    words = (QOS / "rdma_statistic_single_line_mlx5_2_ja_blog.txt").read_text().split()[2:]
    return {name: int(value) for name, value in zip(words[::2], words[1::2], strict=True)}


def test_ecn_marks_or_cnps_on_a_pfc_only_fabric_name_the_node():
    pfc_only = node_config({"fabric": "roce", "roce_qos": {"profile": "pfc_only"}})
    assert [c.check_id for c in counter_checks(pfc_only)] == [
        "rdma.port_errors",
        "roce.pause",
        "roce.pause_time",
        "roce.ecn_activity",
    ]
    dcqcn = node_config({"fabric": "roce", "roce_qos": {"profile": "dcqcn"}})
    assert [c.check_id for c in counter_checks(dcqcn)][:3] == ["rdma.port_errors", "roce.pause", "roce.pause_time"]
    assert [c.check_id for c in counter_checks(node_config({"fabric": "roce"}))] == ["rdma.port_errors"]
    softroce = node_config({"fabric": "softroce", "rdma": {"netdevs": ["eth0"]}, "roce_qos": {"profile": "pfc_only"}})
    assert [c.check_id for c in counter_checks(softroce)] == ["rdma.port_errors"]

    before = _hw_counters()
    assert {before[n] for n in ("np_ecn_marked_roce_packets", "np_cnp_sent", "rp_cnp_handled")} == {0}
    previous = {"at": 0.0, "boot": "b", "ports": {"mlx5_2/1": before}}
    quiet = counter_findings("gpu1", "roce", 600.0, {"mlx5_2/1": before}, previous, "b", counter_checks(pfc_only))
    assert [(f.id, f.ok) for f in quiet] == [("roce.ecn_activity", True)]  # no error counter in hw_counters
    after = {**before, "rp_cnp_handled": 42}  # a peer sends CNPs: it runs DCQCN
    [found] = counter_findings("gpu1", "roce", 600.0, {"mlx5_2/1": after}, previous, "b", counter_checks(pfc_only))
    assert (found.id, found.ok, found.found) == ("roce.ecn_activity", False, "rp_cnp_handled +42 in 10 min")
    assert found.deploy is None and "declared PFC-only" in found.hint  # the cause may be another node
    # a node whose reaction point is off, as pfc_only sets it, counts a peer's CNPs as ignored
    ignored = {**before, "rp_cnp_ignored": 7}
    [found] = counter_findings("gpu1", "roce", 600.0, {"mlx5_2/1": ignored}, previous, "b", counter_checks(pfc_only))
    assert (found.ok, found.found) == (False, "rp_cnp_ignored +7 in 10 min")


def test_under_dcqcn_every_ecn_mark_is_answered_and_no_cnp_ignored():
    dcqcn = node_config({"fabric": "roce", "roce_qos": {"profile": "dcqcn"}})
    assert counter_checks(dcqcn)[-1].check_id == "roce.dcqcn"
    before = _hw_counters()
    previous = {"at": 0.0, "boot": "b", "ports": {"mlx5_2/1": before}}

    def judged(**grown: int):
        after = {name: before[name] + grown.get(name, 0) for name in before}
        [found] = counter_findings("gpu1", "roce", 7200.0, {"mlx5_2/1": after}, previous, "b", counter_checks(dcqcn))
        return found

    # congestion controlled: marks answered by fewer CNPs, senders slowing on the CNPs they got
    working = judged(np_ecn_marked_roce_packets=5000, np_cnp_sent=800, rp_cnp_handled=650)
    assert (working.id, working.ok, working.found) == ("roce.dcqcn", True, "none grew past its limit in 2.0 h")
    assert working.expected == "rp_cnp_ignored +0, np_ecn_marked_roce_packets +0 unless np_cnp_sent grew"
    # the notification point off for the priority: marks, and not one CNP
    silent = judged(np_ecn_marked_roce_packets=5000)
    assert (silent.ok, silent.found) == (False, "np_ecn_marked_roce_packets +5000 with no np_cnp_sent in 2.0 h")
    assert "ecn/roce_np/enable/3" in silent.hint and "apply --tags roce_qos" in silent.hint
    # the reaction point off: CNPs arrive and are ignored, the sender never slows
    deaf = judged(rp_cnp_ignored=42, np_ecn_marked_roce_packets=10, np_cnp_sent=2)
    assert (deaf.ok, deaf.found) == (False, "rp_cnp_ignored +42 in 2.0 h")
    # a driver reload between the checks: CNPs counted from zero again, so no verdict but a new baseline
    reloaded = {**before, "np_ecn_marked_roce_packets": 50, "np_cnp_sent": 0}
    previous_high = {
        **previous,
        "ports": {"mlx5_2/1": {**before, "np_ecn_marked_roce_packets": 10, "np_cnp_sent": 900}},
    }
    [found] = counter_findings("gpu1", "roce", 600.0, {"mlx5_2/1": reloaded}, previous_high, "b", counter_checks(dcqcn))
    assert (found.ok, found.found) == (True, "counters reset since the last check: new baseline")
    # a port that counts marks but not the CNPs it sends: its marks are not judged
    uncounted = {name: value for name, value in before.items() if name != "np_cnp_sent"}
    after = {**uncounted, "np_ecn_marked_roce_packets": 9}
    [found] = counter_findings(
        "gpu1",
        "roce",
        60.0,
        {"mlx5_2/1": after},
        {**previous, "ports": {"mlx5_2/1": uncounted}},
        "b",
        counter_checks(dcqcn),
    )
    assert found.ok, found.found


def _pause(name: str) -> dict[str, int]:
    return pause_counters((QOS / f"ethtool_S_{name}.txt").read_text())


def test_each_driver_s_pause_counters_are_read_under_one_set_of_names():
    bnxt, ice = _pause("bnxt_en_pfc_pri_counters_all_zero_ethq"), _pause("ice_priority_xon_xoff_all_zero_ethq")
    every = {f"{way}_pfc_prio{p}" for way in ("rx", "tx") for p in range(8)} | {"rx_link_pause", "tx_link_pause"}
    times = {f"{way}_pfc_prio{p}_pause_us" for way in ("rx", "tx") for p in range(8)}  # bnxt_en's alone
    assert set(bnxt) == every | times and set(ice) == every and set(bnxt.values()) == set(ice.values()) == {0}
    # mlx5 with PFC off prints no per-priority pause, and its link-level pause counts
    assert _pause("mlx5_core_cx6dx_global_pause_no_pfc_zeros_dropped_abridged") == {"tx_link_pause": 5745042}
    assert _pause("virtio_net_two_queues_no_pause_ethq") == {}


def test_the_node_report_judges_the_nics_pause_counters_with_the_ports_counters():
    qos = (QOS / "ethtool_S_bnxt_en_pfc_pri_counters_all_zero_ethq.txt").read_text().splitlines()
    text = "@@ roce_qos\nnetdev mlx5_0 eth4\n" + "".join(f"ethtool eth4 {line}\n" for line in qos)
    text += "@@ counters\n/sys/class/infiniband/mlx5_0/ports/1/counters/link_downed:0\n"
    report = parse_node_report(text)
    assert report.counters["mlx5_0/1"] == {"link_downed": 0}
    assert report.counters["eth4"] == _pause("bnxt_en_pfc_pri_counters_all_zero_ethq")


def test_pause_outside_the_roce_priority_or_link_level_pause_names_the_nic():
    node = node_config({"fabric": "roce", "roce_qos": {"profile": "dcqcn", "priority": 3}})
    checks = counter_checks(node)
    before = {"eth4": _pause("bnxt_en_pfc_pri_counters_all_zero_ethq")}
    previous = {"at": 0.0, "boot": "b", "ports": before}
    working = {"eth4": {**before["eth4"], "rx_pfc_prio3": 9000, "tx_pfc_prio3": 120}}  # lossless doing its job
    quiet = counter_findings("gpu1", "roce", 600.0, working, previous, "b", checks)
    assert [(f.id, f.ok) for f in quiet] == [("roce.pause", True), ("roce.pause_time", True)]
    stray = {"eth4": {**before["eth4"], "rx_pfc_prio0": 77, "tx_link_pause": 5}}
    storm = pause_counters("     tx_pause_storm_warning_events: 0\n     tx_pause_storm_error_events: 2\n")
    assert storm == {"pause_storm_warning": 0, "pause_storm_error": 2}
    found, _ = counter_findings("gpu1", "roce", 600.0, stray, previous, "b", checks)
    assert (found.id, found.subject, found.ok) == ("roce.pause", "eth4", False)
    assert found.found == "rx_pfc_prio0 +77; tx_link_pause +5 in 10 min", found.found
    assert "priority 3 alone" in found.hint and "ethtool -A" in found.hint


def test_time_a_node_holds_its_switch_paused_is_judged_as_a_share_of_the_time_between_checks():
    # mlx5 prints a PFC priority's pause time beside its frames (the driver's names; the real
    # capture above has PFC off, so none); bnxt_en its own names (in the real capture, all 0)
    lines = "     rx_prio3_pause: 1200\n     rx_prio3_pause_duration: 5400000\n     tx_prio3_pause_duration: 0\n"
    assert pause_counters(lines) == {"rx_pfc_prio3": 1200, "rx_pfc_prio3_pause_us": 5400000, "tx_pfc_prio3_pause_us": 0}
    bnxt = _pause("bnxt_en_pfc_pri_counters_all_zero_ethq")
    times = {f"{way}_pfc_prio{p}_pause_us" for way in ("rx", "tx") for p in range(8)}
    assert times <= set(bnxt) and {bnxt[name] for name in times} == {0}
    # the real mlx5 capture's link-level pause time is not a priority's; ice counts no time
    assert not any(k.endswith("_us") for k in _pause("mlx5_core_cx6dx_global_pause_no_pfc_zeros_dropped_abridged"))
    assert not any(k.endswith("_us") for k in _pause("ice_priority_xon_xoff_all_zero_ethq"))
    node = node_config({"fabric": "roce", "roce_qos": {"profile": "dcqcn", "priority": 3}})
    previous = {"at": 0.0, "boot": "b", "ports": {"eth4": bnxt}}

    def judged(window_s: float, rx_us: int, tx_us: int):
        now = {"eth4": {**bnxt, "rx_pfc_prio3_pause_us": rx_us, "tx_pfc_prio3_pause_us": tx_us}}
        found = counter_findings("gpu1", "roce", window_s, now, previous, "b", counter_checks(node))
        return next(f for f in found if f.id == "roce.pause_time")

    # 10 minutes apart: 1 % is 6 s. Holding the switch 5.9 s passes, 12 s does not; the switch
    # holding this node (rx) names congestion elsewhere, not this node: not judged
    assert judged(600.0, 0, 5_900_000).ok and judged(600.0, 500_000_000, 0).ok
    held = judged(600.0, 0, 12_000_000)
    assert (held.subject, held.ok) == ("eth4", False)
    assert held.found == "tx_pfc_prio3_pause_us +12.0 s (2.0 % of the time) in 10 min", held.found
    assert "≤ 1 % of the time (at least 1 s)" in held.expected and "PCIe" in held.hint
    # Slurm's checks 20 s apart: a 0.3 s burst is no finding (the 1 s floor), 1.5 s is
    assert judged(20.0, 0, 300_000).ok and not judged(20.0, 0, 1_500_000).ok
    # a clock that went back: the floor alone holds (no share of a negative time)
    assert judged(-5.0, 0, 300_000).ok
    assert judged(-5.0, 0, 12_000_000).found == "tx_pfc_prio3_pause_us +12.0 s in -5 s"  # a clock gone back


def _fake_sys(root: Path) -> None:
    """A ConnectX node's sysfs as the reading sees it: mlx5_0 a RoCE port (ToS, tc/1, netdev eth4
    with mlx5's ECN files), mlx5_1 an InfiniBand port with an IPoIB netdev (no QoS to read)."""
    files = {
        "class/infiniband/mlx5_0/ports/1/link_layer": "Ethernet",
        "class/infiniband/mlx5_0/tc/1/traffic_class": "Global tclass=106",
        "class/infiniband/mlx5_1/ports/1/link_layer": "InfiniBand",
        "class/net/eth4/ecn/roce_np/enable/3": "1",
        "class/net/eth4/ecn/roce_rp/enable/3": "1",
        "class/net/eth4/ecn/roce_np/cnp_802p_prio": "6",
        "class/net/eth4/ecn/roce_np/cnp_dscp": "48",
        "kernel/config/rdma_cm/mlx5_0/ports/1/default_roce_tos": "106",
    }
    for path, text in files.items():
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_text(text + "\n")
    for device, netdev, pci in (("mlx5_0", "eth4", "0000:4b:00.1"), ("mlx5_1", "ib0", "0000:4c:00.0")):
        (root / f"devices/{pci}/net/{netdev}").mkdir(parents=True)  # device: a link to its PCI function
        (root / f"class/infiniband/{device}/device").symlink_to(f"../../../devices/{pci}")
    (root / "class/net/ib0").mkdir()


@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("unshare"), reason="needs root for a mount namespace")
def test_the_reading_itself_on_a_connectx_shaped_sysfs(tmp_path):
    """The roce_qos shell command run for real over a ConnectX-shaped /sys (bind-mounted in a
    private mount namespace) with an mlnx_qos that answers with a real capture."""
    _fake_sys(tmp_path / "sys")
    tool = tmp_path / "bin" / "mlnx_qos"
    tool.parent.mkdir()
    tool.write_text(f"#!/bin/sh\ncat {QOS / 'mlnx_qos_fw_dcbx_trust_dscp_pfc3_ets_cx5.txt'}\n")
    tool.chmod(0o755)
    ethtool = tool.parent / "ethtool"  # `ethtool -S eth4` answers with a real bnxt_en capture
    ethtool.write_text(
        f"#!/bin/sh\n[ \"$*\" = '-S eth4' ] && cat {QOS / 'ethtool_S_bnxt_en_pfc_pri_counters_all_zero_ethq.txt'}\n"
    )
    ethtool.chmod(0o755)
    script = f"mount --bind {tmp_path / 'sys'} /sys && PATH={tool.parent}:$PATH && {roce_qos_command()}"
    out = subprocess.run(["unshare", "-m", "sh", "-c", script], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and out.stderr == "", out.stderr
    state = parse_qos_state(out.stdout)
    assert state.tos == {"mlx5_0": {1: 106}} and state.tclass == {"mlx5_0": 106}
    assert state.netdevs == {"mlx5_0": ("eth4",)}  # the IPoIB netdev of the InfiniBand port is not read
    nic = state.nics["eth4"]
    assert (nic.tool, nic.trust, nic.pfc, nic.dscp_priorities[26]) == ("mlnx_qos", "dscp", RoceQos().pfc, 3)
    assert nic.ecn == {"roce_np/enable/3": 1, "roce_rp/enable/3": 1, "roce_np/cnp_802p_prio": 6, "roce_np/cnp_dscp": 48}
    assert all(link.ok for link in chain_links(RoceQos("dcqcn"), "roce", state, [], ()))
    assert state.pause == {"eth4": _pause("bnxt_en_pfc_pri_counters_all_zero_ethq")}


@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("unshare"), reason="needs root for a mount namespace")
def test_the_firmware_reading_itself_asks_the_tool_for_the_devices_pci_function(tmp_path):
    """With roce_qos.firmware the same command asks mstconfig for each RoCE device's settings by
    its PCI address; here an mstconfig that answers with a real ConnectX-4 Lx query."""
    sys = tmp_path / "sys"
    _fake_sys(sys)
    # a VF (its physfn link) is not asked; a device whose name has a '|' is tagged as it is
    for device, pci, vf in (("mlx5_2", "0000:4b:00.2", True), ("mlx5|3", "0000:4d:00.0", False)):
        (sys / f"class/infiniband/{device}/ports/1").mkdir(parents=True)
        (sys / f"class/infiniband/{device}/ports/1/link_layer").write_text("Ethernet\n")
        (sys / f"devices/{pci}").mkdir(parents=True)
        if vf:
            (sys / f"devices/{pci}/physfn").symlink_to("../0000:4b:00.0")
        (sys / f"class/infiniband/{device}/device").symlink_to(f"../../../devices/{pci}")
    tool = tmp_path / "bin" / "mstconfig"
    tool.parent.mkdir()
    tool.write_text(f"#!/bin/sh\n[ \"$*\" = '-e -d 0000:4b:00.1 q' ] && cat {QOS / NEXT_BOOT}\n")
    tool.chmod(0o755)
    script = f"mount --bind {tmp_path / 'sys'} /sys && PATH={tool.parent}:$PATH && {roce_qos_command(firmware=True)}"
    out = subprocess.run(["unshare", "-m", "sh", "-c", script], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and out.stderr == "", out.stderr
    state = parse_qos_state(out.stdout)
    assert sorted(state.firmware) == ["mlx5_0", "mlx5|3"]  # not the InfiniBand port's device, nor the VF
    nic = state.firmware["mlx5_0"]
    assert (nic.pci, nic.tool, nic.port) == ("0000:4b:00.1", "mstconfig", 2)
    assert state.firmware["mlx5|3"].config.next_boot == {}
    assert nic.config.next_boot == parse_mlxconfig_query((QOS / NEXT_BOOT).read_text()).next_boot
    links = [link for link in chain_links(RoceQos("dcqcn", firmware=True), "roce", state, [], ()) if link.next_boot]
    assert [(link.subject, link.ok) for link in links] == [
        ("mlx5_0 ROCE_CC_PRIO_MASK_P2", True),
        ("mlx5_0 CNP_802P_PRIO_P2", True),
        ("mlx5_0 CNP_DSCP_P2", True),
    ]


@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("unshare"), reason="needs root for a mount namespace")
def test_a_roce_lag_device_is_read_and_set_on_both_pfs_of_its_bond(tmp_path):
    """RoCE LAG: a ConnectX's two PF netdevs in bond0 show as one device, mlx5_bond_0, its `device`
    the first PF and its GIDs on bond0. Both PFs' DCB is read and set (the second here still on
    `trust pcp`, a real capture), and the firmware's settings for both ports are judged. Not a LAG:
    two NICs in one bond, the two ports of one NIC bonded with LAG off (each PF its own device),
    and an rxe link on a macvlan (whose lower netdev is eth0)."""
    sys = tmp_path / "sys"
    roce = {"mlx5_bond_0": "bond0", "mlx5_2": "bond1", "mlx5_3": "bond1", "mlx5_4": "bond2", "mlx5_5": "bond2"}
    files = {
        "kernel/config/rdma_cm/mlx5_bond_0/ports/1/default_roce_tos": "106",
        "class/infiniband/rxe1/ports/1/link_layer": "Ethernet",
        "class/infiniband/rxe1/ports/1/gid_attrs/ndevs/0": "mv0",
        "class/infiniband/rxe1/parent": "mv0",
    }
    for device, bond in roce.items():
        files[f"class/infiniband/{device}/ports/1/link_layer"] = "Ethernet"
        files[f"class/infiniband/{device}/ports/1/gid_attrs/ndevs/0"] = bond
    for path, text in files.items():
        (sys / path).parent.mkdir(parents=True, exist_ok=True)
        (sys / path).write_text(text + "\n")
    pfs = {  # netdev: (its PCI function, the RDMA device on that function; None: none, as in LAG)
        "ens1f0np0": ("0000:17:00.0", "mlx5_bond_0"),
        "ens1f1np1": ("0000:17:00.1", None),
        "ens3f0np0": ("0000:31:00.0", "mlx5_2"),
        "ens4f0np0": ("0000:4b:00.0", "mlx5_3"),
        "ens5f0np0": ("0000:5e:00.0", "mlx5_4"),
        "ens5f1np1": ("0000:5e:00.1", "mlx5_5"),
    }
    (sys / "class/net").mkdir(parents=True, exist_ok=True)
    for netdev, (pci, device) in pfs.items():
        (sys / f"devices/{pci}/net/{netdev}").mkdir(parents=True)
        (sys / f"devices/{pci}/net/{netdev}/device").symlink_to("../..")
        (sys / f"class/net/{netdev}").symlink_to(f"../../devices/{pci}/net/{netdev}")
        for name, value in (("roce_np/enable/3", 1), ("roce_rp/enable/3", 1), ("roce_np/cnp_802p_prio", 6)):
            (sys / f"class/net/{netdev}/ecn/{name}").parent.mkdir(parents=True, exist_ok=True)
            (sys / f"class/net/{netdev}/ecn/{name}").write_text(f"{value}\n")
        (sys / f"class/net/{netdev}/ecn/roce_np/cnp_dscp").write_text("48\n")
        if device is not None:
            (sys / f"devices/{pci}/infiniband/{device}").mkdir(parents=True)
            (sys / f"class/infiniband/{device}/device").symlink_to(f"../../../devices/{pci}")
    lowers = {"bond0": ("ens1f0np0", "ens1f1np1"), "bond1": ("ens3f0np0", "ens4f0np0"), "mv0": ("eth0",)}
    lowers |= {"bond2": ("ens5f0np0", "ens5f1np1")}
    for upper, names in (*lowers.items(), ("eth0", ())):
        (sys / f"class/net/{upper}").mkdir(exist_ok=True)
        if upper.startswith("bond"):
            (sys / f"class/net/{upper}/bonding").mkdir()
        for lower in names:
            (sys / f"class/net/{upper}/lower_{lower}").symlink_to(f"../{lower}")
    tools = tmp_path / "bin"
    tools.mkdir()
    answers = {
        "mlnx_qos": f"""case "$*" in *ens1f1np1) cat {QOS / "mlnx_qos_trust_pcp_pfc_off_centos12.txt"} ;;
            *) cat {QOS / "mlnx_qos_fw_dcbx_trust_dscp_pfc3_ets_cx5.txt"} ;; esac""",
        "mstconfig": f"[ \"$*\" = '-e -d 0000:17:00.0 q' ] && cat {QOS / NEXT_BOOT}",
    }
    for name, body in answers.items():
        (tools / name).write_text(f"#!/bin/sh\n{body}\n")
        (tools / name).chmod(0o755)
    script = f"mount --bind {sys} /sys && PATH={tools}:$PATH && {roce_qos_command(firmware=True)}"
    out = subprocess.run(["unshare", "-m", "sh", "-c", script], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and out.stderr == "", out.stderr
    state = parse_qos_state(out.stdout)
    assert state.lags == {"mlx5_bond_0": "bond0"}
    assert state.netdevs == {
        "mlx5_bond_0": ("ens1f0np0", "ens1f1np1"),
        "mlx5_2": ("ens3f0np0",),
        "mlx5_3": ("ens4f0np0",),
        "mlx5_4": ("ens5f0np0",),
        "mlx5_5": ("ens5f1np1",),
        "rxe1": ("mv0",),
    }
    assert (state.nics["ens1f0np0"].trust, state.nics["ens1f1np1"].trust) == ("dscp", "pcp")
    assert state.firmware_ports("mlx5_bond_0") == (1, 2) and state.firmware_ports("mlx5_4") == (1,)
    links = chain_links(RoceQos("dcqcn", tool="mlnx_qos", firmware=True), "roce", state, ["mlx5_bond_0"], ())
    failing = {(link.check, link.subject) for link in links if not link.ok}
    assert failing == {("roce.trust", "ens1f1np1"), ("roce.pfc", "ens1f1np1"), ("roce.dscp_map", "ens1f1np1")}
    fixes = [line for link in links if not link.ok for line in link.commands]
    assert fixes[:2] == ["mlnx_qos -i ens1f1np1 --trust dscp", "mlnx_qos -i ens1f1np1 --pfc 0,0,0,1,0,0,0,0"]
    assert fixes[2:] == ["mlnx_qos -i ens1f1np1 --dscp2prio set,26,3", "mlnx_qos -i ens1f1np1 --dscp2prio set,48,6"]
    firmware = [link.subject for link in links if link.next_boot]
    assert firmware == [f"mlx5_bond_0 {name}_P{port}" for port in (1, 2) for name in FIRMWARE_NAMES]


def test_the_chain_as_read_goes_into_facts_json():
    state = parse_qos_state((FIXTURES / "lab" / "roce_qos_rxe_virtio.txt").read_text())
    doc = json.loads(json.dumps(FactsReport({"node1": NodeReport(roce_qos=state)}, {}).to_json()))
    assert doc["node1"]["roce_qos"]["tos"] == {"rxe0": {"1": 106}}
    assert doc["node1"]["roce_qos"]["nics"]["eth0"]["unsupported"] == "Attribute read: Operation not supported"


def test_the_section_read_back_from_its_own_settings_is_the_same():
    qos = RoceQos("pfc_only", priority=5, dscp=34, cnp_priority=7, cnp_dscp=56, tool="mlnx_qos")
    assert RoceQos.from_settings(qos.settings()) == qos
    assert node_config({"fabric": "roce", "roce_qos": qos.settings()}).roce_qos == qos


# --- the NICs' firmware settings (roce_qos.firmware) ----------------------------------------------

NEXT_BOOT = "mlxconfig_q_cx4lx_next_boot_xtremeownage.txt"  # a ConnectX-4 Lx, plain `q`
FIRMWARE_NAMES = ("ROCE_CC_PRIO_MASK", "CNP_802P_PRIO", "CNP_DSCP")


def test_mlxconfig_queries_read_with_and_without_the_running_values():
    plain = parse_mlxconfig_query((QOS / NEXT_BOOT).read_text())
    assert len(plain.next_boot) == 161 and plain.current == {} and plain.errors == ()
    assert {name: plain.next_boot[name] for name in ("ROCE_CC_PRIO_MASK_P1", "CNP_802P_PRIO_P1", "CNP_DSCP_P2")} == {
        "ROCE_CC_PRIO_MASK_P1": 255,
        "CNP_802P_PRIO_P1": 6,
        "CNP_DSCP_P2": 48,
    }
    assert plain.next_boot["SRIOV_EN"] == 0 and plain.next_boot["EXP_ROM_UEFI_x86_ENABLE"] == 0
    assert plain.next_boot["PCI_DOWNSTREAM_PORT_OWNER"] is None  # Array[0..15]: no number
    # -e: default, current and next boot; '*' marks a next boot that differs (the '...' rows the
    # document's author cut are skipped)
    verbose = parse_mlxconfig_query((QOS / "mlxconfig_e_q_cx5_default_current_next_elided_hpe.txt").read_text())
    assert verbose.next_boot == {
        "MEMIC_BAR_SIZE": 0,
        "MEMIC_SIZE_LIMIT": 1,
        "ADVANCED_PCI_SETTINGS": 1,
        "SAFE_MODE_THRESHOLD": 10,
        "SAFE_MODE_ENABLE": 1,
    }
    assert verbose.current == verbose.next_boot


def _firmware(device: str, pci: str, query: str, tool: str = "/usr/bin/mstconfig") -> str:
    return f"fwtool {device} {tool} {pci}\n" + "".join(f"fw {device} {line}\n" for line in query.splitlines())


def _with_firmware(query: str, pci: str = "0000:01:00.0") -> QosState:
    return parse_qos_state(
        "tos mlx5_0 1 106\ntclass mlx5_0 Global tclass=106\nnetdev mlx5_0 eth4\n"
        + _prefixed("mlnx_qos", "eth4", "mlnx_qos_fw_dcbx_trust_dscp_pfc3_ets_cx5.txt")
        + _ecn("eth4", 1)
        + _firmware("mlx5_0", pci, query)
    )


def _firmware_links(qos: RoceQos, state: QosState):
    return [link for link in chain_links(qos, "roce", state, [], ()) if link.check == "roce.firmware"]


def test_firmware_settings_are_judged_for_the_port_the_function_drives():
    query = (QOS / NEXT_BOOT).read_text()
    dcqcn = RoceQos("dcqcn", tool="mlnx_qos", firmware=True)
    links = _firmware_links(dcqcn, _with_firmware(query))
    assert [(link.subject, link.expected, link.found, link.ok) for link in links] == [
        ("mlx5_0 ROCE_CC_PRIO_MASK_P1", "255", "255", True),  # the firmware's default: every priority
        ("mlx5_0 CNP_802P_PRIO_P1", "6", "6", True),
        ("mlx5_0 CNP_DSCP_P1", "48", "48", True),
    ]
    assert all(link.next_boot for link in links)
    # the second function of a dual-port card is its port 2; PFC only takes priority 3 off the mask
    pfc_only = replace(dcqcn, profile="pfc_only", cnp_dscp=46)
    second = _firmware_links(pfc_only, _with_firmware(query, "0000:01:00.1"))
    assert [(link.subject, link.expected, link.ok, link.commands) for link in second if not link.ok] == [
        (
            "mlx5_0 ROCE_CC_PRIO_MASK_P2",
            "247",
            False,
            ("mstconfig -y -d 0000:01:00.1 set ROCE_CC_PRIO_MASK_P2=247",),
        ),
        ("mlx5_0 CNP_DSCP_P2", "46", False, ("mstconfig -y -d 0000:01:00.1 set CNP_DSCP_P2=46",)),
    ]
    # not declared: not read, not judged
    assert _firmware_links(replace(dcqcn, firmware=False), _with_firmware(query)) == []


def test_a_firmware_change_owes_a_reboot_and_stays_out_of_the_boot_unit():
    query = (QOS / NEXT_BOOT).read_text().replace("CNP_DSCP_P1                                 48", "CNP_DSCP_P1  40")
    state = _with_firmware(query)
    qos = RoceQos("dcqcn", tool="mlnx_qos", firmware=True)
    out, notes = run_notes(chain_now, {RoceQosState: state}, qos=qos, fabric="roce", named=[], storage=[])
    assert out == ["mstconfig -y -d 0000:01:00.0 set CNP_DSCP_P1=48"]
    assert notes.reboots["node1"] == ["RoCE QoS firmware settings take effect at the next boot: mlx5_0 CNP_DSCP_P1"]
    assert "mstconfig" not in render_script(qos, chain_links(qos, "roce", state, [], ()))
    # set, not yet in force (the firmware shows the running value: -e): nothing to run, a reboot still owed
    pending = query.replace("Configurations:                                          Next Boot",
                            "Configurations:          Current    Next Boot")  # fmt: skip
    pending = re.sub(r"^( +)(\S+)( +)(\S+)$", r"\1\2\3\4 \4", pending, flags=re.M)
    pending = pending.replace("CNP_DSCP_P1  40 40", "CNP_DSCP_P1  40 48")
    state = _with_firmware(pending)
    [link] = [link for link in _firmware_links(qos, state) if not link.ok]
    assert (link.found, link.commands) == ("40 now, 48 from the next boot", ())
    out, notes = run_notes(chain_now, {RoceQosState: state}, qos=qos, fabric="roce", named=[], storage=[])
    assert out == [] and notes.reboots["node1"] == [
        "RoCE QoS firmware settings take effect at the next boot: mlx5_0 CNP_DSCP_P1"
    ]
    findings = verify_node(_roce(qos.settings()), NodeReport(roce_qos=state))
    [finding] = [f for f in findings if f.id.startswith("roce.") and not f.ok]
    assert (finding.id, finding.subject, finding.found) == (
        "roce.firmware",
        "mlx5_0 CNP_DSCP_P1",
        "40 now, 48 from the next boot",
    )


def test_firmware_that_cannot_be_read_is_named_with_what_to_install():
    qos = RoceQos("dcqcn", firmware=True)
    missing = parse_qos_state("tos mlx5_0 1 106\nnetdev mlx5_0 eth4\nfwtool mlx5_0 - 0000:01:00.0\n")
    [link] = _firmware_links(qos, missing)
    assert link.unknown is not None and "mstflint" in link.unknown and "mlxconfig" in link.unknown
    lacking = _with_firmware("-E- The Device doesn't support CNP_DSCP_P1 parameter")
    assert {link.unknown for link in _firmware_links(qos, lacking)} == {
        "mstconfig cannot read ROCE_CC_PRIO_MASK_P1 of mlx5_0 (0000:01:00.0): "
        "The Device doesn't support CNP_DSCP_P1 parameter",
        "mstconfig cannot read CNP_802P_PRIO_P1 of mlx5_0 (0000:01:00.0): "
        "The Device doesn't support CNP_DSCP_P1 parameter",
        "mstconfig cannot read CNP_DSCP_P1 of mlx5_0 (0000:01:00.0): The Device doesn't support CNP_DSCP_P1 parameter",
    }


def test_the_node_report_queries_the_firmware_only_where_declared_and_node_check_never():
    from rdmaprov.nodecheck.run import report_command

    assert "mstconfig" not in roce_qos_command() and "mstconfig" in roce_qos_command(firmware=True)
    declared = _roce({"profile": "dcqcn", "firmware": True})
    assert report_arguments(declared)["qos_firmware"] is True
    assert "mstconfig -e" not in node_report_command(**report_arguments(_roce({"profile": "dcqcn"})))
    assert '-e -d "$a" q' in node_report_command(**report_arguments(declared))
    assert '-e -d "$a" q' not in report_command(declared)
    # only where the NIC side is the hosts': not on SoftRoCE, whose NICs have no DCB
    softroce = lab_host(roce_qos={"profile": "dcqcn", "firmware": True})
    assert report_arguments(softroce)["qos_firmware"] is False
    assert [RoceQos("dcqcn", firmware=f).reads_firmware(fabric) for f, fabric in ((True, "roce"), (False, "roce"))] == [
        True,
        False,
    ]
