"""Parsers on real captured outputs, verdicts computed by hand, verify checks and gate planning."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from rdmaprov.engine.applied import classify_fact
from rdmaprov.engine.session import HostLost
from rdmaprov.facts.node_report import LINKED_NCCL
from rdmaprov.health.checks import roce_active_mtu, verify_node
from rdmaprov.health.diagnose import localize, neighbour_pairs, pair_verdicts
from rdmaprov.health.gates.all_reduce import (
    all_reduce_bounds,
    judge_run,
    nic_bandwidth,
    parse_probe_output,
    transport_verdict,
)
from rdmaprov.health.gates.bandwidth import Bounds, Reference, allreduce_busbw_gbs, judge
from rdmaprov.health.gates.ib_write_bw import TCP_PORT, bandwidth_tool
from rdmaprov.health.gates.node import default_threshold, judge_node, node_command
from rdmaprov.health.gates.pairs import all_pairs, ring_pairs, rounds
from rdmaprov.health.gates.perftest import Endpoint, perftest_words
from rdmaprov.health.gates.result import GateResult
from rdmaprov.health.gates.subject import Subject
from rdmaprov.health.verify import HostVerification
from rdmaprov.parsers.ibv_devinfo import parse_ibv_devinfo
from rdmaprov.parsers.limits import pam_memlock, parse_setting_lines, systemd_memlock
from rdmaprov.parsers.nccl_debug import parse_nccl_transport
from rdmaprov.parsers.nccl_tests import CollectiveRow, CollectiveRun, parse_nccl_tests
from rdmaprov.parsers.node import Gpu, parse_node_report, split_sections
from rdmaprov.parsers.nvidia_smi import GpuHealth, parse_nvidia_smi_q
from rdmaprov.parsers.perftest import parse_bw_output
from rdmaprov.parsers.rdma import RdmaLink, parse_rdma_link, parse_rdma_system
from rdmaprov.parsers.units import parse_size
from rdmaprov.parsers.xid import parse_xids
from rdmaprov.report.junit import junit_xml
from tests.conftest import FIXTURES
from tests.support.inventories import gates_config, lab_host, node_config

SEED = FIXTURES / "seed"
SOFTROCE = FIXTURES / "softroce-lab"
LAB = Path(__file__).resolve().parent.parent / "fixtures" / "lab"


def test_ibv_devinfo_irdma_roce_25g():
    [device] = parse_ibv_devinfo((SEED / "ibv_devinfo-v_irdma0.txt").read_text())
    assert (device.hca, device.fw_ver, device.node_guid) == ("irdma0", "1.53", "b696:91ff:feec:a458")
    [port] = device.ports
    assert (port.number, port.state, port.phys_state, port.link_layer) == (1, "PORT_ACTIVE", "LINK_UP", "Ethernet")
    assert (port.max_mtu, port.active_mtu, port.active_width, port.active_speed) == (4096, 1024, "4X", "25.0 Gbps")
    assert [(g.index, g.gid, g.type) for g in port.gids] == [
        (0, "fe80::b696:91ff:feec:a458", "RoCE v2"),
        (1, "::ffff:10.100.100.1", "RoCE v2"),
    ]


def test_ibv_devinfo_rxe_short_and_verbose():
    [short] = parse_ibv_devinfo((SOFTROCE / "ibv_devinfo_rxe0.txt").read_text())
    assert short.hca == "rxe0" and short.ports[0].state == "PORT_ACTIVE" and short.ports[0].active_mtu == 1024
    report = parse_node_report((LAB / "node_report_rxe.txt").read_text())
    [verbose] = report.devices
    assert verbose.ports[0].gids[1].gid == "::ffff:10.78.111.11"
    assert (verbose.ports[0].active_width, verbose.ports[0].active_speed) == ("1X", "2.5 Gbps")


def test_ib_write_bw_outputs():
    roce = parse_bw_output((SEED / "ib_write_bw_client_roce_25g.txt").read_text())
    assert (roce.bytes, roce.iterations, roce.average_gbps, roce.device, roce.gid_index) == (
        65536,
        1324156,
        23.14,
        "irdma0",
        1,
    )
    rxe = parse_bw_output((SOFTROCE / "ib_write_bw_client_rxe_tcg.txt").read_text())
    assert (rxe.average_gbps, rxe.peak_gbps, rxe.device) == (0.048008, 0.097585, "rxe0")
    # the servers print the same result row
    assert parse_bw_output((SEED / "ib_write_bw_server_roce_25g.txt").read_text()).average_gbps == 23.14
    assert parse_bw_output((SOFTROCE / "ib_write_bw_server_rxe_tcg.txt").read_text()).iterations == 5000
    with pytest.raises(ValueError, match="--report_gbits"):
        parse_bw_output(
            " #bytes     #iterations    BW peak[MB/sec]    BW average[MB/sec]   MsgRate[Mpps]\n 65536 5000 12.0 11.0 "
            "0.1\n"
        )
    # 23.14 Gb/s on a 25G port is 92.6%: passes the default 90%.
    port = Reference(25.0, "irdma0 at 25 Gb/s", "the port rate")
    verdict = judge(roce.average_gbps, "Gb/s", Bounds(0.9, 0.95, 1.05), port)
    assert verdict.status == "warn" and verdict.threshold == pytest.approx(22.5)  # passes, below 95%
    assert verdict.reason == (
        "23.14 Gb/s (92.6% of the port rate) >= 22.5 Gb/s = 0.90 × the port rate (irdma0 at 25 Gb/s); "
        "below the warning level 0.95 × 25 Gb/s"
    )
    assert judge(24.0, "Gb/s", Bounds(0.9, 0.95, 1.05), port).status == "pass"
    too_fast = judge(27.0, "Gb/s", Bounds(0.9, 0.95, 1.05), port)
    assert too_fast.status == "fail" and "measurement error" in too_fast.reason
    # The lab's SoftRoCE: 0.15 Gb/s on a port whose sysfs says 2.5 Gb/s, held to an absolute
    # floor: a healthy run passes (no band under a rate emulation never reaches), a slow one fails.
    rxe = Reference(2.5, "rxe0 at 2.5 Gb/s", "the port rate")
    floor = Bounds(0.9, 0.95, 1.05, minimum=0.01, minimum_source="gates.ib_write_bw.min_gbps")
    assert judge(0.15, "Gb/s", floor, rxe).status == "pass"
    slow = judge(0.004, "Gb/s", floor, rxe)
    assert (slow.status, slow.reason) == (
        "fail",
        "0.004 Gb/s (0.2% of the port rate) < 0.01 Gb/s = gates.ib_write_bw.min_gbps 0.01 Gb/s",
    )


def test_nccl_tests_two_node_run_with_ucx_noise_busbw_by_hand():
    run = parse_nccl_tests((SEED / "nccl_tests_all_reduce_perf_2node_10GB.txt").read_text())
    [row] = run.rows
    assert (row.size, row.count, row.dtype, row.redop, row.time_us, row.busbw, row.wrong) == (
        10737418240,
        2684354560,
        "float",
        "sum",
        3825027.0,
        2.81,
        0,
    )
    assert (row.in_place_busbw, row.in_place_wrong, run.out_of_bounds, run.avg_busbw) == (2.81, 0, 0, 2.80687)
    # By hand: 10737418240 B / 3.825027 s = 2.8071 GB/s algbw; 2 ranks: busbw = algbw × 2(2−1)/2 = 2.8071.
    assert allreduce_busbw_gbs(row.size, row.time_us, 2) == pytest.approx(2.8071, abs=1e-4)
    # One 25 Gb/s NIC per node = 3.125 GB/s; 90% of it is 2.8125 GB/s: 2.81 misses it (89.9%).
    node = node_config({"rdma": {"devices": ["irdma0"], "rate_gbps": 25}})
    verdict = judge_run(run, all_reduce_bounds(gates_config().all_reduce), nic_bandwidth(node, None))
    assert (verdict.passed, verdict.measured, verdict.threshold) == (False, 2.81, pytest.approx(2.8125))
    assert verdict.reason == (
        "busbw at 10737418240 B: 2.81 GB/s (89.9% of the per-node NIC bandwidth) < 2.812 GB/s "
        "= 0.90 × the per-node NIC bandwidth (1 HCA × 25 Gb/s ÷ 8 = 3.125 GB/s)"
    )
    assert judge_run(
        run, all_reduce_bounds(gates_config({"all_reduce": {"fraction": 0.85}}).all_reduce), nic_bandwidth(node, None)
    ).passed


def test_nccl_tests_flattened_erdma_sweep():
    run = parse_nccl_tests((SEED / "nccl_tests_all_reduce_perf_16gpu_erdma_FLATTENED.txt").read_text())
    assert len(run.rows) == 30
    assert [r.size for r in run.rows[:4]] == [0, 0, 4, 8]
    largest = max(run.rows, key=lambda r: r.size)
    assert (largest.size, largest.time_us, largest.algbw, largest.busbw, largest.wrong) == (
        536870912,
        54083.0,
        9.93,
        18.61,
        None,
    )
    # By hand: 536870912 B / 54083 µs = 9.9268 GB/s; 16 ranks: × 2·15/16 = 18.6127 GB/s.
    assert allreduce_busbw_gbs(largest.size, largest.time_us, 16) == pytest.approx(18.6127, abs=1e-4)


def test_cpu_probe_output_from_the_lab():
    run = parse_probe_output((LAB / "allreduce_probe_2vm.txt").read_text(), 4194304)
    assert [r.size for r in run.rows] == [1048576, 2097152, 4194304]
    last = run.rows[-1]
    assert last.wrong == 0
    assert last.busbw == pytest.approx(4194304 / 82855.979e-6 / 1e9)  # 2 ranks: busbw = algbw
    verdict = judge_run(
        run, all_reduce_bounds(gates_config({"all_reduce": {"min_busbw_gbs": 0.0001}}).all_reduce), None
    )
    passed, reason = verdict.passed, verdict.reason
    assert passed and "busbw at 4194304 B" in reason
    wrong = parse_probe_output(
        '{"probe": "allreduce", "size": 4, "count": 1, "type": "float", "redop": "sum", "ranks": 2, "time_us": 5.0, '
        '"wrong": 1}',
        4,
    )
    assert (lambda v: (v.passed, v.reason))(
        judge_run(wrong, all_reduce_bounds(gates_config({"all_reduce": {"min_busbw_gbs": 0}}).all_reduce), None)
    ) == (False, "wrong results: 1 wrong elements, 0 out-of-bounds values")


def test_rdma_system_fixtures():
    assert parse_rdma_system((SEED / "rdma_system_show_exclusive.txt").read_text())["netns"] == "exclusive"
    assert parse_rdma_system((SEED / "rdma_system_show_shared.txt").read_text())["netns"] == "shared"


def test_verify_passes_on_the_converged_lab_report():
    report = parse_node_report((LAB / "node_report_rxe.txt").read_text())
    findings = verify_node(lab_host(), report)
    assert [f for f in findings if not f.ok] == []
    assert {f.check for f in findings} >= {
        "port state",
        "physical state",
        "link layer",
        "GID index 1",
        "active MTU",
        "netns mode",
        "login limit",
    }


def test_verify_failures_name_port_expected_found_and_hint():
    text = (LAB / "node_report_rxe.txt").read_text()
    down = text.replace("state 4: ACTIVE", "state 1: DOWN").replace("phys_state 5: LinkUp", "phys_state 3: Disabled")
    down = down.replace("netns exclusive", "netns shared").replace("NCCL_IB_HCA=rxe", "NCCL_IB_HCA=mlx5")
    host = lab_host(
        rdma={"netdevs": ["eth0"], "devices": ["rxe0", "rxe1"], "rate_gbps": 10, "port": 1, "storage_hcas": []}
    )
    failures = {(f.subject, f.check): f for f in verify_node(host, parse_node_report(down)) if not f.ok}
    assert failures[("rxe0/1", "port state")].found == "DOWN"
    assert failures[("rxe0/1", "physical state")].expected == "LinkUp"
    assert failures[("rxe0/1", "rate")].found == "2.5 Gb/sec (1X SDR)"
    assert "it has rxe0" in failures[("rxe1", "device present")].hint
    assert failures[("ib_core", "netns mode")].found == "shared"
    assert failures[("/etc/nccl.conf", "NCCL_IB_HCA matches devices")].found == "none (devices: rxe0)"
    gone = "\n".join(line for line in text.splitlines() if not line.startswith("port rxe0"))
    assert ("rxe0", "device present") in {
        (f.subject, f.check) for f in verify_node(lab_host(), parse_node_report(gone)) if not f.ok
    }


def test_verify_storage_hca_and_erdma_mtu_rule():
    report = parse_node_report((LAB / "node_report_rxe.txt").read_text())
    host = lab_host(rdma={"netdevs": ["eth0"], "devices": ["rxe0"], "storage_hcas": ["rxe0"], "port": 1})
    hit = [f for f in verify_node(host, report) if f.check == "NCCL_IB_HCA excludes storage HCAs"][0]
    assert not hit.ok and hit.found == "rxe0"
    erdma = lab_host(fabric="erdma", erdma={"jumbo_frames": True})
    mtu = [f for f in verify_node(erdma, report) if f.check == "MTU"][0]
    assert (mtu.ok, mtu.expected, mtu.found) == (False, "8500", "1500")
    assert (roce_active_mtu(1500), roce_active_mtu(9000), roce_active_mtu(8500), roce_active_mtu(1400)) == (
        1024,
        4096,
        4096,
        1024,
    )


def test_pairs_and_rounds():
    assert ring_pairs(["a", "b"]) == [("a", "b")]
    assert ring_pairs(["a", "b", "c", "d"]) == [("a", "b"), ("b", "c"), ("c", "d"), ("d", "a")]
    assert rounds(ring_pairs(["a", "b", "c", "d"])) == [[("a", "b"), ("c", "d")], [("b", "c"), ("d", "a")]]
    for batch in rounds(all_pairs(list("abcde"))):
        nodes = [n for pair in batch for n in pair]
        assert len(nodes) == len(set(nodes))
    assert sum(len(b) for b in rounds(all_pairs(list("abcde")))) == 10


def test_perftest_command_lines():
    tool = bandwidth_tool(gates_config({"ib_write_bw": {"duration_s": 3}}).ib_write_bw, "ib_write_bw")
    rxe0 = Endpoint("node1", "rxe0", 1, 1, None)
    assert " ".join(perftest_words(tool, rxe0, TCP_PORT)) == (
        "ib_write_bw -d rxe0 -i 1 -x 1 -p 18515 -s 65536 -D 3 --report_gbits -F"
    )
    mlx = Endpoint("gpu1", "mlx5_0", 1, 3, 200.0)
    assert perftest_words(tool, mlx, 18516, "10.0.0.1")[-3:] == ["--report_gbits", "-F", "10.0.0.1"]


def test_sizes_and_sections():
    assert (parse_size("1M"), parse_size("512M"), parse_size("4K"), parse_size("7")) == (1 << 20, 512 << 20, 4096, 7)
    with pytest.raises(ValueError, match="K, M or G"):
        parse_size("1T")
    assert split_sections("junk\n@@ a\n1\n@@ b\n") == {"a": ["1"], "b": []}


def test_junit_has_a_case_per_check_and_gate():
    report = parse_node_report((LAB / "node_report_rxe.txt").read_text())
    verification = HostVerification("node1", "10.77.0.11", findings=verify_node(lab_host(), report))
    xml = junit_xml("lab", [verification], [])
    assert xml.count("<testcase") == len(verification.findings) and 'failures="0"' in xml


def test_verify_gpu_nodes_count_driver_and_nccl():
    from rdmaprov.parsers.node import Gpu

    report = parse_node_report((LAB / "node_report_rxe.txt").read_text())
    host = lab_host(gpu={"count": 8, "driver_version": "535"}, nccl={"version": "2.18.3-1"})
    report.gpus = [Gpu("NVIDIA A100-SXM4-80GB", "8.0", "525.147.05")] * 7
    failed = {f.check: f for f in verify_node(host, report) if not f.ok and f.subject in ("gpus", "nccl")}
    assert (failed["count"].expected, failed["count"].found) == ("8", "7")
    assert (failed["driver version"].expected, failed["driver version"].found) == (
        "535",
        "525.147.05",
    ) and "--allow-reboot" in failed["driver version"].hint
    assert failed["library programs load"].found == "not in the dynamic linker's cache (ldconfig -p)"
    report.gpus = [Gpu("NVIDIA A100-SXM4-80GB", "8.0", "535.129.03")] * 8
    report.nccl_linked = [("/opt/nccl/current/lib/libnccl.so.2", "/opt/nccl/2.18.3-1-0a1b2c/lib/libnccl.so.2.18.3")]
    assert [f for f in verify_node(host, report) if not f.ok and f.subject in ("gpus", "nccl")] == []
    assert not [f for f in verify_node(lab_host(), report) if f.subject == "gpus"]  # no GPUs declared: not checked


def test_nccl_transport_from_its_own_debug_output():
    socket = parse_nccl_transport((FIXTURES / "gpu-h100" / "all_reduce_perf_nccl_debug_info.txt").read_text())
    assert socket.socket_hosts() == ["vm"] and socket.no_ib_device == {"vm"} and socket.devices == {}
    rdma = parse_nccl_transport((SEED / "nccl_tests_all_reduce_perf_2node_10GB.txt").read_text())
    assert rdma.socket_hosts() == [] and rdma.networks["gpu-pod0"] == {"IBext"}
    assert rdma.devices == {"gpu-pod0": {"irdma0"}}


H100_TABLE = FIXTURES / "gpu-h100" / "all_reduce_perf_1gpu_nccl-tests-2.19.6.txt"


def test_a_sweep_that_did_not_finish_never_passes():
    text = H100_TABLE.read_text()
    whole = parse_nccl_tests(text)
    assert whole.complete and len(whole.rows) == 11 and whole.failures == ()
    cut = parse_nccl_tests(text[: text.index("  16777216")])  # the output ends after 4 rows
    assert len(cut.rows) == 4 and not cut.complete
    verdict = judge_run(cut, all_reduce_bounds(gates_config({"all_reduce": {"min_busbw_gbs": 0}}).all_reduce), None)
    assert not verdict.passed and verdict.reason.startswith("the output ends after 4 rows (largest 8388608 B)")
    probe = (LAB / "allreduce_probe_2vm.txt").read_text()
    assert not parse_probe_output(probe, 8388608).complete  # asked up to 8 MiB, stopped at 4 MiB


def test_the_root_column_is_found_without_its_header():
    text = "\n".join(line for line in H100_TABLE.read_text().splitlines() if not line.startswith("#"))
    rows = parse_nccl_tests(text).rows
    assert len(rows) == 11 and rows[-1].size == 1073741824 and rows[-1].algbw == 1505.7


def test_a_size_printed_twice_counts_at_its_slowest():
    fast = CollectiveRow(1073741824, 268435456, "float", "sum", 5000.0, 214.7, 20.0, 0)
    slow = CollectiveRow(1073741824, 268435456, "float", "sum", 50000.0, 21.5, 2.0, 0)
    run = CollectiveRun([fast, slow], 0, None, complete=True)
    verdict = judge_run(run, all_reduce_bounds(gates_config({"all_reduce": {"min_busbw_gbs": 10}}).all_reduce), None)
    assert (verdict.passed, verdict.measured) == (False, 2.0)


def test_wrong_elements_in_the_in_place_column_fail_the_run():
    bad = CollectiveRow(1048576, 262144, "float", "sum", 4.89, 214.49, 20.0, 0, 20.0, 3)
    run = CollectiveRun([bad], 0, None, complete=True)
    verdict = judge_run(run, all_reduce_bounds(gates_config({"all_reduce": {"min_busbw_gbs": 1}}).all_reduce), None)
    assert not verdict.passed and verdict.reason.startswith("wrong results: 3 wrong elements")


def test_a_fast_enough_run_over_tcp_sockets_or_a_storage_hca_fails():
    socket = parse_nccl_transport((FIXTURES / "gpu-h100" / "all_reduce_perf_nccl_debug_info.txt").read_text())
    ok = judge(20.0, "GB/s", Bounds(0.9, 0.92, 1.05, minimum=10.0), None)
    assert ok.passed
    assert (lambda v: (v.status, v.reason))(transport_verdict(socket, set(), ok)) == (
        "fail",
        f"NCCL used TCP sockets, not RDMA, on vm [rank 0] (NET/IB: no device found): {ok.reason}",
    )
    rdma = parse_nccl_transport((SEED / "nccl_tests_all_reduce_perf_2node_10GB.txt").read_text())
    assert transport_verdict(rdma, set(), ok) == ok
    assert (
        transport_verdict(rdma, {"irdma0"}, ok).reason == f"NCCL opened storage HCA(s) irdma0 on gpu-pod0: {ok.reason}"
    )


def test_output_cut_off_mid_line_reads_as_far_as_it_goes():
    text = (SEED / "ibv_devinfo-v_irdma0.txt").read_text()
    [device] = parse_ibv_devinfo(text[: text.index("port:") + len("port:")])  # ends before the number
    assert device.hca == "irdma0" and device.ports == []
    assert parse_rdma_link("link rxe0/1 state ACTIVE physical_state LINK_UP netdev eth0\nlink rxe1/") == [
        RdmaLink("rxe0", 1, "ACTIVE", "LINK_UP", "eth0")
    ]


def test_perftest_reports_the_largest_size_and_refuses_a_failed_run():
    text = (SOFTROCE / "ib_write_bw_client_rxe_tcg.txt").read_text()
    assert parse_bw_output(text).bytes == 65536
    # What perftest prints when a work request fails (its NOTIFY_COMP_ERROR_SEND macro), as a
    # Soft-RoCE user reported it with mismatched MTUs; a row printed before it is no result.
    failed = " Completion with error at client\n Failed status 11: wr_id 0 syndrom 0x0\nscnt=128, ccnt=0\n"
    with pytest.raises(ValueError, match="perftest reported an error: Completion with error at client"):
        parse_bw_output(text + failed)


def test_node_gate_thresholds_and_verdicts_on_a_real_run():
    h100 = Gpu("NVIDIA H100 80GB HBM3", "9.0", "580.159.04")
    assert default_threshold([h100] * 8) == (460.0, "the default for 8 H100 SXM GPUs")
    assert default_threshold([Gpu("NVIDIA H100 PCIe", "9.0", "535")] * 8) is None  # no NVLink mesh
    assert default_threshold([h100] * 4) is None
    settings = gates_config().node
    assert judge_node("", True, [h100] * 4, settings).reason == (
        "no threshold for 4 × NVIDIA H100 80GB HBM3: set gates.node.min_busbw_gbs"
    )
    text = H100_TABLE.read_text()  # one GPU: busbw 0, held here to an explicit minimum of 0
    explicit = gates_config({"node": {"min_busbw_gbs": 0}}).node
    verdict = judge_node(text, True, [h100] * 8, explicit)
    assert verdict.passed and verdict.reason.endswith(">= 0 GB/s = gates.node.min_busbw_gbs 0 GB/s")
    assert not judge_node(text, False, [h100] * 8, explicit).passed  # all_reduce_perf exited non-zero
    slow = judge_node(text, True, [h100] * 8, settings)
    assert not slow.passed and "the default for 8 H100 SXM GPUs 460 GB/s" in slow.reason
    assert node_command("/opt/nccl-tests/current/bin/all_reduce_perf", {"NCCL_IB_HCA": "=mlx5_0"}, 8, settings) == (
        "env NCCL_IB_HCA==mlx5_0 /opt/nccl-tests/current/bin/all_reduce_perf -b 1M -e 1G -f 2 -g 8 -c 1 -o sum"
    )


def _pair_test(slow: set[str], log: list[list[tuple[str, str]]]):
    """Pair results as the fabric would give them with the `slow` nodes' links throttled."""

    def test(pairs):
        log.append(pairs)
        return [
            GateResult(
                "ib_write_bw", Subject.pair(a, b), not {a, b} & slow, "2.1 Gb/s < 22.5 Gb/s" if {a, b} & slow else "ok"
            )
            for a, b in pairs
        ]

    return test


