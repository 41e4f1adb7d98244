"""The test networks of two pytest processes run at once never overlap (tools/test.sh)."""

from __future__ import annotations

from tests.support.netbands import octets


def test_each_process_of_a_split_run_takes_its_own_band(monkeypatch):
    whole = octets(100, 250)
    assert sorted(whole) == list(range(100, 250))
    monkeypatch.setenv("RDMAPROV_TEST_NET_SHARE", "0/2")
    lab = octets(100, 250)
    monkeypatch.setenv("RDMAPROV_TEST_NET_SHARE", "1/2")
    others = octets(100, 250)
    assert sorted(lab) == list(range(100, 175)) and sorted(others) == list(range(175, 250))
    assert sorted(octets(0, 256)) == list(range(128, 256))  # the sshd farms' 10.231.x
