"""A lab VM's console read for why it stopped answering (parsers/console.py), on real consoles."""

from __future__ import annotations

from rdmaprov.parsers.console import kernel_trouble
from tests.conftest import FIXTURES

LAB = FIXTURES / "lab"


def test_a_healthy_boot_reports_nothing():
    """Firmware warnings and host-key lines are not trouble."""
    assert kernel_trouble((LAB / "console_boot_debian12.txt").read_text()) is None
    assert kernel_trouble("") is None


def test_a_hung_virtio_nic_is_named_by_its_latest_line():
    text = (LAB / "console_boot_debian12.txt").read_text() + (
        LAB / "console_virtio_tx_timeout_debian12.txt"
    ).read_text()
    assert kernel_trouble(text) == (
        "virtio_net virtio0 eth0: TX timeout on queue: 0, sq: output.0, vq: 0x1, name: output.0, 25632000 usecs ago"
    )
