"""Keeping a VM lab's NICs transmitting: `lab up` starts this watcher beside the VMs.

QEMU 7.2 under TCG now and then stops taking a VM's transmits (lab/qmp.py says how it was
caught), about once in four rail tests of the test lab. Left alone, the VM answers nothing
until it is booted again; paused and resumed, it sends what it queued and goes on. The
watcher asks each VM's QEMU for its transmit ring every few seconds and resumes a VM whose
QEMU took nothing for a while with transmits waiting, so that neither a user's run nor a test
meets the fault. Each time it acts it says so in the lab's nic-watch.log."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from rdmaprov.lab.lab import Lab
from rdmaprov.lab.qmp import QmpError, TxRing, nic_tx_ring, pause_and_resume


@dataclass
class StallTracker:
    """Which rings have had transmits waiting, with QEMU taking none, for `patience` seconds.
    A busy healthy ring has transmits waiting too, but QEMU keeps taking them."""

    patience: float
    _since: dict[str, tuple[int, float]] = field(default_factory=dict)  # name: (taken, first seen)

    def stalled(self, name: str, ring: TxRing, now: float) -> bool:
        if not ring.waiting:
            self._since.pop(name, None)
            return False
        taken, since = self._since.get(name, (ring.taken, now))
        if taken != ring.taken:
            taken, since = ring.taken, now
        self._since[name] = (taken, since)
        return now - since >= self.patience

    def forget(self, name: str) -> None:
        self._since.pop(name, None)


def watch(lab: Lab, log: Callable[[str], None], interval: float = 2, patience: float = 4) -> None:
    """Until the lab is down: resume every VM whose QEMU stopped taking its transmits."""
    tracker = StallTracker(patience)
    while lab.state_file.exists() and lab.load().state.get("nodes"):
        for node in lab.nodes():
            if node.kind != "vm":
                continue
            try:
                ring = nic_tx_ring(node.qmp)
                if tracker.stalled(node.name, ring, time.monotonic()):
                    pause_and_resume(node.qmp)
                    tracker.forget(node.name)
                    log(f"{time.strftime('%Y-%m-%dT%H:%M:%S')} {node.name}: paused and resumed ({ring})")
            except QmpError:
                tracker.forget(node.name)  # booting, being restarted, or stopped on purpose
        time.sleep(interval)
