"""paramiko's per-packet MAC check, moved to C: the same answers as paramiko's own loop."""

import hmac

import paramiko.util

from rdmaprov.engine.connection import compare_macs_in_c


def test_packets_macs_are_compared_in_c_with_paramikos_answers(monkeypatch):
    own = paramiko.util.constant_time_bytes_eq
    monkeypatch.setattr(paramiko.util, "constant_time_bytes_eq", own)
    compare_macs_in_c()
    assert paramiko.util.constant_time_bytes_eq is hmac.compare_digest
    mac = bytes(range(32))
    for other in (mac, mac[:-1] + b"\x00", mac[:20], b"", bytes(32)):
        assert paramiko.util.constant_time_bytes_eq(mac, other) == own(mac, other), other