def test_diagnosis_names_the_slow_node_in_two_rounds():
    names = [f"n{i}" for i in range(1, 8)]
    assert neighbour_pairs(names) == [("n1", "n2"), ("n3", "n4"), ("n5", "n6"), ("n1", "n7")]
    log: list = []
    diagnosis = localize(names, _pair_test({"n4"}, log))
    assert list(diagnosis.suspects) == ["n4"] and diagnosis.rounds == 2
    assert diagnosis.suspects["n4"] == ["n3 -> n4: 2.1 Gb/s < 22.5 Gb/s", "n2 -> n4: 2.1 Gb/s < 22.5 Gb/s"]
    assert diagnosis.cleared == ["n1", "n2", "n3", "n5", "n6", "n7"] and diagnosis.exit_code == 4
    assert log[1] == [("n1", "n3"), ("n2", "n4")]  # each doubtful node against a different cleared one
    healthy = localize(names, _pair_test(set(), []))
    assert healthy.rounds == 1 and healthy.cleared == names and healthy.exit_code == 0
    hopeless = localize(["a", "b"], _pair_test({"a"}, []))
    assert set(hopeless.undecided) == {"a", "b"} and hopeless.exit_code == 4


def test_a_pairs_rails_make_one_verdict_that_fails_on_any_slow_rail():
    """One slow HCA of eight fails its pair (the diagnosis then tells which node), and the
    failing rail is the reason; a lost node stays named."""
    rails = [
        GateResult(
            "rail", Subject.parse(f"a:mlx5_{i} -> b:mlx5_{i}"), i != 4, "185.1 Gb/s < 360 Gb/s" if i == 4 else "ok"
        )
        for i in range(8)
    ] + [
        GateResult(
            "rail",
            Subject.parse("c:mlx5_0 -> d:mlx5_0"),
            False,
            "not judged: d stopped answering",
            details={"lost": "d"},
        )
    ]
    slow, lost, untested = pair_verdicts([("a", "b"), ("c", "d"), ("e", "f")], rails)
    assert (str(slow.subject), slow.passed, slow.reason) == (
        "a -> b",
        False,
        "a:mlx5_4 -> b:mlx5_4: 185.1 Gb/s < 360 Gb/s",
    )
    assert len(slow.details["rails"]) == 8 and lost.details["lost"] == "d"
    assert (untested.passed, untested.reason) == (False, "no rail of the pair was tested")
    [fine] = pair_verdicts([("a", "b")], [r for r in rails if r.passed])
    assert fine.passed and fine.reason == "all 7 rails pass"


