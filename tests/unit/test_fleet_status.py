"""`rdmaprov status`: the fleet from one `scontrol -o show node` (real Slurm 22.05.8 outputs, and a
10,000-node state made of the real lab line with other names, states and reasons), each inventory
host classified, the exit code, JSON and the table that lists only what is not in service."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import datetime

import pytest
from rich.console import Console

from rdmaprov.errors import UserError
from rdmaprov.inventory import load_inventory
from rdmaprov.parsers.slurm import SlurmNode, parse_scontrol_nodes
from rdmaprov.report.status import print_status
from rdmaprov.slurm.status import FleetStatus, NodeStatus, classify, counts, fleet
from rdmaprov.workflows.status import fleet_status, read, sources
from tests.conftest import FIXTURES
from tests.support.inventories import write
from tests.support.slurm_fleet import LAB, scontrol_nodes

SLURM = FIXTURES / "slurm"


def _inventory(tmp_path, hosts: int = 3, slurm: str = "{enabled: true, controller: node1}"):
    names = "".join(f"  node{i}: {{address: 10.0.{i // 250}.{i % 250 + 1}}}\n" for i in range(1, hosts + 1))
    return load_inventory(write(tmp_path, f"cluster:\n  name: lab\n  slurm: {slurm}\nhosts:\n{names}"))


def _status(tmp_path, text: str, hosts: int = 3, clock: str = "2026-11-23T21:40:00") -> FleetStatus:
    inventory = _inventory(tmp_path, hosts)
    result = FleetStatus(inventory.name, "node1", "")
    read(result, f"{clock}\n{text}", inventory, list(inventory.hosts))
    return result


def test_the_lab_fleet_with_one_node_drained_by_its_own_check_and_one_slurm_never_heard_of(tmp_path):
    result = _status(tmp_path, LAB)
    node1, node2, node3 = result.nodes
    assert node1 == NodeStatus("node1", "node1", "healthy", "IDLE", "", "")
    assert node2 == NodeStatus(
        "node2",
        "node2",
        "drained by rdmaprov",
        "IDLE+DRAIN",
        "rdmaprov: rdma.device_present rxe0: missing (+1 more)",
        "2026-11-23T20:33:49",
    )
    assert node3.status == "not in Slurm" and node3.failing
    assert result.exit_code == 4 and result.read_at == "2026-11-23T21:40:00"
    document = result.to_json()
    assert document["counts"] == {
        "healthy": 1,
        "drained by rdmaprov": 1,
        "not reporting": 0,
        "down": 0,
        "not in Slurm": 1,
        "drained by an admin": 0,
        "powered down": 0,
        "rebooting": 0,
    }
    # the age is the controller's clock against the reason's stamp, both Slurm's local time
    assert document["nodes"][1]["age"] == "1 h 6 min" and document["nodes"][1]["failing"]


def test_silence_outranks_a_drain_and_an_admins_drain_is_shown_but_not_failing():
    ours, admin = parse_scontrol_nodes((SLURM / "scontrol_show_node_drained_not_responding.txt").read_text())
    # slurmd stopped on both (UNKNOWN+DRAIN+NOT_RESPONDING): no check runs there any more
    assert classify(ours) == classify(admin) == "not reporting"
    [resumed] = parse_scontrol_nodes((SLURM / "scontrol_show_node_resumed_unknown_not_responding.txt").read_text())
    assert classify(resumed) == "not reporting"
    lab = {n.name: n for n in parse_scontrol_nodes(LAB)}
    by_admin = lab["node2"].__class__("node2", frozenset({"IDLE", "DRAIN"}), ("main",), "DIMM swap, ticket 4711")
    assert classify(by_admin) == "drained by an admin"
    [status] = fleet(["node2"], {}, [by_admin])
    assert not status.failing


def test_a_reason_slurm_24_11_keeps_after_a_resume_is_not_shown_as_the_nodes_state():
    kept = (SLURM / "scontrol_show_node_24.11.5_idle_resumed_reason_kept.txt").read_text()
    stale = (SLURM / "scontrol_show_node_24.11.5_unknown_stale_admin_reason.txt").read_text()
    drained = (SLURM / "scontrol_show_node_24.11.5_idle_drained_after_start.txt").read_text()
    statuses = [fleet(["node3"], {}, parse_scontrol_nodes(text))[0] for text in (kept, stale, drained)]
    assert [(s.status, s.reason, s.since) for s in statuses] == [
        ("healthy", "", ""),
        ("not reporting", "", ""),
        ("drained by rdmaprov", "rdmaprov: rdma.device_present rxe0: missing (+1 more)", "2026-11-26T19:14:43"),
    ]
    # a reboot or power-down asked with a reason keeps it: the node is on its way out of service
    [kept] = parse_scontrol_nodes(kept)
    for state, status in (("REBOOT_REQUESTED", "rebooting"), ("POWERING_DOWN", "powered down")):
        leaving = replace(kept, states=frozenset({"IDLE", state}), reason="kernel 6.1.0-28", reason_time="")
        assert [(s.status, s.reason) for s in fleet(["node3"], {}, [leaving])] == [(status, "kernel 6.1.0-28")]


def test_inventory_names_map_to_slurm_names_and_the_sources_follow_the_mode(tmp_path):
    [mapped] = fleet(["gpu.1"], {"gpu.1": "node2"}, parse_scontrol_nodes(LAB))
    assert (mapped.host, mapped.slurm_name, mapped.status) == ("gpu.1", "node2", "drained by rdmaprov")
    full = _inventory(tmp_path)
    assert sources(full, ["node2", "node3"]) == ["node1"]  # the controller answers for every node
    site = _inventory(tmp_path, 5, "{enabled: true, mode: health_check}")
    assert sources(site, list(site.hosts)) == ["node1", "node2", "node3"]  # any node's scontrol asks it


def test_a_ten_thousand_node_state_in_slurms_own_format(tmp_path):
    """tests/support/slurm_fleet.py; the time it takes is in bench/RESULTS.md
    (bench/fleet_status.py), not here."""
    text = scontrol_nodes(10_000)
    result = _status(tmp_path, text, hosts=10_000)
    assert counts(result.nodes) == {
        "healthy": 9_700,
        "drained by rdmaprov": 100,
        "not reporting": 100,
        "down": 0,
        "not in Slurm": 0,
        "drained by an admin": 100,
        "powered down": 0,
        "rebooting": 0,
    }
    assert result.nodes[9].reason == "rdmaprov: rdma.port_state mlx5_2 port 1: DOWN"  # node10: 10 % 8
    console = Console(record=True, width=200)
    print_status(result, console)
    shown = console.export_text()
    assert "│ node10 " in shown and "│ node1 " not in shown  # healthy nodes counted, not listed
    assert shown.rstrip().endswith(
        "10000 nodes: 9700 healthy, 100 drained by rdmaprov, 100 not reporting, 100 drained by an admin — exit 4"
    )


def test_no_source_answered_is_a_failure_that_says_who_was_asked():
    result = FleetStatus("lab", "", "", unread={"node1": "Could not connect (timed out)"})
    assert result.exit_code == 4 and result.to_json()["unread"] == {"node1": "Could not connect (timed out)"}
    console = Console(record=True, width=200)
    print_status(result, console)
    assert console.export_text().splitlines() == [
        "node1: Slurm not read: Could not connect (timed out)",
        "the fleet's state could not be read from Slurm — exit 4",
    ]


def test_ages_read_as_a_person_says_them():
    now = datetime(2026, 11, 25, 12, 0, 0)
    for since, said in (("2026-11-25T11:48:00", "12 min"), ("2026-11-25T08:55:00", "3 h 5 min"), ("", "")):
        assert NodeStatus("n", "n", "drained by rdmaprov", "", "", since).age(now) == said
    assert NodeStatus("n", "n", "drained by rdmaprov", "", "", "2026-11-23T08:00:00").age(now) == "2 d 4 h"


def test_an_inventory_without_slurm_is_told_what_to_run_instead(tmp_path):
    path = write(tmp_path, "cluster:\n  name: lab\nhosts:\n  node1: {address: 10.0.0.1}\n")
    with pytest.raises(UserError) as info:
        fleet_status(load_inventory(path), ["node1"])
    assert [p.format() for p in info.value.problems] == [
        f"{path}: status reads what the nodes' own checks left in Slurm, and this inventory declares no Slurm "
        "(fix: enable cluster.slurm (mode health_check on a site's own Slurm), or run `rdmaprov verify` to check "
        "the nodes over SSH)"
    ]


def test_slurms_other_states_each_read_as_what_they_mean():
    def status(states: str, reason: str = "") -> str:
        return classify(SlurmNode("n", frozenset(states.split("+")), ("main",), reason))

    assert status("FUTURE") == "not reporting"  # defined, not started: no check runs there
    assert status("DOWN", "Node unexpectedly rebooted") == "down"  # slurmd answers; Slurm took it out
    assert status("IDLE+FAIL", "bad PSU") == status("ALLOCATED+FAILING", "bad PSU") == "drained by an admin"
    assert status("IDLE+POWERED_DOWN") == "powered down" and status("IDLE+REBOOT_REQUESTED") == "rebooting"
    assert status("MIXED") == "healthy"


def test_a_site_controller_that_is_no_node_is_not_judged_and_a_clock_line_is_checked(tmp_path):
    text = "cluster:\n  name: site\n  slurm: {enabled: true, mode: health_check, controller: node3}\n"
    text += "hosts:\n" + "".join(f"  node{i}: {{address: 10.0.0.{i}}}\n" for i in (1, 2, 3))
    site = load_inventory(write(tmp_path, text))
    result = FleetStatus(site.name, "node3", "")
    read(result, "not a clock\n" + LAB, site, list(site.hosts))
    assert [n.host for n in result.nodes] == ["node1", "node2"] and result.read_at == ""
    # a reason stamped a little ahead of the source's clock is 0 min old, not negative
    assert NodeStatus("n", "n", "down", "", "", "2026-11-25T12:00:30").age(datetime(2026, 11, 25, 12)) == "0 min"


def test_the_command_on_a_controller_that_does_not_answer_says_so_as_json(tmp_path, capsys):
    """The real command, its SSH to a loopback port nothing listens on failing at once."""
    from rdmaprov import cli

    text = "cluster:\n  name: c\n  ssh: {port: 1, connect_timeout: 5}\n  slurm: {enabled: true, controller: gpu-a}\n"
    path = write(tmp_path, text + "hosts:\n  gpu-a: {address: 127.0.0.1}\n")
    assert cli.main(["status", str(path), "--json"]) == 4
    document = json.loads(capsys.readouterr().out)
    assert (document["source"], list(document["unread"]), document["nodes"]) == ("", ["gpu-a"], [])
    assert document["unread"]["gpu-a"].startswith("Could not connect (")
