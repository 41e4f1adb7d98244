"""Keeping a VM lab's NICs transmitting: `lab up` starts this watcher beside the VMs.

QEMU 7.2 under TCG now and then stops taking a VM's transmits (lab/qmp.py says how it was
caught): left alone, the VM answers nothing until it is booted again; paused and resumed, it
sends what it queued and goes on. The watcher looks at each VM from the host side only: the
packets its tap received from it, and, when those stopped, whether its kernel still answers.
Only a VM silent twice in a row is asked about over QMP (reading its ring from guest memory
is not free of side effects: polled many times a second, it stalled a VM within a minute) and
paused and resumed once. Each time it acts it says so in the lab's nic-watch.log."""

from __future__ import annotations

import socket
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

from rdmaprov.lab.lab import Lab
from rdmaprov.lab.nodes import Node
from rdmaprov.lab.qmp import QmpError, nic_tx_ring, pause_and_resume


@dataclass
class Silence:
    """Which VMs have gone silent: no packet from them on their tap since the last look and no
    answer from their kernel (kernel_answers), `patience` looks in a row. A VM acted on is left
    alone until it sends."""

    patience: int = 2
    _seen: dict[str, int] = field(default_factory=dict)  # name: its tap's rx_packets at the last look
    _silent: dict[str, int] = field(default_factory=dict)  # name: looks in a row without an answer
    _acted: set[str] = field(default_factory=set)

    def silent(self, name: str, sent: int, answers: Callable[[], bool]) -> bool:
        """True once, when `name` has been silent `patience` looks in a row."""
        quiet = self._seen.get(name) == sent
        self._seen[name] = sent
        if not quiet or answers():
            self._silent.pop(name, None)
            self._acted.discard(name)
            return False
        self._silent[name] = self._silent.get(name, 0) + 1
        if self._silent[name] < self.patience or name in self._acted:
            return False
        self._acted.add(name)
        return True


# A port nothing listens on in a lab VM: its kernel answers a connection there with a reset, and
# no process wakes. Asking sshd instead (a connection accepted, a process started for it) every 2 s
# cost each idle VM a tenth of a host core under TCG: 12 % against 1.2 % with the watcher stopped.
PROBE_PORT = 9


def kernel_answers(address: str, timeout: float = 2) -> bool:
    """Whether the VM at `address` answers at all: a reset from its kernel, or a connection; a VM
    whose NIC stalled sends neither."""
    try:
        with socket.create_connection((address, PROBE_PORT), timeout=timeout):
            return True
    except ConnectionRefusedError:
        return True
    except OSError:
        return False


def _tap_rx_packets(node: Node) -> int:
    """Packets the VM sent: what its tap on the host received."""
    try:
        return int(Path(f"/sys/class/net/{node.link}/statistics/rx_packets").read_text())
    except (OSError, ValueError):
        return -1


def watch(lab: Lab, log: Callable[[str], None], interval: float = 2) -> None:
    """Until the lab is down: pause and resume each VM that went silent, once per silence."""
    silence = Silence()
    while lab.state_file.exists() and lab.load().state.get("nodes"):
        for node in lab.nodes():
            answers = partial(kernel_answers, node.address)
            if node.kind != "vm" or not silence.silent(node.name, _tap_rx_packets(node), answers):
                continue
            stamp = time.strftime("%Y-%m-%dT%H:%M:%S")
            try:
                ring = nic_tx_ring(node.qmp)
                pause_and_resume(node.qmp)
                log(f"{stamp} {node.name}: silent; paused and resumed ({ring})")
            except QmpError as exc:
                # QEMU stopped on purpose (no answer), or the guest booting again (QEMU answers
                # that its NIC's queues are not set up yet: "Region caches not initialized")
                log(f"{stamp} {node.name}: silent; its NIC not read over QMP, left alone ({exc})")
        time.sleep(interval)
