"""RDMA port counters as sysfs shows them (`grep -H .` over each port's counters/ and
hw_counters/): the running totals that error checks compare between two reads."""

from __future__ import annotations

import re

# The error counters health/counters.py judges, and where sysfs keeps them: counters/ on IB and
# RoCE HCAs; SoftRoCE and some drivers keep link_downed in hw_counters/.
ERROR_COUNTERS = (
    "link_downed",
    "link_error_recovery",
    "excessive_buffer_overrun_errors",
    "local_link_integrity_errors",
    "symbol_error",
    "port_rcv_errors",
    "port_xmit_discards",
)
COUNTER_FILES = " ".join(
    f"/sys/class/infiniband/*/ports/*/{d}/{n}" for d in ("counters", "hw_counters") for n in ERROR_COUNTERS
)

_LINE = re.compile(r"^/sys/class/infiniband/([^/]+)/ports/(\d+)/(?:hw_)?counters/([^:/]+):(\d+)\s*$")


def parse_port_counters(lines: list[str]) -> dict[str, dict[str, int]]:
    """{"rxe0/1": {"link_downed": 0, …}}; lines that are not a counter's value are skipped."""
    ports: dict[str, dict[str, int]] = {}
    for line in lines:
        match = _LINE.match(line)
        if match:
            device, port, name, value = match.groups()
            ports.setdefault(f"{device}/{port}", {})[name] = int(value)
    return ports
