"""The rail gate, the latency gate and baselines: parsers on real outputs (nvidia-smi topo -m of
four machines, ib_write_lat/ib_send_lat of three perftest generations), the GPU each rail is
tested through, verdicts computed by hand, the lanes script run for real, each part against its
own past."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import jsonschema
import pytest

from rdmaprov.engine.results import RunResult
from rdmaprov.health.baselines import apply_baselines, baseline_file, compare, load_parts, reset_parts
from rdmaprov.health.diagnose import localize, rail_evidence
from rdmaprov.health.facts_report import FactsReport
from rdmaprov.health.gates.gpudirect import memory_plan, nearest_gpus
from rdmaprov.health.gates.ib_write_bw import judge_bandwidth
from rdmaprov.health.gates.latency import judge_lane, judge_latency, latency_limit, latency_tool, microseconds
from rdmaprov.health.gates.perftest import (
    LANE_MARK,
    Endpoint,
    Lane,
    LaneOutput,
    endpoint,
    held_gpus,
    lanes_script,
    listening_ports,
    perftest_words,
    split_lanes,
    stray_server_kill,
)
from rdmaprov.health.gates.rail import gpudirect_missing, rail_bounds
from rdmaprov.health.gates.result import GateResult
from rdmaprov.health.gates.runner import cluster_gate_failed
from rdmaprov.health.gates.subject import End, Subject
from rdmaprov.parsers.node import Gpu, NodeReport, parse_node_report
from rdmaprov.parsers.nvidia_topo import parse_topo_matrix
from rdmaprov.parsers.perftest import parse_lat_output
from rdmaprov.report.junit import junit_xml
from rdmaprov.schemas import load_schema
from tests.conftest import FIXTURES
from tests.support.inventories import gates_config, node_config

PUBLIC = FIXTURES / "public"
H100_8 = "nvidia-smi_topo_m_8xH100_8nic_nic_legend_pix_gpu_numa_id_spaces.txt"
A100_10 = "nvidia-smi_topo_m_8xA100_10nic_nic_legend_pxb_tabs.txt"
TRAVERSE = "nvidia-smi_topo_m_4gpu_4nic_old_device_columns_tabs_traverse.txt"


def _topology(name: str):
    topology = parse_topo_matrix((PUBLIC / name).read_text())
    assert topology is not None
    return topology


# nvidia-smi topo -m


def test_topology_of_the_captured_h100_has_one_gpu_and_no_nic_through_its_ansi_underline():
    text = (FIXTURES / "gpu-h100" / "nvidia-smi_topo_m.txt").read_text()
    assert "\x1b[4m" in text
    topology = parse_topo_matrix(text)
    assert topology is not None and topology.gpus == (0,) and topology.nics == () and topology.paths == {0: {}}


def test_topology_with_a_nic_legend_maps_nic_columns_to_rdma_devices():
    h100 = _topology(H100_8)
    assert h100.gpus == tuple(range(8)) and h100.nics == tuple(f"mlx5_{i}" for i in range(8))
    assert [h100.path(i, f"mlx5_{i}") for i in range(8)] == ["PIX"] * 8
    assert (h100.path(0, "mlx5_1"), h100.path(0, "mlx5_4"), h100.path(7, "mlx5_4")) == ("NODE", "SYS", "NODE")
    a100 = _topology(A100_10)
    assert len(a100.nics) == 10 and a100.nics[-1] == "mlx5_9"
    assert (a100.path(0, "mlx5_0"), a100.path(1, "mlx5_1"), a100.path(7, "mlx5_6"), a100.path(7, "mlx5_9")) == (
        "PXB",
        "PXB",
        "PXB",
        "SYS",
    )


def test_topology_of_an_older_driver_heads_columns_with_device_names():
    traverse = _topology(TRAVERSE)
    assert traverse.gpus == (0, 1, 2, 3) and traverse.nics == ("mlx5_0", "mlx5_1", "mlx5_2", "mlx5_3")
    assert (traverse.path(0, "mlx5_1"), traverse.path(3, "mlx5_0"), traverse.path(2, "mlx5_3")) == (
        "NODE",
        "SYS",
        "NODE",
    )
    assert parse_topo_matrix("") is None and parse_topo_matrix("NVIDIA-SMI has failed") is None


def test_each_rail_gets_its_nearest_gpu_and_rails_sharing_a_switch_get_one_each():
    h100 = nearest_gpus(_topology(H100_8), [f"mlx5_{i}" for i in range(8)])
    assert h100 == {f"mlx5_{i}": (i, "PIX") for i in range(8)}
    # two GPUs and two HCAs behind each PCIe switch (PXB): one GPU per HCA, not both on GPU0
    a100 = nearest_gpus(_topology(A100_10), [f"mlx5_{i}" for i in range(8)])
    assert [a100[f"mlx5_{i}"] for i in range(8)] == [(i, "PXB") for i in range(8)]
    traverse = nearest_gpus(_topology(TRAVERSE), ["mlx5_0", "mlx5_1", "mlx5_2", "mlx5_3"])
    assert traverse == {"mlx5_0": (0, "NODE"), "mlx5_1": (1, "NODE"), "mlx5_2": (2, "NODE"), "mlx5_3": (3, "NODE")}


def _gpu_node(topology_name: str, modules: list[str], cuda: bool) -> NodeReport:
    topology = (PUBLIC / topology_name).read_text()
    gpudirect = [f"module {m}" for m in modules] + (["perftest_cuda"] if cuda else [])
    report = parse_node_report(f"@@ gpu_topology\n{topology}\n@@ gpudirect\n" + "\n".join(gpudirect) + "\n")
    report.gpus = [Gpu("NVIDIA H100 80GB HBM3", "9.0", "570.133.20")] * 8
    return report


def test_gpudirect_where_the_peer_memory_module_perftest_and_a_near_gpu_allow_it():
    rails = [f"mlx5_{i}" for i in range(8)]
    plan = memory_plan(_gpu_node(H100_8, ["nvidia_peermem"], True), rails, "auto")
    assert [plan[d].gpu for d in rails] == list(range(8))
    assert plan["mlx5_3"].why == "GPU3 memory (GPUDirect RDMA, PIX to mlx5_3)"
    # an HCA far from every GPU (the A100's storage pair) is tested as NCCL would use it: host memory
    far = memory_plan(_gpu_node(A100_10, ["nvidia_peermem"], True), ["mlx5_0", "mlx5_8"], "auto")
    assert far["mlx5_0"].gpu == 0 and far["mlx5_8"].gpu is None
    assert far["mlx5_8"].why.startswith("host memory: the GPU nearest mlx5_8 is GPU1 at SYS, farther than PXB")
    assert memory_plan(_gpu_node(TRAVERSE, ["nv_peer_mem"], True), ["mlx5_0"], "auto")["mlx5_0"].gpu is None
    # `rdmaprov facts --json` carries the topology
    facts = json.loads(json.dumps(FactsReport({"gpu1": _gpu_node(H100_8, [], False)}, {}).to_json()))
    assert facts["gpu1"]["gpu_topology"]["paths"]["3"]["mlx5_3"] == "PIX"


@pytest.mark.parametrize(
    ("modules", "cuda", "mode", "why"),
    [
        ([], True, "auto", "host memory: the peer-memory module is not loaded (modprobe nvidia_peermem)"),
        (["nvidia_peermem"], False, "auto", "host memory: this perftest was built without CUDA"),
        (["nvidia_peermem"], True, "off", "host memory (gates.rail.gpudirect: off)"),
    ],
)
def test_host_memory_says_why(modules, cuda, mode, why):
    plan = memory_plan(_gpu_node(H100_8, modules, cuda), ["mlx5_0"], mode)
    assert plan["mlx5_0"].gpu is None and plan["mlx5_0"].why.startswith(why)
    assert memory_plan(NodeReport(), ["rxe0"], "required")["rxe0"].why == "host memory (no GPU)"


def test_gpudirect_required_fails_a_gpu_nodes_rail_that_would_run_in_host_memory():
    ready = _gpu_node(H100_8, ["nvidia_peermem"], True)
    bare = _gpu_node(H100_8, [], True)
    reports = {"gpu1": ready, "gpu2": bare, "cpu1": NodeReport()}
    memory = {f"{host}:mlx5_0": memory_plan(r, ["mlx5_0"], "required")["mlx5_0"] for host, r in reports.items()}

    def lane(server: str, client: str) -> Lane:
        ends = [Endpoint(h, "mlx5_0", 1, 3, 400.0, True, memory[f"{h}:mlx5_0"].gpu) for h in (server, client)]
        return Lane(0, ends[0], ends[1], 18600)

    missing = gpudirect_missing([lane("gpu1", "gpu2"), lane("gpu1", "cpu1")], memory, reports)
    assert {str(subject): why for subject, why in missing.items()} == {
        "gpu1:mlx5_0 -> gpu2:mlx5_0": "GPUDirect required (gates.rail.gpudirect): gpu2: host memory: the "
        "peer-memory module is not loaded (modprobe nvidia_peermem)"
    }


def test_a_gpudirect_side_writes_from_its_gpu_with_cuda_ordered_like_nvidia_smi():
    tool = latency_tool(gates_config().latency)
    words = perftest_words(tool, Endpoint("gpu1", "mlx5_3", 1, 3, 400.0, True, gpu=3), 18703, "10.0.0.2")
    assert words[:2] == ["env", "CUDA_DEVICE_ORDER=PCI_BUS_ID"] and words[-2:] == ["--use_cuda=3", "10.0.0.2"]
    assert words[2:13] == ["ib_write_lat", "-d", "mlx5_3", "-i", "1", "-x", "3", "-p", "18703", "-s", "2"]


def test_a_slurm_job_testing_through_a_gpu_holds_all_the_nodes_gpus():
    # Slurm renumbers the GPUs it grants: with all eight held, --use_cuda=5 is still GPU5
    report = _gpu_node(H100_8, ["nvidia_peermem"], True)
    node = node_config({"fabric": "infiniband"})
    ends = [endpoint("gpu1", node, report, f"mlx5_{i}", gpu) for i, gpu in ((1, 1), (3, 3), (5, 5))]
    assert [e.node_gpus for e in ends] == [8, 8, 8] and held_gpus(ends) == 8
    assert held_gpus([endpoint("gpu1", node, report, "mlx5_0")]) == 0  # host memory: no GPU asked for
    assert held_gpus([endpoint("cpu1", node, NodeReport(), "rxe0")]) == 0


# the lanes script: every lane at once, each output behind its exit status


def test_the_lanes_script_runs_every_command_at_once_and_keeps_each_output_and_status(tmp_path):
    hostile = "mlx5_0; touch " + str(tmp_path / "pwned")
    script = lanes_script(
        [["printf", "%s\\n", hostile], ["sh", "-c", "echo to stderr >&2; exit 3"], ["sleep", "30"]], timeout_s=2
    )
    before = set(Path("/tmp").glob("rdmaprov-perftest.*"))  # another run's are not this test's
    started = time.monotonic()
    done = subprocess.run(["sh", "-c", script], capture_output=True, text=True, timeout=60)
    elapsed = time.monotonic() - started
    lanes = split_lanes(done.stdout)
    assert lanes[0] == (0, hostile) and lanes[1] == (3, "to stderr") and lanes[2][0] == 124
    assert elapsed < 10 and not (tmp_path / "pwned").exists()
    assert set(Path("/tmp").glob("rdmaprov-perftest.*")) <= before  # the script removed its folder


def test_a_lane_killed_before_it_wrote_its_status_keeps_its_own_output():
    text = f"{LANE_MARK} 0 exit 0\nrow0\n{LANE_MARK} 1 exit \nrow1"
    assert split_lanes(text) == {0: (0, "row0"), 1: (None, "row1")}


def test_stray_servers_are_killed_on_every_port_and_the_killing_shell_survives(tmp_path):
    """Three fake servers named like perftest (argv[0] set by exec -a): the two of the pair's
    ports die, the one whose port only starts the same is left, and the loop runs to its end."""
    sleeper = "import time; time.sleep(60)"
    started = [
        subprocess.Popen(["bash", "-c", f'exec -a ib_fake_bw {sys.executable} -c "{sleeper}" -d rxe0 -p {port}'])
        for port in (18600, 18601, 186010)
    ]
    try:
        time.sleep(0.5)
        done = subprocess.run(
            ["sh", "-c", stray_server_kill("ib_fake_bw", {18600, 18601}) + "; echo end"],
            capture_output=True,
            text=True,
            timeout=30,
        )
        assert done.returncode == 0 and done.stdout.strip() == "end", done
        for proc in started[:2]:
            assert proc.wait(timeout=10) != 0
        assert started[2].poll() is None
    finally:
        for proc in started:
            proc.kill()
            proc.wait()


def test_listening_ports_from_ss():
    ss = (
        "State  Recv-Q Send-Q Local Address:Port Peer Address:Port\n"
        "LISTEN 0      1            0.0.0.0:18600      0.0.0.0:*\n"
        "LISTEN 0      128             [::]:22            [::]:*\n"
    )
    assert listening_ports(ss) == {18600, 22}


# rail verdicts: each HCA against its own port rate


def _lane(server_rate: float | None, client_rate: float | None, declared: bool = False) -> Lane:
    return Lane(
        2,
        Endpoint("node1", "irdma0", 1, 1, server_rate, declared),
        Endpoint("node2", "irdma0", 1, 1, client_rate, declared),
        18602,
    )


def test_a_rail_is_held_to_its_port_rate_with_the_sums_shown():
    client = (FIXTURES / "seed" / "ib_write_bw_client_roce_25g.txt").read_text()
    output = LaneOutput(_lane(25.0, 25.0), client, 0, "", 0)
    defaults = gates_config()
    result = judge_bandwidth("rail", output.lane.subject, output, rail_bounds(defaults.rail, defaults.ib_write_bw))
    assert (result.status, result.measured, result.threshold, result.expected) == ("fail", 23.14, 23.75, 25.0)
    assert result.reason == (
        "23.14 Gb/s (92.6% of the port rate) < 23.75 Gb/s = 0.95 × the port rate (irdma0 on node1 at 25 Gb/s)"
    )
    assert str(result.subject) == "node1:irdma0 -> node2:irdma0" and result.details["rail"] == 2
    settings = gates_config({"rail": {"fraction": 0.9, "warn_fraction": 0.95}})
    lenient = rail_bounds(settings.rail, settings.ib_write_bw)
    warned = judge_bandwidth("rail", output.lane.subject, output, lenient)
    assert warned.status == "warn" and warned.reason.endswith("below the warning level 0.95 × 25 Gb/s")
    broken = LaneOutput(output.lane, client, 1, "", 0)
    assert judge_bandwidth("rail", "x", broken, lenient).reason.startswith("ib_write_bw exited 1: ")


def test_a_rail_without_its_own_floor_takes_the_pair_gates_absolute_one():
    """A SoftRoCE inventory from before the rail gate sets only gates.ib_write_bw.min_gbps."""
    client = (FIXTURES / "seed" / "ib_write_bw_client_roce_25g.txt").read_text()
    output = LaneOutput(_lane(25.0, 25.0), client, 0, "", 0)
    older = gates_config({"ib_write_bw": {"min_gbps": 20}})
    passed = judge_bandwidth("rail", "x", output, rail_bounds(older.rail, older.ib_write_bw))
    # held to an absolute floor: no warning band under the port rate (92.6 % of it passes clean)
    assert passed.status == "pass" and passed.reason.endswith(">= 20 Gb/s = gates.ib_write_bw.min_gbps 20 Gb/s")
    own = gates_config({"ib_write_bw": {"min_gbps": 20}, "rail": {"min_gbps": 24}})
    failed = judge_bandwidth("rail", "x", output, rail_bounds(own.rail, own.ib_write_bw))
    assert not failed.passed and failed.reason.endswith("< 24 Gb/s = gates.rail.min_gbps 24 Gb/s")


def test_the_link_rate_is_the_lower_declared_one_or_the_higher_measured_one():
    assert _lane(200.0, 400.0, declared=True).reference().value == 200.0
    # read from sysfs: a port that trained at half its peer's rate does not lower the bar
    slow = _lane(400.0, 200.0).reference()
    assert slow.value == 400.0 and slow.formula == "irdma0 on node1 at 400 Gb/s"
    assert _lane(None, None).reference() is None


# latency: perftest's percentiles, three generations of its output


def test_latency_rows_of_every_perftest_layout():
    felix = parse_lat_output((PUBLIC / "ib_write_lat_client_cx3_ib_cpufreq_warnings_tabs.txt").read_text())
    assert felix.layout == "percentiles" and felix.device == "mlx4_0"
    assert (felix.rows[0].bytes, felix.rows[0].p99_us, felix.rows[0].p999_us, felix.rows[0].t_typical_us) == (
        2,
        1.0,
        1.02,
        0.98,
    )
    assert len(felix.warnings) == 2 and felix.warnings[0].startswith("Conflicting CPU frequency values detected")
    old = parse_lat_output((PUBLIC / "ib_send_lat_client_all_sizes_old_format_no_percentiles_cx5vf.txt").read_text())
    assert old.layout == "typical" and len(old.rows) == 23 and old.rows[0].p99_us is None
    assert (old.rows[-1].bytes, old.rows[-1].t_typical_us) == (8388608, 708.96)
    dc = parse_lat_output((PUBLIC / "ib_send_lat_all_sizes_percentiles_DC_server_cx_roce.txt").read_text())
    assert (dc.gid_index, dc.row(2).p99_us, dc.row(8388608).p999_us) == (3, 6.34, 698.89)


def test_the_labs_own_rxe_latency_capture():
    lab = FIXTURES / "lab"
    client = parse_lat_output((lab / "ib_write_lat_client_rxe0_tcg_perftest_4.5.txt").read_text())
    server = parse_lat_output((lab / "ib_write_lat_server_rxe0_tcg_perftest_4.5.txt").read_text())
    assert (client.layout, client.device, client.gid_index, client.warnings) == ("percentiles", "rxe0", 1, ())
    assert (client.row(2).iterations, client.row(2).p99_us, server.row(2).p99_us) == (1000, 4538.22, 4843.25)
    verdict = judge_latency(client, 2, (100000, "gates.latency.max_p99_us"), 0.9)
    assert verdict.passed and verdict.reason == "p99 4538.22 µs <= 100000 µs = gates.latency.max_p99_us"


def test_latency_verdicts_show_their_sums():
    felix = parse_lat_output((PUBLIC / "ib_write_lat_client_cx3_ib_cpufreq_warnings_tabs.txt").read_text())
    settings = gates_config().latency
    ib = judge_latency(felix, 2, latency_limit(settings, "infiniband"), settings.warn_fraction)
    assert (ib.status, ib.measured, ib.threshold) == ("pass", 1.0, 4.2)
    assert ib.reason == "p99 1 µs <= 4.2 µs = the InfiniBand default"
    tight = judge_latency(felix, 2, (0.95, "gates.latency.max_p99_us"), 0.9)
    assert tight.status == "fail" and tight.reason == (
        "p99 1 µs > 0.95 µs = gates.latency.max_p99_us "
        "(perftest: the CPU clock was not at its maximum, which inflates latency)"
    )
    near = judge_latency(felix, 2, (1.05, "gates.latency.max_p99_us"), 0.9)
    assert near.status == "warn" and "above the warning level 0.90 × 1.05 µs = 0.945 µs" in near.reason
    dc = parse_lat_output((PUBLIC / "ib_send_lat_all_sizes_percentiles_DC_server_cx_roce.txt").read_text())
    roce = judge_latency(dc, 2, latency_limit(settings, "roce"), settings.warn_fraction)
    assert not roce.passed and roce.reason == "p99 6.34 µs > 5 µs = the RoCE default"
    old = parse_lat_output((PUBLIC / "ib_send_lat_client_all_sizes_old_format_no_percentiles_cx5vf.txt").read_text())
    ancient = judge_latency(old, 2, latency_limit(settings, "infiniband"), 0.9)
    assert not ancient.passed and "printed no 99% percentile (perftest before July 2016)" in ancient.reason
    assert latency_limit(settings, "softroce") is None and latency_limit(settings, "erdma") is None
    assert not judge_latency(felix, 64, latency_limit(settings, "infiniband"), 0.9).passed


def test_a_latency_lane_that_broke_or_exited_badly_fails():
    settings = gates_config({"latency": {"max_p99_us": 50}}).latency
    felix = (PUBLIC / "ib_write_lat_client_cx3_ib_cpufreq_warnings_tabs.txt").read_text()
    limit = latency_limit(settings, "roce")
    assert limit == (50, "gates.latency.max_p99_us")
    ok = judge_lane(LaneOutput(_lane(None, None), felix, 0, "", 0), settings, limit)
    assert ok.passed and ok.gate == "latency" and ok.details["perftest_warnings"]
    assert not judge_lane(LaneOutput(_lane(None, None), felix, 1, "", 0), settings, limit).passed
    failed = (PUBLIC / "ib_write_bw_completion_with_error_status4_failed_run_iter_bw.txt").read_text()
    broken = judge_lane(LaneOutput(_lane(None, None), failed, 1, "", 0), settings, limit)
    assert broken.reason == (  # perftest's error, then what it printed last
        "ib_write_lat on node2 gave no result: perftest reported an error: Completion with error at client: "
        "Failed status 4: wr_id 0 syndrom 0x51 | scnt=828, ccnt=700 | Failed to complete run_iter_bw function "
        "successfully"
    )


# each part against its own past


def test_a_latency_lane_its_timeout_stopped_says_so_and_which_setting_bounds_it():
    """A lab client cut where `timeout` stops it (after the table's header) and killed: 137."""
    settings = gates_config({"latency": {"max_p99_us": 50, "timeout_s": 60}}).latency
    whole = (FIXTURES / "lab/ib_write_lat_client_rxe0_tcg_perftest_4.5.txt").read_text()
    cut = whole[: whole.index(" 2       1000")]
    for status in (124, 137):
        output = LaneOutput(_lane(None, None), cut, status, "", None, "ssh", 60, latency_tool(settings).timeout_setting)
        stopped = judge_lane(output, settings, (50, "gates.latency.max_p99_us"))
        assert not stopped.passed and stopped.reason.startswith(
            "ib_write_lat on node2 was stopped at its timeout (60 s, gates.latency.timeout_s) before it printed"
        ), stopped.reason
        assert "stuck or slower than that allows; it had printed: " in stopped.reason
        assert stopped.reason.rsplit(" | ", 1)[-1].startswith("#bytes #iterations"), stopped.reason
    # the same cut output from a run that ended on its own is perftest's, not the clock's
    ended = judge_lane(LaneOutput(_lane(None, None), cut, 1, "", 1, timeout_s=60), settings, (50, "x"))
    assert ended.reason.startswith("ib_write_lat on node2 gave no result: ") and "#bytes" in ended.reason


def test_a_baseline_is_the_median_of_the_first_passing_runs_and_then_stays():
    settings = gates_config({"baseline": {"runs": 3}}).baseline
    record: dict = {}
    notes = []
    for value in (24.0, 20.0, 23.0):
        comparison, record = compare(value, "Gb/s", record, settings, False, 1_800_000_000.0)
        notes.append(comparison.note)
    assert notes == ["baseline: 1 of 3 runs recorded", "baseline: 2 of 3 runs recorded", "baseline recorded: 23 Gb/s"]
    assert record["baseline"] == 23.0
    steady, record = compare(22.5, "Gb/s", record, settings, False, 1_800_000_100.0)
    assert (
        steady.kind == "steady"
        and steady.note == "-2.2% against its baseline 23 Gb/s (median of 3 runs since 2027-01-15)"
    )
    drift, record = compare(21.5, "Gb/s", record, settings, False, 1_800_000_200.0)
    assert drift.kind == "drift" and drift.note.startswith("6.5% below its baseline 23 Gb/s")
    assert drift.note.endswith("more than gates.baseline.max_drop 5%") and record["baseline"] == 23.0
    # latency: worse is higher, and a p99 has its own tolerance (25 % unless written): the 10 %
    # rise that bandwidth's 5 % would flag is jitter
    lat = {"baseline": 2.0, "samples": [2.0], "since": 1_800_000_000.0}
    jitter, _ = compare(2.2, "µs", lat, settings, True, 1_800_000_000.0)
    up, _ = compare(2.6, "µs", lat, settings, True, 1_800_000_000.0)
    down, _ = compare(1.8, "µs", lat, settings, True, 1_800_000_000.0)
    assert jitter.kind == "steady" and down.kind == "steady"
    assert up.kind == "drift" and up.note.startswith("30.0% above its baseline 2 µs")
    assert up.note.endswith("more than gates.baseline.max_latency_rise 25%")
    lab = gates_config({"baseline": {"max_latency_rise": 10}}).baseline  # emulation: p99 8× between runs
    assert compare(16.0, "µs", lat, lab, True, 1_800_000_000.0)[0].kind == "steady"


def test_baselines_are_kept_per_cluster_and_flag_a_part_that_fell_even_while_it_passes(tmp_path, monkeypatch):
    monkeypatch.setenv("RDMAPROV_STATE", str(tmp_path))
    settings = gates_config({"baseline": {"runs": 1}}).baseline

    def rail(value: float, status: str = "pass") -> GateResult:
        return GateResult(
            "rail",
            Subject.parse("node1:mlx5_0 -> node2:mlx5_0"),
            status != "fail",
            "x",
            value,
            380.0,
            "Gb/s",
            status=status,
        )

    first = [
        rail(395.0),
        rail(10.0, "fail"),
        GateResult("node", Subject.parse("node1"), True, "skipped", status="skipped"),
    ]
    apply_baselines(first, "prod", settings)
    assert first[0].reason == "x; baseline recorded: 395 Gb/s" and first[0].baseline["value"] == 395.0
    assert first[1].baseline is None and first[2].baseline is None  # failures and skips are no baseline
    parts = load_parts("prod")
    assert list(parts) == ["rail node1:mlx5_0 -> node2:mlx5_0"] and parts[next(iter(parts))]["hosts"] == [
        "node1",
        "node2",
    ]
    later = [rail(372.0)]  # clears 0.95 × 400, but 5.8 % below its own past
    apply_baselines(later, "prod", settings)
    assert (later[0].status, later[0].passed, later[0].baseline["drift"]) == ("warn", True, True)
    assert later[0].baseline["change"] == round((372 - 395) / 395, 4)
    strict = gates_config({"baseline": {"runs": 1, "action": "fail"}}).baseline
    failing = [rail(372.0)]
    apply_baselines(failing, "prod", strict)
    assert (failing[0].status, failing[0].passed) == ("fail", False)
    assert reset_parts("prod", ["node3"]) == [] and reset_parts("prod", ["node2"]) == [
        "rail node1:mlx5_0 -> node2:mlx5_0"
    ]
    assert load_parts("prod") == {}
    off = [rail(100.0)]
    apply_baselines(off, "prod", gates_config({"baseline": {"enabled": False}}).baseline)
    assert off[0].baseline is None and load_parts("prod") == {}


def test_a_damaged_baselines_file_costs_only_its_damaged_parts(tmp_path, monkeypatch):
    monkeypatch.setenv("RDMAPROV_STATE", str(tmp_path))
    subject = "node1:mlx5_0 -> node2:mlx5_0"
    good = {"gate": "rail", "subject": subject, "hosts": ["node1", "node2"], "unit": "Gb/s", "baseline": 390.0}
    damaged = {
        "rail zero": {**good, "baseline": 0},
        "rail word": {**good, "samples": ["fast"]},
        "rail list": [1, 2],
        f"rail {subject}": good,
    }
    path = baseline_file("prod")
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps({"parts": damaged}))
    assert list(load_parts("prod")) == [f"rail {subject}"]
    again = [GateResult("rail", Subject.parse(subject), True, "x", 380.0, 300.0, "Gb/s")]
    apply_baselines(again, "prod", gates_config().baseline)
    assert again[0].baseline["value"] == 390.0 and not again[0].baseline["drift"]