def test_a_node_lost_during_the_pair_tests_is_lost_and_its_peer_is_tested_again():
    """n4 stops answering in round 1: it is lost (when, where), not a suspect; n3, whose test
    said nothing, is tested against a cleared node in round 2 and cleared."""
    lost = HostLost("n4", "22:49:36 UTC", "the diagnosis", "SSH session not active")
    log: list = []

    def test(pairs):
        log.append(pairs)
        return [
            GateResult.broken("ib_write_bw", Subject.pair(a, b), lost)
            if "n4" in (a, b)
            else GateResult("ib_write_bw", Subject.pair(a, b), True, "ok")
            for a, b in pairs
        ]

    diagnosis = localize(["n1", "n2", "n3", "n4"], test)
    assert diagnosis.lost == {"n4": str(lost)}
    assert str(lost) == "n4 stopped answering at 22:49:36 UTC during the diagnosis (SSH session not active)"
    assert diagnosis.suspects == {} and diagnosis.undecided == {} and diagnosis.exit_code == 4
    assert log[1] == [("n1", "n3")] and diagnosis.cleared == ["n1", "n2", "n3"]
    assert diagnosis.to_json()["lost"] == diagnosis.lost


def _memlock_report(login: str, services: str, lines: str) -> str:
    """The lab's node report with other memlock values and the files' lines that set them."""
    text = (LAB / "node_report_rxe.txt").read_text()
    text = text.replace("@@ memlock\nunlimited\ninfinity\n", f"@@ memlock\n{login}\n{services}\n")
    return text + "@@ memlock_lines\n" + lines


