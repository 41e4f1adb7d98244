"""Why a lab VM stopped answering, on real outputs: its console (parsers/console.py) and its
QEMU's view of the NIC's transmit ring (lab/qmp.py)."""

from __future__ import annotations

import json

from rdmaprov.lab.nicwatch import Silence
from rdmaprov.lab.qmp import TxRing, tx_ring
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


def test_a_panic_is_told_by_the_crash_it_ended_and_where_it_happened():
    """node3 (Debian 13, kernel 6.12) under an incast on the lab: a double fault in rdma_rxe's
    receive worker, then the panic; the panic's own line says neither."""
    text = (LAB / "console_rxe_double_fault_debian13.txt").read_text()
    assert kernel_trouble(text) == (
        "Oops: double fault: 0000 [#1] PREEMPT SMP NOPTI in rxe_init_packet [rdma_rxe], "
        "then Kernel panic - not syncing: Fatal exception in interrupt"
    )
    # a panic no crash report led to (sysrq's, a watchdog's) is said as the kernel said it
    assert kernel_trouble("[ 61.2] Kernel panic - not syncing: sysrq triggered crash\n") == (
        "Kernel panic - not syncing: sysrq triggered crash"
    )


def _ring(state: str) -> TxRing:
    def reply(name: str) -> dict:
        return json.loads((LAB / "qmp" / f"tx_queue_{name}_{state}.json").read_text())["return"]

    return tx_ring(reply("status"), reply("element"))


def test_a_stalled_tx_ring_is_told_from_a_healthy_one():
    """QEMU 7.2's replies for node2 while it answered nothing (the guest queued 221 transmits past
    the last QEMU took) and for node1 at rest (every index equal)."""
    stalled, healthy = _ring("stalled"), _ring("healthy")
    assert stalled == TxRing(queued=57798, taken=57577, completed=57577, signalled=57577)
    assert stalled.waiting == 221 and str(stalled) == (
        "tx ring: guest queued 57798, QEMU took 57577, completed 57577, signalled 57577: "
        "QEMU stopped taking the guest's transmits (221 waiting)"
    )
    assert healthy.waiting == 0 and str(healthy).endswith("signalled 7116: nothing pending in QEMU")


def test_ring_indices_wrap_at_65536():
    """virtio's indices are 16-bit: a guest just past the wrap is ahead, not 65,000 behind."""
    assert TxRing(queued=5, taken=65530, completed=65530, signalled=65530).waiting == 11


def test_the_nic_watch_acts_once_on_a_vm_that_sent_nothing_and_answers_nothing():
    """Silent twice in a row (no packet on its tap, no answer from its kernel) is acted on, once; a VM
    that keeps sending, or answers when asked, is not; sending again starts the count over."""
    silence = Silence(patience=2)
    deaf = lambda: False  # noqa: E731
    assert not silence.silent("node2", 500, deaf)  # first look: nothing to compare with
    assert not silence.silent("node2", 500, deaf)  # silent once
    assert silence.silent("node2", 500, deaf)  # silent twice: act
    assert not silence.silent("node2", 500, deaf)  # acted on: left alone while it stays silent
    assert not silence.silent("node2", 501, deaf)  # it sent: counted from here again
    assert not silence.silent("node2", 501, deaf)
    assert silence.silent("node2", 501, deaf)
    busy, idle = Silence(patience=2), Silence(patience=2)
    for look in range(6):
        assert not busy.silent("node1", 1000 + look, deaf)  # sending: never asked
        assert not idle.silent("node3", 7, lambda: True)  # idle but answering


def test_the_watcher_asks_the_vms_kernel_not_its_sshd(monkeypatch):
    """A refused connection is the kernel answering (nothing listens on the probe port), and so is
    an accepted one; neither needs sshd to start a process, which cost idle VMs CPU every 2 s."""
    import socket

    from rdmaprov.lab import nicwatch

    assert nicwatch.PROBE_PORT != 22
    with socket.socket() as closed:  # a port bound and closed again: nothing listens there
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    monkeypatch.setattr(nicwatch, "PROBE_PORT", port)
    assert nicwatch.kernel_answers("127.0.0.1")
    with socket.create_server(("127.0.0.1", 0)) as listening:
        monkeypatch.setattr(nicwatch, "PROBE_PORT", listening.getsockname()[1])
        assert nicwatch.kernel_answers("127.0.0.1")
    # a VM whose NIC stalled sends nothing back: the connection times out, or the host finds no
    # route to it (its neighbour entry failed); no traffic leaves this machine to learn that
    for silence in (TimeoutError(), OSError(113, "No route to host")):

        def unanswered(*args, error=silence, **kwargs):
            raise error

        monkeypatch.setattr(nicwatch.socket, "create_connection", unanswered)
        assert not nicwatch.kernel_answers("10.78.0.12")
