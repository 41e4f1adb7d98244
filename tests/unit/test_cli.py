"""The reports the command line only prints: the lab's, the facts', verify's."""

from __future__ import annotations

import io
import json
from dataclasses import asdict
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from rich.console import Console

from rdmaprov.health.facts_report import FactsReport, read_facts
from rdmaprov.inventory import load_inventory
from rdmaprov.lab.lab import Lab
from rdmaprov.lab.report import down_summary, status_exit_code, status_table, up_summary
from rdmaprov.parsers.node import parse_node_report
from rdmaprov.workflows.verify import verify
from tests.conftest import FIXTURES


def _rendered(renderable) -> str:
    """What the CLI prints when piped (wide, no colours), whatever FORCE_COLOR says."""
    buffer = io.StringIO()
    Console(file=buffer, soft_wrap=True, width=200, force_terminal=False).print(renderable)
    return buffer.getvalue()


LAB_ROWS = [
    {"name": "node1", "kind": "vm", "address": "10.77.0.10", "pid": 4242, "running": True, "ssh": True},
    {"name": "node2", "kind": "container", "address": "10.77.0.11", "pid": None, "running": False, "ssh": False},
]


def test_lab_status_table_and_exit_code():
    assert _rendered(status_table(Path("/tmp/lab-x"), LAB_ROWS)) == (
        "lab /tmp/lab-x\n"
        "┏━━━━━━━┳━━━━━━━━━━━┳━━━━━━━━━━━━┳━━━━━━┳━━━━━━━━━┳━━━━━━━┓\n"
        "┃ name  ┃ kind      ┃ address    ┃ pid  ┃ running ┃ ssh   ┃\n"
        "┡━━━━━━━╇━━━━━━━━━━━╇━━━━━━━━━━━━╇━━━━━━╇━━━━━━━━━╇━━━━━━━┩\n"
        "│ node1 │ vm        │ 10.77.0.10 │ 4242 │ True    │ True  │\n"
        "│ node2 │ container │ 10.77.0.11 │ None │ False   │ False │\n"
        "└───────┴───────────┴────────────┴──────┴─────────┴───────┘\n"
    )
    assert status_exit_code(LAB_ROWS) == 4
    assert status_exit_code(LAB_ROWS[:1]) == 0
    assert status_exit_code([{**LAB_ROWS[0], "ssh": False}]) == 4


def test_lab_status_without_a_lab():
    assert _rendered(status_table(Path("/tmp/lab-x"), [])) == "no lab running from /tmp/lab-x\n"
    assert status_exit_code([]) == 0


def test_lab_up_and_down_summaries(tmp_path):
    node = {"name": "node1", "address": "10.77.0.10", "prefixlen": 24, "kind": "vm", "workdir": str(tmp_path / "node1")}
    state = {"kind": "vm", "nodes": [node],
             "timings": {"image_s": 12.4, "mirror_s": 3.6, "boot_to_ssh_s": 40.5, "total_s": 57.2}}
    lab = Lab(tmp_path, state)  # its node has no PID: no memory to count
    assert up_summary(lab, state) == [
        "lab up: 1 vm nodes in 57s (image 12s, mirror 4s, boot to SSH 40s), nodes' memory 0 MiB",
        f"inventory: {tmp_path}/inventory.yaml  (next: rdmaprov apply {tmp_path}/inventory.yaml)",
    ]
    assert down_summary(["node1", "rdmaprov0"]) == "lab down: removed node1, rdmaprov0"
    assert down_summary([]) == "lab down: removed nothing (no lab running)"


def test_facts_report_json_and_exit_code():
    report = parse_node_report((FIXTURES / "lab" / "node_report_rxe.txt").read_text())
    facts = FactsReport({"n1": report, "n2": RuntimeError("cat: /sys/class/infiniband: Permission denied")},
                        {"n3": "Could not connect (timed out)"})
    doc = json.loads(json.dumps(facts.to_json()))
    assert list(doc) == ["n1", "n2", "n3"]
    assert doc["n1"] == json.loads(json.dumps(asdict(report)))
    assert (doc["n1"]["netns"], doc["n1"]["ports"][0]["device"]) == ("exclusive", "rxe0")
    assert doc["n2"] == {"error": "cat: /sys/class/infiniband: Permission denied"}
    assert doc["n3"] == {"unreachable": "Could not connect (timed out)"}
    assert facts.exit_code == 4
    assert FactsReport({"n1": report}, {}).exit_code == 0
    assert FactsReport({"n1": report}, {"n3": "refused"}).exit_code == 4
    assert FactsReport({"n2": RuntimeError("x")}, {}).exit_code == 4


@pytest.fixture
def unreachable_inventory(tmp_path):
    """One host on a loopback port nothing listens on: connecting fails at once, for real."""
    path = tmp_path / "inv.yaml"
    path.write_text("cluster:\n  name: c\n  ssh: {port: 1, connect_timeout: 5}\nhosts:\n  a: {address: 127.0.0.1}\n")
    return load_inventory(path)


def test_read_facts_reports_an_unreachable_host(unreachable_inventory):
    facts = read_facts(unreachable_inventory, ["a"])
    assert facts.reports == {}
    assert list(facts.unreachable) == ["a"]
    assert facts.exit_code == 4
    assert list(facts.to_json()["a"]) == ["unreachable"]


def test_verify_workflow_result(unreachable_inventory):
    before = datetime.now(timezone.utc).replace(microsecond=0)
    result = verify(unreachable_inventory, ["a"], gates=True)
    started = datetime.fromisoformat(result.started_at)
    assert before <= started <= datetime.now(timezone.utc) and started.utcoffset() == timedelta(0)
    assert (result.command, result.inventory, result.cluster) == ("verify", str(unreachable_inventory.path), "c")
    assert result.hosts == [] and result.duration_s > 0
    assert [(v.name, v.status) for v in result.verify] == [("a", "unreachable")]
    assert result.gates and not any(g.passed for g in result.gates)  # no gate passes across a host it cannot reach
    assert result.exit_code == 4
    doc = result.to_json()
    assert (doc["command"], doc["exit_code"], doc["verify"][0]["status"]) == ("verify", 4, "unreachable")
