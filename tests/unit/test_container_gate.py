"""The container gate's parts: its settings, how a lane runs in the image, and what a container
lacked, read from real podman and perftest outputs (tests/fixtures/containers/)."""

from __future__ import annotations

import io

import pytest
from rich.console import Console

from rdmaprov.health.gates.container import judge_lane
from rdmaprov.health.gates.ib_write_bw import bandwidth_tool, pair_bounds
from rdmaprov.health.gates.perftest import Endpoint, Lane, LaneOutput, Tool
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
    on_host = bandwidth_tool(gates_config().ib_write_bw)
    in_image = Tool(on_host.program, on_host.args, on_host.timeout_s, IMAGE)
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
    from rdmaprov.health.baselines import apply_baselines, load_parts
    from rdmaprov.health.gates.result import GateResult
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


def _lane_output(client_fixture: str, rail: int) -> LaneOutput:
    """A lane of rail `rail` (node1 -> node2) whose client printed a captured output."""
    device = f"rxe{rail}"
    server, client = (Endpoint(host, device, 1, 1, None) for host in ("node2", "node1"))
    lane = Lane(rail, server, client, 18515 + rail)
    return LaneOutput(lane, (CAPTURED / client_fixture).read_text(), 0, "", 0)


def test_each_rail_in_the_image_gets_its_own_verdict_naming_what_its_container_lacked():
    """Every rail of a pair runs in containers at once: one rail whose container could not pin
    memory fails naming it and the node, the other is judged on its figure."""
    bounds = pair_bounds(gates_config({"ib_write_bw": {"min_gbps": 0.1}}).ib_write_bw)
    good, short = (
        _lane_output("ib_write_bw_client_podman_rxe.txt", 0),
        _lane_output("ib_write_bw_client_memlock_64k.txt", 1),
    )
    passed = judge_lane(good, IMAGE, bounds, good.lane.subject)
    failed = judge_lane(short, IMAGE, bounds, short.lane.subject)
    assert passed.passed and passed.measured == 0.21 and passed.details["image"] == IMAGE
    assert str(passed.subject) == "node2:rxe0 -> node1:rxe0" and passed.details["rail"] == 0
    assert not failed.passed and str(failed.subject) == "node2:rxe1 -> node1:rxe1"
    assert "may not lock memory" in failed.reason and failed.reason.endswith("(on node1)")
    assert failed.details == {"image": IMAGE, "via": "ssh", "rail": 1, "host": "node1"}