def test_runs_at_once_on_one_cluster_each_keep_their_figures(tmp_path, monkeypatch):
    """A scheduled check beside an apply: each records its parts; neither write drops the other's."""
    import multiprocessing

    monkeypatch.setenv("RDMAPROV_STATE", str(tmp_path))
    settings = gates_config({"baseline": {"runs": 50}}).baseline

    def record(pair: str) -> None:
        for _ in range(40):
            apply_baselines(
                [GateResult("ib_write_bw", Subject.parse(pair), True, "x", 95.0, 90.0, "Gb/s")], "prod", settings
            )

    runs = [multiprocessing.get_context("fork").Process(target=record, args=(p,)) for p in ("a -> b", "c -> d")]
    for run in runs:
        run.start()
    for run in runs:
        run.join(60)
    parts = load_parts("prod")
    assert sorted(parts) == ["ib_write_bw a -> b", "ib_write_bw c -> d"]
    assert [len(part["samples"]) for part in parts.values()] == [40, 40]


# diagnosis after a failed gate, and the result's JSON


def test_only_a_cluster_gate_that_ran_and_fell_short_calls_for_a_diagnosis():
    # an all_reduce that ran names each node's MPI too: only the refusal before it ran is left alone
    slow = GateResult(
        "all_reduce", Subject.parse("a,b"), False, "0.1 GB/s < 1 GB/s", 0.1, 1.0, "GB/s", details={"mpi": {"a": "4"}}
    )
    broke = GateResult(
        "ib_write_bw", Subject.parse("a -> b"), False, "ib_write_bw on b gave no result: Completion with error"
    )
    drift = GateResult("ib_write_bw", Subject.parse("a -> b"), False, "x", 20.0, 10.0, "Gb/s", baseline={"drift": True})
    mixed = GateResult(
        "all_reduce",
        Subject.parse("a,b"),
        False,
        "one MPI job cannot span",
        details={"mpi": {"a": "4.1.4"}, "mixed_mpi": True},
    )
    rail = GateResult("rail", Subject.parse("a:mlx5_0 -> b:mlx5_0"), False, "slow", 1.0, 10.0, "Gb/s")
    assert cluster_gate_failed([slow]) and cluster_gate_failed([broke, drift])
    assert not cluster_gate_failed([drift, mixed, rail])