def test_memlock_set_by_a_site_file_is_named_with_the_fix_apply_cannot_make():
    lines = (LAB / "memlock_lines_site_override.txt").read_text()
    failures = {
        f.id: f
        for f in verify_node(lab_host(), parse_node_report(_memlock_report("65536", "67108864", lines)))
        if not f.ok
    }
    login, services = failures["limits.memlock_login"], failures["limits.memlock_services"]
    assert (login.expected, login.found, services.expected, services.found) == (
        "unlimited",
        "65536",
        "infinity",
        "67108864",
    )
    assert "/etc/security/limits.d/95-site.conf:3 `root hard memlock 65536`" in login.hint
    assert "/etc/security/limits.d/95-site.conf:4 `root soft memlock 65536`" in login.hint  # comment dropped
    assert "90-rdmaprov-memlock.conf:" not in login.hint.split(": ", 1)[1]  # rdmaprov's own lines are not blamed
    assert "rdmaprov apply" not in login.hint and "log in again" in login.hint
    assert services.hint.startswith("set to something else outside rdmaprov's /etc/systemd/system.conf.d/")
    assert "99-site.conf:2 `DefaultLimitMEMLOCK=64M`" in services.hint and "daemon-reexec" in services.hint
    assert "#DefaultLimitMEMLOCK" not in services.hint  # a commented default is not a setting
    # apply leaves the site's files alone, so no deploy is named and check calls the drift manual
    assert login.deploy is None and services.deploy is None
    assert classify_fact(login.deploy, True, []) == "manual"


