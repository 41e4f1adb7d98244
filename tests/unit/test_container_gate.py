"""The container gate's parts: its settings, how a lane runs in the image, and what a container
lacked, read from real podman and perftest outputs (tests/fixtures/containers/)."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from rich.console import Console

from rdmaprov.health.baselines import apply_baselines, baseline_file, load_parts, part_key
from rdmaprov.health.gates.container import LATENCY_GATE, bandwidth_figure, judge_lane, latency_figure
from rdmaprov.health.gates.ib_write_bw import bandwidth_tool, pair_bounds
from rdmaprov.health.gates.perftest import Endpoint, Lane, LaneOutput, Tool
from rdmaprov.health.gates.result import GateResult
from rdmaprov.health.state import updating
from rdmaprov.inventory.loader import load_inventory
from rdmaprov.parsers.container import container_lack, provider_name
from rdmaprov.parsers.perftest import parse_bw_output
from tests.conftest import FIXTURES
from tests.support.inventories import gates_config, problems, write

CAPTURED = FIXTURES / "containers"
IMAGE = "localhost/rdmaprov-rdma:lab"


@pytest.mark.parametrize(
    ("fixture", "words"),
    [
        ("ib_write_bw_client_memlock_64k.txt", "may not lock memory (memlock is limited in it): rdmaprov apply"),
        ("ib_write_bw_no_dev_infiniband.txt", "sees no RDMA device: rdmaprov apply --tags containers puts back"),
        ("ib_write_bw_no_verbs_provider.txt", "no verbs provider for rxe0 (libibverbs could not load librxe-rdmav*"),
        ("podman_image_not_known.txt", f"the image {IMAGE} is not on the node: pull or load it"),
        ("podman_no_program_in_image.txt", f"the image {IMAGE} has no ib_send_bw: install perftest"),
    ],
)
def test_what_the_container_lacked_is_named(fixture, words):
    assert words in container_lack((CAPTURED / fixture).read_text(), IMAGE, "rxe0")


@pytest.mark.parametrize(
    ("fixture", "words"),
    [
        ("docker_no_such_image.txt", f"the image {IMAGE} is not on the node: pull or load it"),
        ("docker_no_program_in_image.txt", f"the image {IMAGE} has no ib_send_bw: install perftest"),
        (
            "docker_no_dev_infiniband.txt",
            "sees no RDMA device: rdmaprov apply --tags containers puts back "
            "/usr/local/bin/rdmaprov-docker-run, whose flags give it /dev/infiniband",
        ),
        ("docker_no_rdmaprov_docker_run.txt", "the node has no rdmaprov-docker-run: rdmaprov apply --tags containers"),
        ("docker_daemon_stopped.txt", "dockerd is not running on the node: rdmaprov apply --tags containers starts"),
        ("docker_gpus_without_toolkit.txt", "docker cannot give the container GPUs (--gpus): the node has no NVIDIA"),
        # dockerd's AppArmor failure names a program it cannot exec: the node's lack, not the image's
        ("docker_no_apparmor_parser.txt", "dockerd cannot load its AppArmor profile (no apparmor_parser): install"),
    ],
)
def test_what_a_container_started_by_docker_lacked_is_named(fixture, words):
    assert words in container_lack((CAPTURED / fixture).read_text(), IMAGE, "rxe0", "docker")


def test_a_docker_run_that_lacked_nothing_is_judged_on_its_figure():
    text = (CAPTURED / "docker_ib_write_bw_client_rxe.txt").read_text()
    assert container_lack(text, IMAGE, "rxe0", "docker") is None
    assert parse_bw_output(text).average_gbps == 0.14


def test_a_run_that_lacked_nothing_is_judged_on_its_figure():
    text = (CAPTURED / "ib_write_bw_client_podman_rxe.txt").read_text()
    assert container_lack(text, IMAGE, "rxe0") is None
    assert parse_bw_output(text).average_gbps == 0.21


def test_a_provider_is_named_only_where_libibverbs_named_it():
    text = (CAPTURED / "ib_write_bw_no_verbs_provider.txt").read_text()
    assert "for mlx5_bond_0 (no provider loaded)" in container_lack(text, IMAGE, "mlx5_bond_0")
    assert "for the HCA (no provider loaded)" in container_lack(text, IMAGE)


def test_provider_names():
    assert [provider_name(d) for d in ("mlx5_0", "rxe0", "bnxt_re1", "erdma_0", "irdma1")] == [
        "mlx5", "rxe", "bnxt_re", "erdma", "irdma"
    ]  # fmt: skip


def test_a_lane_runs_in_a_named_container_of_the_image_and_a_stray_one_is_killed_by_name():
    on_host = bandwidth_tool(gates_config().ib_write_bw, "ib_write_bw")
    in_image = Tool(on_host.program, on_host.args, on_host.timeout_s, on_host.timeout_setting, IMAGE)
    words = ["ib_write_bw", "-d", "rxe0", "-p", "18515"]
    assert on_host.launched(words, 18515) == words
    assert in_image.launched(words, 18515) == [
        "podman", "run", "--rm", "--replace", "--pull=never", f"--timeout={on_host.timeout_s}",
        "--name", "rdmaprov-ib_write_bw-18515", IMAGE, *words
    ]  # fmt: skip
    assert in_image.stray_kill({18516, 18515}) == (
        "podman kill rdmaprov-ib_write_bw-18515 rdmaprov-ib_write_bw-18516 >/dev/null 2>&1; true"
    )
    assert on_host.stray_kill({18515}).startswith("for p in '^ib_write_bw .*-p 18515( |$)'")


def test_with_docker_a_lane_runs_through_the_jobs_docker_run_after_a_stray_namesake_is_removed():
    """docker has no --replace nor --timeout: a container left behind by name is removed first,
    and --init's tini hands the program the SIGTERM that `timeout` sends the docker client."""
    tool = Tool("ib_write_bw", ("-D", "2"), 30, "gates.ib_write_bw.timeout_s", IMAGE)
    words = ["ib_write_bw", "-d", "rxe0", "-p", "18515"]
    assert tool.launched(words, 18515, "docker") == [
        "sh", "-c", 'docker rm -f "$0" >/dev/null 2>&1; exec "$@"', "rdmaprov-ib_write_bw-18515",
        "rdmaprov-docker-run", "--rm", "--init", "--pull=never", "--name", "rdmaprov-ib_write_bw-18515", IMAGE, *words
    ]  # fmt: skip
    assert tool.stray_kill({18515}, "docker") == "docker rm -f rdmaprov-ib_write_bw-18515 >/dev/null 2>&1; true"


