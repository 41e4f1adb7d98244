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
# DCQCN's own counters (mlx5 hw_counters, kernel commit e1f24a79f424 "IB/mlx5: Support congestion
# related counters"): CE-marked RoCE packets received, CNPs sent by the notification point, CNPs
# the reaction point acted on, and CNPs it ignored (its priority not enabled for DCQCN).
CONGESTION_COUNTERS = ("np_ecn_marked_roce_packets", "np_cnp_sent", "rp_cnp_handled", "rp_cnp_ignored")
COUNTER_FILES = " ".join(
    f"/sys/class/infiniband/*/ports/*/{d}/{n}"
    for d in ("counters", "hw_counters")
    for n in ERROR_COUNTERS + (CONGESTION_COUNTERS if d == "hw_counters" else ())
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


# Every counter of every port, for a before-and-after read around one test (diagnose).
ALL_COUNTER_FILES = "/sys/class/infiniband/*/ports/*/counters/* /sys/class/infiniband/*/ports/*/hw_counters/*"
# The counters that grow only when something went wrong on the wire or in the transport: the
# error counters above and, by their names across drivers, retries, NAKs, duplicates, sequence
# errors, drops and waits (mlx5 `port_xmit_wait`, rxe `completer_retry_err`, `rcvd_seq_err`…).
_TROUBLE = re.compile(r"err|discard|retr|dup|seq|nak|rnr|downed|symbol|integrity|overrun|timeout|drop|wait")


# The counters a packet lost on the wire moves, among those: the responder's sequence gap (mlx5
# `out_of_sequence`, rxe `rcvd_seq_err`), the requester's NAK or timeout and its retransmission
# (`packet_seq_err`, `implied_nak_seq_err`, `local_ack_timeout_err`, rxe `completer_retry_err`),
# duplicates and discards. Not waits (a port waits whenever flow control holds it, a lossless
# fabric doing its work), nor receiver-not-ready retries (`rnr_nak_retry_err`: the peer had no
# receive posted, nothing was lost).
_LOSS = re.compile(r"^(?!.*rnr).*(seq|retr|timeout|dup|discard)")


def _grown(before: dict[str, dict[str, int]], after: dict[str, dict[str, int]], names: re.Pattern[str]) -> list[str]:
    """The counters named so that grew between two reads of one node, as `rxe0/1 name +N`, in
    port and name order; a counter missing from either read, or lower (reset), is left out."""
    grown = []
    for port in sorted(after):
        for name in sorted(after[port]):
            old = before.get(port, {}).get(name)
            if old is not None and names.search(name) and after[port][name] > old:
                grown.append(f"{port} {name} +{after[port][name] - old}")
    return grown


def trouble_growth(before: dict[str, dict[str, int]], after: dict[str, dict[str, int]]) -> list[str]:
    """The trouble counters that grew between two reads (diagnose: which end of a pair erred)."""
    return _grown(before, after, _TROUBLE)


def loss_growth(before: dict[str, dict[str, int]], after: dict[str, dict[str, int]]) -> list[str]:
    """The counters of packets lost on the wire that grew between two reads (the incast gate: a
    lossless fabric under congestion drops nothing)."""
    return _grown(before, after, _LOSS)
