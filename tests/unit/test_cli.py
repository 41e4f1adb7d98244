"""The reports the command line only prints: the facts', verify's."""

from __future__ import annotations

import json
from dataclasses import asdict
from datetime import datetime, timedelta, timezone

import pytest

from rdmaprov.health.facts_report import FactsReport, read_facts
from rdmaprov.inventory import load_inventory
from rdmaprov.parsers.node import parse_node_report
from rdmaprov.workflows.verify import verify
from tests.conftest import FIXTURES


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
