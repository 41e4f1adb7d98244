"""A lab VM's QEMU, asked over its QMP socket: what a guest that stopped answering cannot say
for itself (how far its NIC's transmit ring got), and what gets that ring going again.

Under QEMU 7.2 TCG a VM's virtio NIC now and then stops taking transmits during heavy rxe
traffic: the guest keeps queueing, QEMU takes none (its transmit bottom half is never run
again), and the VM answers nothing. Pausing and resuming the VM makes QEMU schedule that
bottom half anew: everything queued goes out within a second, and nothing in the guest is lost
(seen on the test lab, 2026-11-27: 224 transmits waiting, all taken after stop and cont).

Asking for the ring is not free: x-query-virtio-queue-element reads the guest's ring index into
QEMU's own copy, and polled twenty times a second while a VM sent, it stalled that VM within a
minute, with a few transmits waiting that pausing did not free. So only a VM already silent is
asked (lab/nicwatch.py, `lab status`, `lab restart`)."""

from __future__ import annotations

import json
import socket
from dataclasses import dataclass
from pathlib import Path
from typing import Any


class QmpError(Exception):
    """QEMU refused a command or its socket is gone (the VM is not running)."""


def execute(path: Path, command: str, arguments: dict[str, object] | None = None, timeout: float = 5) -> Any:
    """Run one QMP command and return its "return" value (events QEMU sends meanwhile are skipped)."""
    try:
        with socket.socket(socket.AF_UNIX) as sock:
            sock.settimeout(timeout)
            sock.connect(str(path))
            stream = sock.makefile("rw")
            _reply(stream)  # the greeting
            for request in ({"execute": "qmp_capabilities"}, {"execute": command, "arguments": arguments or {}}):
                stream.write(json.dumps(request) + "\n")
                stream.flush()
                answer = _reply(stream)
            return answer
    except (OSError, ValueError) as exc:
        raise QmpError(f"{path}: {exc}") from exc


def _reply(stream: Any) -> Any:
    while True:
        line = stream.readline()
        if not line:
            raise QmpError("QEMU closed its QMP socket")
        message = json.loads(line)
        if "error" in message:
            raise QmpError(message["error"].get("desc", str(message["error"])))
        if "event" not in message:
            return message.get("return", message.get("QMP"))


def _behind(ahead: int, behind: int) -> int:
    """How far one 16-bit ring index is past another (virtio's indices wrap at 65536)."""
    return (ahead - behind) % 65536


@dataclass(frozen=True)
class TxRing:
    """A virtio NIC's transmit ring seen from both sides: what the guest queued (read from guest
    memory) against what QEMU took, completed and told the guest of."""

    queued: int
    taken: int
    completed: int
    signalled: int

    @property
    def waiting(self) -> int:
        """Transmits the guest queued that QEMU has not taken."""
        return _behind(self.queued, self.taken)

    def __str__(self) -> str:
        figures = (
            f"tx ring: guest queued {self.queued}, QEMU took {self.taken}, "
            f"completed {self.completed}, signalled {self.signalled}"
        )
        if self.waiting:
            return f"{figures}: QEMU stopped taking the guest's transmits ({self.waiting} waiting)"
        if _behind(self.completed, self.signalled):
            return f"{figures}: {_behind(self.completed, self.signalled)} completed, the guest not yet told"
        return f"{figures}: nothing pending in QEMU"


def tx_ring(queue: dict[str, Any], element: dict[str, Any]) -> TxRing:
    """TxRing from x-query-virtio-queue-status (QEMU's side) and x-query-virtio-queue-element
    (the ring's indices as they are in guest memory)."""
    return TxRing(element["avail"]["idx"], queue["last-avail-idx"], queue["used-idx"], queue["signalled-used"])


def nic_tx_ring(socket_path: Path) -> TxRing:
    """The VM's virtio NIC's first transmit ring (queue 1: queue 0 receives), asked of its QEMU."""
    try:
        devices = execute(socket_path, "x-query-virtio")
        [path] = [device["path"] for device in devices if device["name"] == "virtio-net"]
        where = {"path": path, "queue": 1}
        return tx_ring(
            execute(socket_path, "x-query-virtio-queue-status", where),
            execute(socket_path, "x-query-virtio-queue-element", where),
        )
    except (KeyError, TypeError, ValueError) as exc:  # not the one virtio NIC a lab VM has
        raise QmpError(f"{socket_path}: unexpected answer about the VM's NIC ({exc!r})") from exc


def pause_and_resume(socket_path: Path) -> None:
    """Stop and continue the VM: QEMU reschedules each virtio queue's work on the way back."""
    execute(socket_path, "stop")
    execute(socket_path, "cont")
