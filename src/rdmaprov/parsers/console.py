"""A lab VM's serial console: the kernel's last word on why the VM stopped answering.

A VM whose network hung cannot be asked over SSH; its console (a file on the host) still holds
what its kernel printed: a transmit queue the NIC never completed, an oops, a lockup."""

from __future__ import annotations

import re

# The kernel's own words for a crash, a lockup, or a NIC queue that never completed.
_TROUBLE = re.compile(
    r"Kernel panic|Oops|BUG:|general protection fault|soft lockup|hard LOCKUP|"
    r"rcu_\w+ detected stalls|TX timeout on queue|transmit queue \d+ timed out"
)
_STAMP = re.compile(r"^\[\s*\d+\.\d+\]\s*")


def kernel_trouble(text: str) -> str | None:
    """The last line of the console that reports a kernel crash, lockup or stalled NIC queue,
    without its timestamp; None when the kernel printed none."""
    found = [line for line in text.splitlines() if _TROUBLE.search(line)]
    return _STAMP.sub("", found[-1].strip()) if found else None