def test_memlock_with_only_rdmaprovs_lines_points_at_apply_and_numbers_are_held_to_the_inventory():
    ours = "\n".join(
        line for line in (LAB / "memlock_lines_site_override.txt").read_text().splitlines() if "-site" not in line
    )
    [login] = [
        f for f in verify_node(lab_host(), parse_node_report(_memlock_report("64", "infinity", ours))) if not f.ok
    ]
    assert login.id == "limits.memlock_login" and "run `rdmaprov apply`" in login.hint
    assert login.deploy == "limits" and classify_fact(login.deploy, True, []) == "corrective"
    sized = lab_host(limits={"memlock": 1048576})
    report = parse_node_report(_memlock_report("1048576", str(1048576 * 1024), ""))
    assert [f for f in verify_node(sized, report) if not f.ok] == []
    assert [f.id for f in verify_node(lab_host(), report) if not f.ok] == [
        "limits.memlock_login",
        "limits.memlock_services",
    ]


def test_memlock_setting_lines_and_their_values():
    lines = parse_setting_lines(
        [
            "/etc/security/limits.conf:37:#        - memlock - max locked-in-memory address space (KB)",
            "/etc/security/limits.d/95-site.conf:4:root soft memlock 65536   # keep it low",
            "/etc/security/limits.d/96.conf:1:@rdma - memlock -1",
            "/etc/security/limits.d/97.conf:1:* hard nofile 1024 memlock",
            "/etc/systemd/system.conf.d/99-site.conf:2:DefaultLimitMEMLOCK=64M",
            "not grep output",
        ]
    )
    assert [(line.path.rsplit("/", 1)[1], line.number) for line in lines] == [
        ("95-site.conf", 4),
        ("96.conf", 1),
        ("97.conf", 1),
        ("99-site.conf", 2),
    ]
    assert [pam_memlock(line) for line in lines] == ["65536", "unlimited", None, None]
    assert [systemd_memlock(line) for line in lines] == [None, None, None, "64M"]