def test_subjects_hold_their_nodes_and_hcas_and_read_back_as_shown():
    rail = Subject.pair(End("node1", "mlx5_0"), End("node-2.b", "mlx5_0"))
    kinds = {
        "gpu7": Subject.node("gpu7"),
        "a -> b": Subject.pair("a", "b"),
        "node1:mlx5_0 -> node-2.b:mlx5_0": rail,
        "a -> b rail 3": Subject.pair("a", "b", rail=3),
        "a,b,c": Subject.job(["a", "b", "c"]),
    }
    for shown, subject in kinds.items():
        assert str(subject) == shown and Subject.parse(shown) == subject
    assert rail.hosts == ["node1", "node-2.b"] and [end.hca for end in rail.ends] == ["mlx5_0", "mlx5_0"]
    assert kinds["a -> b rail 3"].rail == 3 and kinds["a,b,c"].hosts == ["a", "b", "c"]
    # JSON shows the subject as its text; the nodes travel as values
    result = GateResult("rail", rail, True, "ok")
    assert result.to_json()["subject"] == "node1:mlx5_0 -> node-2.b:mlx5_0" and result.hosts == ["node1", "node-2.b"]


def test_all_reduce_pairs_localize_like_ib_write_bw_pairs():
    def test(pairs):
        return [GateResult("all_reduce", Subject.job([a, b]), "n3" not in (a, b), "busbw") for a, b in pairs]

    diagnosis = localize(["n1", "n2", "n3", "n4"], test)
    assert list(diagnosis.suspects) == ["n3"] and diagnosis.cleared == ["n1", "n2", "n4"]


