"""The reports the command line only prints: verify's."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from rdmaprov.inventory import load_inventory
from rdmaprov.workflows.verify import verify


@pytest.fixture
def unreachable_inventory(tmp_path):
    """One host on a loopback port nothing listens on: connecting fails at once, for real."""
    path = tmp_path / "inv.yaml"
    path.write_text("cluster:\n  name: c\n  ssh: {port: 1, connect_timeout: 5}\nhosts:\n  a: {address: 127.0.0.1}\n")
    return load_inventory(path)


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