def test_the_nccl_programs_load_is_the_linkers_first_and_must_be_the_declared_one(tmp_path):
    """What the H100 showed: NCCL 2.28.9 installed under /opt/nccl, and the image's own 2.28.3 in
    /usr/lib, which a bare 'a libnccl exists' check took for the declared version."""
    # The linker cache line as NVIDIA's deb leaves it (public), through the fact's own pipeline.
    distro = tmp_path / "lib" / "libnccl.so.2.28.3"
    distro.parent.mkdir()
    distro.touch()
    (tmp_path / "lib" / "libnccl.so.2").symlink_to(distro.name)
    cache = (FIXTURES / "public" / "ldconfig_p_libnccl_ubuntu2404_deb.txt").read_text()
    cache = "574 libs found in cache `/etc/ld.so.cache'\n\tlibz.so.1 (libc6,x86-64) => /lib/libz.so.1\n\t" + cache
    cache = cache.replace("/lib/x86_64-linux-gnu/", f"{tmp_path}/lib/")
    section = subprocess.run(["sh", "-c", LINKED_NCCL], input=cache, capture_output=True, text=True).stdout
    assert section == f"{tmp_path}/lib/libnccl.so.2 {distro}\n"
    report = parse_node_report((LAB / "node_report_rxe.txt").read_text() + "@@ nccl_linker\n" + section)
    host = lab_host(gpu={"count": 1}, nccl={"version": "2.28.9-1"})
    [library] = [f for f in verify_node(host, report) if f.id == "nccl.library"]
    assert not library.ok and library.expected == "libnccl.so.2 2.28.9 under /opt/nccl"
    assert library.found == f"{tmp_path}/lib/libnccl.so.2 → {distro}"
    assert "another NCCL still comes first" in library.hint
    # the right version from somewhere else than the declared prefix is not rdmaprov's build either
    report.nccl_linked = [("/usr/lib/x86_64-linux-gnu/libnccl.so.2", "/usr/lib/x86_64-linux-gnu/libnccl.so.2.28.9")]
    assert not next(f for f in verify_node(host, report) if f.id == "nccl.library").ok
    packaged = lab_host(gpu={"count": 1}, nccl={"version": "2.28.9-1", "source": {"kind": "packages"}})
    assert next(f for f in verify_node(packaged, report) if f.id == "nccl.library").ok


def test_gpu_health_of_a_healthy_h100_from_its_own_nvidia_smi_q():
    text = (FIXTURES / "gpu-h100" / "nvidia-smi_q.txt").read_text()
    [h100] = parse_nvidia_smi_q(text)
    assert h100 == GpuHealth(
        bus_id="00000000:00:06.0",
        name="NVIDIA H100 80GB HBM3",
        persistence="Enabled",
        mig_mode="Disabled",
        ecc_mode="Enabled",
        volatile_uncorrectable=0,
        aggregate_uncorrectable=0,
        remap_pending=False,
        remap_failed=False,
        retirement_pending=False,  # Hopper remaps rows; its Retired Pages read N/A
        remap_known=True,
        hw_slowdown=(),
        slowdown_known=True,
        link_width=("16x", "16x"),
        link_generation=("5", "5"),
    )
    report = parse_node_report((LAB / "node_report_rxe.txt").read_text() + "@@ nvidia_smi_q\n" + text)
    host = lab_host(gpu={"count": 1})
    health = [f for f in verify_node(host, report) if f.subject == "gpu0 00000000:00:06.0"]
    assert {f.id for f in health} == {
        "gpu.ecc_mode",
        "gpu.ecc_uncorrectable",
        "gpu.row_remap",
        "gpu.hw_slowdown",
        "gpu.pcie_width",
        "gpu.persistence",
        "gpu.mig_mode",
    } and all(f.ok and not f.unknown for f in health)
    # the same GPU with its link trained at x8 and a hardware slowdown: what the checks say
    sick = text.replace(
        "                Current                                : 16x", "                Current   : 8x"
    )
    sick = sick.replace("HW Thermal Slowdown                        : Not Active", "HW Thermal Slowdown : Active")
    failed = {f.id: f for f in verify_node(host, parse_node_report("@@ nvidia_smi_q\n" + sick)) if not f.ok}
    assert failed["gpu.pcie_width"].found == "8x (generation 5 of 5)" and "reseat" in failed["gpu.pcie_width"].hint
    assert failed["gpu.hw_slowdown"].found == "HW Thermal Slowdown" and "cooling" in failed["gpu.hw_slowdown"].hint


