"""perftest (`ib_write_bw` and friends) result tables."""

from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class BandwidthResult:
    bytes: int
    iterations: int
    peak_gbps: float
    average_gbps: float
    msg_rate_mpps: float
    device: str = ""
    gid_index: int | None = None


_ROW = re.compile(r"^\s*(\d+)\s+(\d+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s*$")


def parse_bw_output(text: str) -> BandwidthResult | None:
    """The result row of a perftest BW run in Gb/s (`--report_gbits`); None when there is none.

    Refuses MB/s tables: a verdict on a figure in the wrong unit would be off by a factor of 8.
    """
    if "BW average[" in text and "[Gb/sec]" not in text:
        raise ValueError("perftest reported MB/sec; run it with --report_gbits")
    device = re.search(r"Device\s*:\s*(\S+)", text)
    gid = re.search(r"GID index\s*:\s*(\d+)", text)
    for line in text.splitlines():
        row = _ROW.match(line)
        if row:
            return BandwidthResult(
                int(row.group(1)), int(row.group(2)), float(row.group(3)), float(row.group(4)), float(row.group(5)),
                device.group(1) if device else "", int(gid.group(1)) if gid else None,
            )
    return None
