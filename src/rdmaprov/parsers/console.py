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
# The first line of a crash report, which a panic ("Fatal exception") only ends.
_CRASH = re.compile(r"^(Oops|BUG:|general protection fault)")
# A call trace's frame in a module, `rxe_init_packet+0xa0/0x150 [rdma_rxe]` (not a `? ` guess).
_FRAME = re.compile(r"^(\w+)\+0x[0-9a-f]+/0x[0-9a-f]+ \[(\w+)\]$")
_STAMP = re.compile(r"^\[\s*\d+\.\d+\]\s*")


def kernel_trouble(text: str) -> str | None:
    """The last line of the console that reports a kernel crash, lockup or stalled NIC queue,
    without its timestamp; None when the kernel printed none. A panic that ended a crash report
    is told with the report's first line and the first module function in its call trace, since
    "Fatal exception in interrupt" alone does not say what crashed."""
    lines = [_STAMP.sub("", line.strip()) for line in text.splitlines()]
    found = [i for i, line in enumerate(lines) if _TROUBLE.search(line)]
    if not found:
        return None
    last = lines[found[-1]]
    if "Kernel panic" not in last:
        return last
    starts = [i for i in found if _CRASH.match(lines[i])]
    if not starts:
        return last
    frames = (_FRAME.match(line) for line in lines[starts[-1] : found[-1]])
    where = next((f" in {m[1]} [{m[2]}]" for m in frames if m), "")
    return f"{lines[starts[-1]]}{where}, then {last.strip('-[] ').removeprefix('end ')}"