def test_fleet_consistency_names_the_node_that_differs_and_what_most_have():
    from rdmaprov.health.fleet import fleet_findings

    cx6 = (FIXTURES / "public" / "ibv_devinfo-v_mlx5_CX6Dx_rocep61s0f1_udev_name.txt").read_text()
    hosts = {name: lab_host() for name in ("node1", "node2", "node3")}
    reports = {}
    for name, driver, nccl, firmware, kernel in (
        ("node1", "550.54.15", "2.21.5", "22.36.1010", "6.1.0-50-amd64"),
        ("node2", "550.54.15", "2.21.5", "22.36.1010", "6.1.0-50-amd64"),
        # the odd node: older driver and HCA firmware, and it missed the reboot into the new kernel
        ("node3", "535.129.03", "2.21.5", "22.31.1014", "6.1.0-41-amd64"),
    ):
        # `versions` as a lab VM answers it: uname -r, then rdma-core's package version
        versions = f"@@ versions\n{kernel}\n44.0-2\n"
        report = parse_node_report(versions + "@@ ibv_devinfo\n" + cx6.replace("22.36.1010", firmware))
        report.gpus = [Gpu("NVIDIA H100 80GB HBM3", "9.0", driver)]
        report.nccl_linked = [("/opt/nccl/current/lib/libnccl.so.2", f"/opt/nccl/x/lib/libnccl.so.{nccl}")]
        reports[name] = report
    found = fleet_findings(hosts, reports)
    assert all(f.ok for f in found["node1"] + found["node2"]) and len(found["node1"]) == 5
    failed = {f.id: f for f in found["node3"] if not f.ok}
    assert set(failed) == {"fleet.gpu_driver", "fleet.hca_firmware", "fleet.kernel"}
    assert reports["node3"].rdma_core == "44.0-2" and failed["fleet.kernel"].found == "6.1.0-41-amd64"
    assert (failed["fleet.gpu_driver"].expected, failed["fleet.gpu_driver"].found) == (
        "550.54.15 (as on 2 of 3 nodes)",
        "535.129.03",
    )
    assert failed["fleet.hca_firmware"].subject == "HCA firmware (part 4125)"
    assert failed["fleet.gpu_driver"].deploy == "gpu_driver" and failed["fleet.hca_firmware"].deploy is None
    # one host alone has nothing to be compared with
    assert fleet_findings(hosts, {"node1": reports["node1"]}) == {"node1": []}


def test_port_error_counters_are_judged_by_growth_since_the_previous_read(tmp_path):
    from rdmaprov.health.counters import LIMITS, counter_findings, load_reads, save_reads, state_file
    from rdmaprov.parsers.counters import ERROR_COUNTERS, parse_port_counters

    assert tuple(LIMITS) == ERROR_COUNTERS
    ports = parse_port_counters((LAB / "rxe_error_counters.txt").read_text().splitlines())
    assert ports == {"rxe0/1": {"link_downed": 0}}  # SoftRoCE keeps only link_downed, in hw_counters/
    [first] = counter_findings("node1", "softroce", 1000.0, ports, None)
    assert first.ok and first.id == "rdma.port_errors" and first.found.startswith("baseline recorded")
    assert first.expected == "link_downed +0"
    before = {"at": 1000.0, "ports": ports}
    [quiet] = counter_findings("node1", "softroce", 1600.0, ports, before)
    assert quiet.ok and quiet.found == "none grew past its limit in 10 min"
    flapped = {"rxe0/1": {"link_downed": 2}}
    [down] = counter_findings("node1", "softroce", 1600.0, flapped, before)
    assert not down.ok and down.found == "link_downed +2 in 10 min" and "cable" in down.hint
    # rates: 120 symbol errors an hour is the field's limit, so 100 in 30 min fails and 50 passes
    ib = {"mlx5_0/1": {"symbol_error": 1000, "port_xmit_discards": 7}}
    later = {"mlx5_0/1": {"symbol_error": 1100, "port_xmit_discards": 7}}
    [rate] = counter_findings("n", "ib", 1800.0, later, {"at": 0.0, "ports": ib})
    assert not rate.ok and rate.found == "symbol_error +100 in 30 min"
    later["mlx5_0/1"]["symbol_error"] = 1050
    assert counter_findings("n", "ib", 1800.0, later, {"at": 0.0, "ports": ib})[0].ok
    # the control machine's clock went back: no growth is no finding (a rate over -50 s allows none)
    assert counter_findings("n", "ib", -50.0, ib, {"at": 0.0, "ports": ib})[0].ok
    # a counter that went down: the port was reset, a new baseline rather than a verdict
    [reset] = counter_findings("n", "ib", 1800.0, {"mlx5_0/1": {"symbol_error": 3}}, {"at": 0.0, "ports": ib})
    assert reset.ok and "reset" in reset.found
    # kept per cluster on the control machine, written whole or not at all
    path = state_file("lab/one")
    assert path.parts[-2] == "lab_one"
    save_reads(path, {"node1": before})
    assert load_reads(path) == {"node1": before} and load_reads(tmp_path / "none.json") == {}
    # a hand-edited or damaged read is not judged against (no KeyError): that node records anew
    path.write_text('{"hosts": {"node1": {"ports": {}}, "node2": {"at": 1, "ports": {"p": {"x": "7"}}}, "node3": 3}}')
    assert load_reads(path) == {}


PUBLIC = FIXTURES / "public"


def _gpu_failures(text: str, xid_lines: str = "") -> dict[tuple[str, str], object]:
    report = parse_node_report("@@ nvidia_smi_q\n" + text + "\n@@ xid\n" + xid_lines)
    return {(f.subject, f.id): f for f in verify_node(lab_host(gpu={"count": 1}), report) if not f.ok}