def test_the_gate_is_off_unless_written_and_needs_an_image(tmp_path):
    assert not gates_config().container.enabled
    gate = gates_config({"container": {"image": IMAGE}}).container
    assert gate.enabled and gate.image == IMAGE
    hosts = "groups:\n  g:\n    hosts: {n1: {address: 10.0.0.1}}\n"
    inventory = write(tmp_path, "cluster:\n  name: c\n  gates:\n    container: {enabled: true}\n" + hosts)
    [problem] = problems(inventory, require_files=False)
    assert f"{inventory}:4:" in problem and "cluster.gates.container" in problem and "image" in problem
    off = write(tmp_path, "cluster:\n  name: c\n  gates:\n    container: {enabled: false}\n" + hosts, "off.yaml")
    assert not load_inventory(off, require_files=False).gates.container.enabled


def test_the_gate_is_refused_where_its_containers_would_start_under_srun(tmp_path):
    inventory = write(
        tmp_path,
        "cluster:\n  name: c\n  gates:\n    via: slurm\n    container: {image: x}\n"
        "groups:\n  g:\n    hosts: {n1: {address: 10.0.0.1}}\n",
    )
    [problem] = [p for p in problems(inventory, require_files=False) if "gates.container" in p]
    assert "cluster.gates.container: the container gate starts its containers over SSH only" in problem
    assert "(fix: set gates.via: ssh, or turn the container gate off (enabled: false))" in problem


def test_a_new_image_starts_a_baseline_of_its_own(tmp_path, monkeypatch):
    """The image's own libraries make the figure as much as the fabric: a figure in a new image is
    recorded as that image's baseline, not held to the old image's (nor does it move the old one)."""
    from rdmaprov.health.gates.subject import Subject
    from rdmaprov.health.report import print_baselines

    monkeypatch.setenv("RDMAPROV_STATE", str(tmp_path))
    settings = gates_config({"baseline": {"runs": 1}}).baseline

    def run(image: str, gbps: float) -> GateResult:
        result = GateResult("container", Subject.pair("a", "b"), True, "x", gbps, 1.0, "Gb/s", details={"image": image})
        apply_baselines([result], "prod", settings)
        return result

    run("site/train:24.05", 390.0)
    newer = run("site/train:24.06", 300.0)  # 23 % under 24.05's: a baseline of its own, no drift
    assert newer.status == "pass" and newer.reason == "x; baseline recorded: 300 Gb/s", newer
    assert sorted(load_parts("prod")) == [
        "container a -> b in site/train:24.05",
        "container a -> b in site/train:24.06",
    ]
    assert run("site/train:24.05", 300.0).baseline["drift"]  # the old image is still held to its own
    out = io.StringIO()
    print_baselines(load_parts("prod"), Console(file=out, width=200))
    shown = [line for line in out.getvalue().splitlines() if line.count("container") == 1]
    assert ["a -> b in site/train:24.05" in shown[0], "a -> b in site/train:24.06" in shown[1]] == [True, True], shown


def _lane_output(client_fixture: str, rail: int, folder: Path = CAPTURED) -> LaneOutput:
    """A lane of rail `rail` (node1 -> node2) whose client printed a captured output."""
    device = f"rxe{rail}"
    server, client = (Endpoint(host, device, 1, 1, None) for host in ("node2", "node1"))
    lane = Lane(rail, server, client, 18515 + rail)
    return LaneOutput(lane, (folder / client_fixture).read_text(), 0, "", 0)


