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
# What perftest prints when the run broke: a row printed before it is no result.
_FAILED = re.compile(r"Completion with error|Failed to complete run_iter|Couldn't|Unable to")


def parse_bw_output(text: str) -> BandwidthResult | None:
    """The result of a perftest BW run in Gb/s (`--report_gbits`): the largest message size's row
    (an `-a` sweep prints one per size); None when there is no row.

    Refuses MB/s tables (a verdict on a figure in the wrong unit would be off by a factor of 8)
    and runs that report an error.
    """
    if "BW average[" in text and "[Gb/sec]" not in text:
        raise ValueError("perftest reported MB/sec; run it with --report_gbits")
    failed = next((line.strip() for line in text.splitlines() if _FAILED.search(line)), None)
    if failed:
        raise ValueError(f"perftest reported an error: {failed}")
    device = re.search(r"Device\s*:\s*(\S+)", text)
    gid = re.search(r"GID index\s*:\s*(\d+)", text)
    rows = [row for row in map(_ROW.match, text.splitlines()) if row]
    if not rows:
        return None
    row = max(rows, key=lambda r: int(r.group(1)))
    return BandwidthResult(
        int(row.group(1)),
        int(row.group(2)),
        float(row.group(3)),
        float(row.group(4)),
        float(row.group(5)),
        device.group(1) if device else "",
        int(gid.group(1)) if gid else None,
    )
