"""perftest (`ib_write_bw`, `ib_write_lat` and friends) result tables.

Both kinds print a header block (device, GID index…), a column header line and one row per
message size. What can go wrong is the same for both: a run that broke prints its error lines
(`Completion with error`, `Couldn't connect`) and maybe rows from before it broke, and those rows
are no result.
"""

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
_DEVICE = re.compile(r"Device\s*:\s*(\S+)")
_GID = re.compile(r"GID index\s*:\s*(\d+)")


def _refuse_failed_run(text: str) -> None:
    failed = next((line.strip() for line in text.splitlines() if _FAILED.search(line)), None)
    if failed:
        raise ValueError(f"perftest reported an error: {failed}")


def _device_and_gid(text: str) -> tuple[str, int | None]:
    device, gid = _DEVICE.search(text), _GID.search(text)
    return (device.group(1) if device else ""), (int(gid.group(1)) if gid else None)


def parse_bw_output(text: str) -> BandwidthResult | None:
    """The result of a perftest BW run in Gb/s (`--report_gbits`): the largest message size's row
    (an `-a` sweep prints one per size); None when there is no row.

    Refuses MB/s tables (a verdict on a figure in the wrong unit would be off by a factor of 8)
    and runs that report an error.
    """
    if "BW average[" in text and "[Gb/sec]" not in text:
        raise ValueError("perftest reported MB/sec; run it with --report_gbits")
    _refuse_failed_run(text)
    device, gid = _device_and_gid(text)
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
        device,
        gid,
    )


@dataclass(frozen=True)
class LatencyRow:
    """One message size of a latency test, in microseconds. The average, the deviation and the
    percentiles are None where this perftest does not print them."""

    bytes: int
    iterations: int
    t_min_us: float | None
    t_max_us: float | None
    t_typical_us: float | None
    t_avg_us: float | None = None
    t_stdev_us: float | None = None
    p99_us: float | None = None
    p999_us: float | None = None


@dataclass(frozen=True)
class LatencyResult:
    """`layout` says what this perftest printed: "percentiles" (every perftest since July 2016,
    commit 1ccb3fd "Extra measurements in latency tests"), "typical" (older: min, max and
    typical only) or "duration" (a `-D` run: the average alone, perftest keeps no samples)."""

    rows: tuple[LatencyRow, ...]
    layout: str
    device: str = ""
    gid_index: int | None = None
    warnings: tuple[str, ...] = ()  # perftest's own: the CPU clock was not at its maximum

    def row(self, size: int) -> LatencyRow | None:
        return next((r for r in self.rows if r.bytes == size), None)


# Column headers of the three layouts, and how many numbers each row holds.
_LAT_LAYOUTS = (("99% percentile", "percentiles", 9), ("tps average", "duration", 4), ("t_typical", "typical", 5))
_NUMBER = re.compile(r"^\d+(\.\d+)?$")
# perftest measures in CPU cycles and converts with the CPU's clock; when the clock is not at its
# maximum it says so, and the figures may be off by the ratio of the two frequencies.
_CPU_FREQ = re.compile(r"Conflicting CPU frequency values detected.*")


def parse_lat_output(text: str) -> LatencyResult | None:
    """The rows of a perftest latency test (`ib_write_lat`, `ib_send_lat`, `ib_read_lat`); None
    when there is no column header, or no row under it. Rows may be interleaved with perftest's
    warnings and padded with tabs; a run that reports an error is refused."""
    _refuse_failed_run(text)
    lines = text.splitlines()
    start = next((i for i, line in enumerate(lines) if line.lstrip().startswith("#bytes")), None)
    if start is None:
        return None
    header = lines[start]
    layout, width = next(((name, n) for key, name, n in _LAT_LAYOUTS if key in header), ("", 0))
    if not layout:
        return None
    rows = []
    for line in lines[start + 1 :]:
        words = line.split()
        if len(words) != width or not all(_NUMBER.match(w) for w in words):
            continue
        size, iterations, numbers = int(words[0]), int(words[1]), [float(w) for w in words[2:]]
        if layout == "duration":  # bytes, iterations, t_avg, transactions per second
            rows.append(LatencyRow(size, iterations, None, None, None, t_avg_us=numbers[0]))
        else:
            rows.append(LatencyRow(size, iterations, *numbers))
    if not rows:
        return None
    device, gid = _device_and_gid(text)
    warnings = tuple(sorted({m.group(0).strip() for m in map(_CPU_FREQ.search, lines) if m}))
    return LatencyResult(tuple(rows), layout, device, gid, warnings)