def test_a_suspects_rails_name_the_slow_hca():
    rails = [
        GateResult("rail", Subject.parse("n2:mlx5_2 -> n7:mlx5_2"), False, "ib_write_bw on n7 gave no result"),
        GateResult("rail", Subject.parse("n2:mlx5_0 -> n7:mlx5_0"), True, "ok", 392.0, unit="Gb/s"),
        GateResult("rail", Subject.parse("n2:mlx5_3 -> n7:mlx5_3"), False, "48 Gb/s < 380 Gb/s", 48.0, unit="Gb/s"),
        GateResult("rail", Subject.parse("n2:mlx5_1 -> n7:mlx5_1"), True, "ok", 389.5, unit="Gb/s"),
    ]
    assert rail_evidence("n7", rails) == [
        "n2:mlx5_2 -> n7:mlx5_2: ib_write_bw on n7 gave no result",
        "n2:mlx5_3 -> n7:mlx5_3: 48 Gb/s < 380 Gb/s",
        "every other rail of n7 >= 389.5 Gb/s",
    ]
    assert rail_evidence("n9", rails) == []


def test_a_run_with_rail_latency_gates_and_a_diagnosis_matches_the_result_schema():
    rail = GateResult("rail", Subject.parse("a:mlx5_0 -> b:mlx5_0"), True, "ok", 390.0, 380.0, "Gb/s", expected=400.0)
    rail.baseline, rail.duration_s = {"value": 392.0, "runs": 3, "since": "2026-11-23", "change": -0.005}, 5.2
    latency = GateResult("latency", Subject.parse("a:mlx5_0 -> b:mlx5_0"), True, "p99", 1.6, 4.2, "µs")
    failed = GateResult("ib_write_bw", Subject.parse("a -> b"), False, "slow", 2.0, 22.5, "Gb/s")
    diagnosis = localize(
        ["a", "b", "c"],
        lambda pairs: [GateResult("ib_write_bw", Subject.pair(x, y), "b" not in (x, y), "2 Gb/s") for x, y in pairs],
    )
    result = RunResult("verify", "inv.yaml", "c", "2026-01-01T00:00:00+00:00", 1.0, [], [], [rail, latency, failed])
    result.diagnosis = diagnosis
    doc = result.to_json()
    jsonschema.validate(doc, load_schema("result"))
    xml = junit_xml("c", [], [rail, latency, failed])
    assert 'classname="rail" name="a:mlx5_0 -&gt; b:mlx5_0"' in xml and 'failures="1"' in xml
    assert doc["exit_code"] == 4 and doc["diagnosis"]["rounds"] == 2 and "b" in doc["diagnosis"]["suspects"]


def test_a_latency_bound_of_a_second_reads_in_microseconds_not_in_exponent_form():
    """`:g` wrote 1,000,000 µs as 1e+06 in the reason (seen on the lab, whose bound is 1 s there)."""
    lab = parse_lat_output((FIXTURES / "lab/ib_write_lat_client_rxe0_tcg_perftest_4.5.txt").read_text())
    verdict = judge_latency(lab, 2, (1_000_000, "gates.latency.max_p99_us"), 0.9)
    assert verdict.reason == "p99 4538.22 µs <= 1000000 µs = gates.latency.max_p99_us", verdict.reason
    assert microseconds(1234567.8) == "1234568" and microseconds(4.2) == "4.2"
    assert microseconds(999999.7) == "1000000" and microseconds(999999.4) == "999999"
