"""nccl-tests text output (`all_reduce_perf` and friends): result rows and the summary lines.

Works on the table whether or not its line breaks survived (the eRDMA field sweep was flattened
into one line) and on every column layout: the header says whether there are `redop` and `root`
columns (older nccl-tests have neither, or only one, and print `error` instead of `#wrong`);
with no header, both are told by their values.

A run is complete only when nccl-tests printed its summary (`# Out of bounds values`): a process
that dies mid-sweep leaves rows that look fine, followed by `Test NCCL failure …` or mpirun's
abort report, which are collected as `failures`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_TYPES = "int8|uint8|int32|uint32|int64|uint64|half|float|double|bfloat16|f8e4m3|f8e5m2|fp8_e4m3|fp8_e5m2|int|char"
_OPS = "sum|prod|max|min|avg|all|none|mulsum"
_NUM = r"[\d.]+(?:e[+-]?\d+)?"
_WRONG = r"\d+|N/A|[\d.]+e[+-]?\d+"


@dataclass(frozen=True)
class CollectiveRow:
    """One message size: out-of-place (and in-place where printed) time in µs, bandwidths in GB/s."""

    size: int
    count: int
    dtype: str
    redop: str
    time_us: float
    algbw: float
    busbw: float
    wrong: int | None  # None where the output says N/A (validation off)
    in_place_busbw: float | None = None
    in_place_wrong: int | None = None


@dataclass(frozen=True)
class CollectiveRun:
    rows: list[CollectiveRow]
    out_of_bounds: int | None
    avg_busbw: float | None
    complete: bool = False  # the whole sweep ran: nccl-tests' summary (the probe: its last size)
    failures: tuple[str, ...] = ()  # what the tests or mpirun printed about a failure


# How a failed run shows itself: nccl-tests' own checks (common.h) and mpirun's abort report.
_FAILURE = re.compile(
    r"Test (?:NCCL |CUDA )?failure|Primary job\s+terminated|mpirun detected that one or more|"
    r"mpirun noticed that process|MPI_ABORT was invoked"
)


def _wrong(value: str | None) -> int | None:
    if value is None or value == "N/A":
        return None
    return int(float(value))


def _columns(flat: str) -> tuple[str, str]:
    """Patterns for the redop (a group) and root columns: as the header says, or, with no
    header, optional (old tables print large times as integers, so values alone can mislead)."""
    header = re.search(r"\bsize\s+count\s+type\s+((?:(?:redop|root)\s+)*)time\b", flat)
    if header is None:
        return rf"(?:({_OPS})\s+)?", r"(?:-?\d+\s+)?"
    named = header.group(1).split()
    return (rf"({_OPS})\s+" if "redop" in named else "()"), (r"-?\d+\s+" if "root" in named else "")


def parse_nccl_tests(text: str) -> CollectiveRun:
    flat = " ".join(text.split())
    redop, root = _columns(flat)
    row = re.compile(
        rf"(?<![\w.:\[/-])(\d+)\s+(\d+)\s+({_TYPES})\s+{redop}{root}({_NUM})\s+({_NUM})\s+({_NUM})\s+({_WRONG})"
        rf"(?:\s+({_NUM})\s+({_NUM})\s+({_NUM})\s+({_WRONG}))?(?=\s|$)"
    )
    rows = []
    for m in row.finditer(flat):
        rows.append(
            CollectiveRow(
                size=int(m.group(1)),
                count=int(m.group(2)),
                dtype=m.group(3),
                redop=m.group(4) or "",
                time_us=float(m.group(5)),
                algbw=float(m.group(6)),
                busbw=float(m.group(7)),
                wrong=_wrong(m.group(8)),
                in_place_busbw=float(m.group(11)) if m.group(11) else None,
                in_place_wrong=_wrong(m.group(12)),
            )
        )
    oob = re.search(r"Out of bounds values\s*:\s*(\d+)", flat)
    avg = re.search(r"Avg bus bandwidth\s*:\s*(" + _NUM + ")", flat)
    failures = tuple(line.strip() for line in text.splitlines() if _FAILURE.search(line))
    return CollectiveRun(
        rows,
        int(oob.group(1)) if oob else None,
        float(avg.group(1)) if avg else None,
        complete=oob is not None,
        failures=failures,
    )