def test_each_rail_in_the_image_gets_its_own_verdict_naming_what_its_container_lacked():
    """Every rail of a pair runs in containers at once: one rail whose container could not pin
    memory fails naming it and the node, the other is judged on its figure."""
    bounds = pair_bounds(gates_config({"ib_write_bw": {"min_gbps": 0.1}}).ib_write_bw)
    good, short = (
        _lane_output("ib_write_bw_client_podman_rxe.txt", 0),
        _lane_output("ib_write_bw_client_memlock_64k.txt", 1),
    )
    passed = judge_lane(good, IMAGE, good.lane.subject, bandwidth_figure(bounds))
    failed = judge_lane(short, IMAGE, short.lane.subject, bandwidth_figure(bounds))
    assert passed.passed and passed.measured == 0.21 and passed.details["image"] == IMAGE
    assert passed.gate == failed.gate == "container"
    assert str(passed.subject) == "node2:rxe0 -> node1:rxe0" and passed.details["rail"] == 0
    assert not failed.passed and str(failed.subject) == "node2:rxe1 -> node1:rxe1"
    assert "may not lock memory" in failed.reason and failed.reason.endswith("(on node1)")
    assert failed.details == {"image": IMAGE, "via": "ssh", "rail": 1, "host": "node1"}


def test_a_rail_in_the_image_is_held_to_the_latency_gates_p99_bound():
    """ib_write_lat in the image (the lab's rxe0 capture: p99 4538 µs) judged like the latency
    gate on the host, as a container_latency result; a container that could not pin memory is
    named before any figure, under the same gate."""
    settings = gates_config({"latency": {"max_p99_us": 5000}}).latency
    figure = latency_figure(settings, (5000.0, "gates.latency.max_p99_us"))
    lat = _lane_output("ib_write_lat_client_rxe0_tcg_perftest_4.5.txt", 0, FIXTURES / "lab")
    result = judge_lane(lat, IMAGE, lat.lane.subject, figure, LATENCY_GATE)
    assert (result.gate, result.passed, result.measured, result.unit) == ("container_latency", True, 4538.22, "µs")
    assert result.reason.startswith("p99 4538.22 µs <= 5000 µs = gates.latency.max_p99_us"), result.reason
    assert result.details["image"] == IMAGE and result.details["rail"] == 0
    strict = latency_figure(settings, (1000.0, "gates.latency.max_p99_us"))
    assert not judge_lane(lat, IMAGE, lat.lane.subject, strict, LATENCY_GATE).passed
    short = _lane_output("ib_write_bw_client_memlock_64k.txt", 1)
    lacked = judge_lane(short, IMAGE, short.lane.subject, figure, LATENCY_GATE)
    assert not lacked.passed and lacked.gate == "container_latency" and "may not lock memory" in lacked.reason
    assert lacked.reason.endswith("(on node1)")


def test_a_rails_latency_in_the_image_has_a_baseline_apart_from_its_bandwidth(tmp_path, monkeypatch):
    """One rail, one image, two figures: each keeps its own baseline, and a p99 that rose is
    flagged above its own past (lower is better), not read against the bandwidth's."""
    monkeypatch.setenv("RDMAPROV_STATE", str(tmp_path))
    config = gates_config({"baseline": {"runs": 1}, "latency": {"max_p99_us": 5000}})
    bounds = pair_bounds(gates_config({"ib_write_bw": {"min_gbps": 0.1}}).ib_write_bw)
    figure = latency_figure(config.latency, (5000.0, "gates.latency.max_p99_us"))
    bw = _lane_output("ib_write_bw_client_podman_rxe.txt", 0)
    lat = _lane_output("ib_write_lat_client_rxe0_tcg_perftest_4.5.txt", 0, FIXTURES / "lab")
    keys = [f"container node2:rxe0 -> node1:rxe0 in {IMAGE}", f"container_latency node2:rxe0 -> node1:rxe0 in {IMAGE}"]

    def run() -> list[GateResult]:
        results = [
            judge_lane(bw, IMAGE, bw.lane.subject, bandwidth_figure(bounds)),
            judge_lane(lat, IMAGE, lat.lane.subject, figure, LATENCY_GATE),
        ]
        apply_baselines(results, "prod", config.baseline)
        return results

    assert [part_key(r) for r in run()] == keys and sorted(load_parts("prod")) == keys
    assert load_parts("prod")[keys[1]]["unit"] == "µs"
    with updating(baseline_file("prod"), "parts") as kept:
        kept[keys[1]] = {**kept[keys[1]], "baseline": 1000.0}  # its past four times better than today
    bandwidth, latency = run()
    assert bandwidth.status == "pass" and not bandwidth.baseline["drift"]
    assert latency.status == "warn" and latency.baseline["drift"] and "above its baseline 1000 µs" in latency.reason