def test_gpu_health_failures_from_public_outputs_name_the_gpu_and_the_fix():
    a100 = _gpu_failures((PUBLIC / "nvidia-smi_q_A100x4_555_remapped_rows_pending_correctable_353.txt").read_text())
    remap = a100[("gpu1 00000000:9E:00.0", "gpu.row_remap")]
    assert remap.found == "a remap is pending" and "nvidia-smi -r" in remap.hint  # 353 correctable: not a failure
    assert {key[0] for key in a100 if key[0].startswith("gpu") and key[0] != "gpus"} == {"gpu1 00000000:9E:00.0"}
    l4 = _gpu_failures((PUBLIC / "nvidia-smi_q_L4_550_link_width_8x_of_max_16x_gen1.txt").read_text())
    assert l4[("gpu0 00000000:01:00.0", "gpu.pcie_width")].found == "8x (generation 1 of 4)"
    rtx = _gpu_failures((PUBLIC / "nvidia-smi_q_2xRTX4060Ti_550_link_width_4x_of_max_8x.txt").read_text())
    assert ("gpu0 00000000:03:00.0", "gpu.pcie_width") in rtx and ("gpu1 00000000:09:00.0", "gpu.pcie_width") not in rtx
    assert ("gpu0 00000000:03:00.0", "gpu.ecc_mode") not in rtx  # GeForce: no ECC (N/A), nothing to judge
    gh200 = _gpu_failures(
        (PUBLIC / "nvidia-smi_q_GH200_550_aggregate_dram_uncorrectable_1_row_remapped.txt").read_text()
    )
    assert not [key for key in gh200 if key[1] == "gpu.ecc_uncorrectable"]  # 1 over its life, 0 since load: remapped
    [gh] = parse_nvidia_smi_q(
        (PUBLIC / "nvidia-smi_q_GH200_550_aggregate_dram_uncorrectable_1_row_remapped.txt").read_text()
    )
    assert (gh.volatile_uncorrectable, gh.aggregate_uncorrectable, gh.link_width) == (0, 1, ("1x", "1x"))
    # one GPU's ECC section as published (its GPU line is not in the excerpt)
    ecc = (PUBLIC / "nvidia-smi_q_ecc_errors_section_sram_uncorrectable_volatile_1_aggregate_5.txt").read_text()
    failed = _gpu_failures("GPU 00000000:10:1C.0\n" + ecc)
    sram = failed[("gpu0 00000000:10:1C.0", "gpu.ecc_uncorrectable")]
    assert sram.found == "1 (lifetime 5)" and sram.hint.startswith("drain the node")


def test_xid_errors_from_the_kernel_log():
    k80 = (PUBLIC / "journal_xid_79_fallen_off_bus_2xK80_same_board_kernel_ts.txt").read_text()
    assert [(x.bus_id, x.code) for x in parse_xids(k80.splitlines())] == [("0000:05:00", 79), ("0000:06:00", 79)]
    fallen = _gpu_failures("", k80)[("kernel log", "gpu.xid")]
    assert fallen.found == "Xid 79 on 0000:05:00, Xid 79 on 0000:06:00" and "fell off the bus" in fallen.hint
    quiet = (PUBLIC / "dmesg_fallen_off_bus_multiline_no_xid_probe_failed_570_open.txt").read_text()
    assert [(x.bus_id, x.code) for x in parse_xids(quiet.splitlines())] == [("0000:b3:00.0", 79)]
    remap = (PUBLIC / "syslog_xid_63_row_remapper_A100_no_timestamp.txt").read_text()
    both = _gpu_failures("", remap + k80)[("kernel log", "gpu.xid")]
    assert both.hint.startswith("Xid 79:")  # the most severe decides the advice
    assert ("kernel log", "gpu.xid") not in _gpu_failures(
        "", "NVRM: Xid (PCI:0000:05:00): 13, pid=9, Graphics Exception\n"
    )


def test_a_pair_test_that_raises_is_that_pairs_result_and_prints_no_traceback(capfd):
    """A host lost mid-test is named lost with when and where; any other error is the pair's
    crash; neither reaches stderr as gevent's greenlet traceback."""
    from rdmaprov.health.gates.pairs import run_in_rounds

    lost = HostLost("node2", "22:49:36 UTC", "the ib_write_bw gate", "SSH session not active")

    def test(server: str, client: str) -> list[GateResult]:
        if client == "node2":
            raise lost
        raise ValueError("no such device")

    results = run_in_rounds("ib_write_bw", [("node1", "node2"), ("node3", "node4")], test)
    assert [(str(r.subject), r.passed, r.reason, r.details) for r in results] == [
        (
            "node1 -> node2",
            False,
            "not judged: node2 stopped answering at 22:49:36 UTC during the ib_write_bw gate (SSH session not active)",
            {"lost": "node2"},
        ),
        ("node3 -> node4", False, "gate crashed: no such device", {}),
    ]
    assert capfd.readouterr().err == ""


def test_trouble_counters_that_grew_around_a_policed_pair_test():
    """Real reads of every rxe counter before and after node2 wrote through a policer: node2's
    drops show as send_err and its retries, node1's as duplicates; data and packet counts are not
    trouble. A counter that went down (a reset) or appeared is not growth."""
    from rdmaprov.parsers.counters import parse_port_counters, trouble_growth

    def read(node: str, when: str) -> dict[str, dict[str, int]]:
        return parse_port_counters((LAB / f"counters_policed_{node}_{when}.txt").read_text().splitlines())

    assert trouble_growth(read("node2", "before"), read("node2", "after")) == [
        "rxe0/1 completer_retry_err +41",
        "rxe0/1 send_err +278445",
    ]
    assert trouble_growth(read("node1", "before"), read("node1", "after")) == ["rxe0/1 duplicate_request +78"]
    before = read("node2", "before")
    reset = {"rxe0/1": {**before["rxe0/1"], "send_err": 0}, "rxe1/1": {"rcvd_seq_err": 5}}
    assert trouble_growth(before, reset) == []
    assert trouble_growth(before, before) == []
