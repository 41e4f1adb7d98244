"""Parsers and verdicts on real outputs published in public issue threads and repositories
(tests/fixtures/public/README.md names each source): layouts and failures the lab cannot make."""

from __future__ import annotations

import pytest

from rdmaprov.health.gates.all_reduce import all_reduce_bounds, judge_run, transport_verdict
from rdmaprov.health.gates.bandwidth import Bounds, judge
from rdmaprov.parsers.ibv_devinfo import parse_ibv_devinfo
from rdmaprov.parsers.nccl_debug import parse_nccl_transport
from rdmaprov.parsers.nccl_tests import parse_nccl_tests
from rdmaprov.parsers.perftest import parse_bw_output
from rdmaprov.parsers.rdma import RdmaLink, parse_rdma_link
from tests.conftest import FIXTURES
from tests.support.inventories import gates_config

PUBLIC = FIXTURES / "public"
ANY_BUSBW = all_reduce_bounds(gates_config({"all_reduce": {"min_busbw_gbs": 0}}).all_reduce)


def _read(name: str) -> str:
    return (PUBLIC / name).read_text()


@pytest.mark.parametrize(
    ("name", "rows", "redop", "last"),
    [
        ("all_gather_perf_old_format_no_redop_error_column_8xA100.txt", 34, "", (8589934592, 33646.0, 223.39)),
        ("broadcast_perf_old_format_root_no_redop_8xA100.txt", 34, "", (8589934592, 36896.0, 232.81)),
        ("reduce_perf_redop_root_error_column_8xA100.txt", 34, "sum", (8589934592, 37613.0, 228.38)),
        ("all_reduce_perf_redop_no_root_error_column_8xA100.txt", 34, "sum", (8589934592, 63896.0, 235.26)),
        ("all_reduce_perf_2node_K80_wrong_NA_wide_time.txt", 11, "sum", (1073741824, 1752724.0, 0.61)),
    ],
)
def test_every_nccl_tests_column_layout_reads_its_rows(name, rows, redop, last):
    run = parse_nccl_tests(_read(name))
    assert len(run.rows) == rows and run.complete and run.failures == ()
    assert {r.redop for r in run.rows} == {redop}
    assert (run.rows[-1].size, run.rows[-1].time_us, run.rows[-1].busbw) == last
    assert judge_run(run, ANY_BUSBW, None).passed


def test_a_run_that_died_mid_sweep_fails_however_good_its_rows():
    run = parse_nccl_tests(_read("all_reduce_perf_died_midsweep_test_nccl_failure_mpirun_128node.txt"))
    assert len(run.rows) == 5 and not run.complete and run.rows[-1].busbw == 367.29
    verdict = judge_run(run, ANY_BUSBW, None)
    assert not verdict.passed and verdict.reason.startswith("the run failed: ")
    assert "Test NCCL failure common.cu:1204 'unhandled cuda error" in verdict.reason
    early = parse_nccl_tests(_read("all_reduce_perf_failed_before_first_row_2xRTX5090.txt"))
    assert early.rows == [] and early.failures and not judge_run(early, ANY_BUSBW, None).passed


def test_a_size_printed_twice_is_judged_at_its_slowest_copy():
    run = parse_nccl_tests(_read("all_reduce_perf_two_independent_rank0_jobs_same_size_twice_roce_IBext.txt"))
    assert [r.size for r in run.rows] == [4194304, 4194304]
    verdict = judge_run(run, all_reduce_bounds(gates_config({"all_reduce": {"min_busbw_gbs": 1}}).all_reduce), None)
    assert not verdict.passed and verdict.measured == min(r.busbw for r in run.rows)


def test_perftest_sweeps_and_failures():
    sweep = parse_bw_output(_read("ib_write_bw_a_sweep_gbits_8qp_roce_cut_off_at_512B.txt"))
    assert (sweep.bytes, sweep.average_gbps, sweep.device, sweep.gid_index) == (512, 19.15, "mlx5_1", 3)
    server = parse_bw_output(_read("ib_write_bw_server_a_gbits_DC_2qp_srqn_single_row.txt"))
    assert (server.bytes, server.average_gbps) == (8388608, 97.56)
    with pytest.raises(ValueError, match="perftest reported an error: Completion with error at client"):
        parse_bw_output(_read("ib_write_bw_completion_with_error_status4_failed_run_iter_bw.txt"))
    with pytest.raises(ValueError, match="perftest reported an error: Couldn't connect to 192.168.125.211:18515"):
        parse_bw_output(_read("ib_write_bw_client_couldnt_connect_messages_run_together.txt"))
    for name in (
        "ib_write_bw_a_sweep_loopback_interleaved_MBsec.txt",
        "ib_write_bw_single_size_loopback_tabs_MBsec.txt",
    ):
        with pytest.raises(ValueError, match="--report_gbits"):
            parse_bw_output(_read(name))


def test_rdma_link_in_the_old_and_new_formats_and_renamed_links():
    old = parse_rdma_link(_read("rdma_link_old_format_ib_port_lid_no_netdev_sparse_index.txt"))
    assert [(link.device, link.state) for link in old] == [
        ("mlx5_0", "DOWN"),
        ("mlx5_2", "ACTIVE"),
        ("mlx5_4", "DOWN"),
        ("mlx5_5", "ACTIVE"),
        ("mlx5_3", "ACTIVE"),
        ("mlx5_1", "ACTIVE"),
    ]
    assert parse_rdma_link(_read("rdma_link_rxe_renamed_by_udev_rocep0s8.txt")) == [
        RdmaLink("rocep0s8", 1, "ACTIVE", "LINK_UP", "enp0s8")
    ]
    irdma = parse_rdma_link(_read("rdma_link_irdma_E810_one_port_down_trailing_space.txt"))
    assert [(link.device, link.state, link.netdev) for link in irdma] == [
        ("irdma0", "DOWN", "enp23s0f0"),
        ("irdma1", "ACTIVE", "enp23s0f1"),
    ]


def test_ibv_devinfo_of_other_devices_and_older_formats():
    [mlx5] = parse_ibv_devinfo(_read("ibv_devinfo-v_mlx5_CX6Dx_rocep61s0f1_udev_name.txt"))
    assert mlx5.hca == "rocep61s0f1" and mlx5.ports[0].state == "PORT_ACTIVE" and len(mlx5.ports[0].gids) == 4
    [rxe] = parse_ibv_devinfo(_read("ibv_devinfo-v_rxe0_centos7_old_gid_format.txt"))
    assert rxe.ports[0].link_layer == "Ethernet" and len(rxe.ports[0].gids) == 2


def test_nccl_transport_from_public_runs():
    socket = parse_nccl_transport(_read("nccl_info_ib_no_device_socket_fallback_mpirun_nonzero_exit.txt"))
    ok = judge(20.0, "GB/s", Bounds(0.9, 0.92, 1.05, minimum=1.0), None)
    assert transport_verdict(socket, set(), ok).reason.startswith("NCCL used TCP sockets, not RDMA, on ubuntu")
    ib = parse_nccl_transport(_read("nccl_info_net_ib_using_mlx5_IB_using_network_IB_4ranks.txt"))
    assert ib.devices == {"task272154-tz9m4": {"mlx5_0", "mlx5_1", "mlx5_2", "mlx5_3"}}
    assert transport_verdict(ib, {"mlx5_3"}, ok).status == "fail"
    roce = parse_nccl_transport(_read("nccl_info_net_ib_using_mlx5_RoCE_using_network_IB_2.19.3.txt"))
    assert roce.socket_hosts() == [] and roce.devices["dgxh100-3"] == {"mlx5_10", "mlx5_11"}
