"""A figure out of a program's log, read the way the inventory says: a regular expression whose
group `value` (else its first group) is a number, every match in the log, and one of them taken.

A site's own benchmark prints its figure its own way: the eRDMA guide's `benchmark.py` ends with
`16 GPUs -- 2M/8G: p50: 0.098s 1306/s p75: …` (samples per second at each percentile), a
training script logs `Epoch: 200, Accuracy: 0.856`, rdmaprov's probe prints JSON lines. Every rank
of a job may print the line, and a script may print it once per epoch: which of the matches
stands for the run is the inventory's choice (`take`).
"""

from __future__ import annotations

import math
import re
import statistics
from collections.abc import Callable
from dataclasses import dataclass

# How the matches become one figure: the middle of them, the worst or best, or where the log began or ended.
TAKE: dict[str, Callable[[list[float]], float]] = {
    "median": statistics.median,
    "min": min,
    "max": max,
    "first": lambda values: values[0],
    "last": lambda values: values[-1],
}


def pattern_problem(pattern: str) -> str | None:
    """Why `pattern` cannot read a figure (it does not compile, or has no group), None when it can."""
    try:
        compiled = re.compile(pattern)
    except re.error as error:
        return f"not a regular expression: {error}"
    if not compiled.groups:
        return "it has no group: put the number in (?P<value>...) or in the first (...)"
    return None


@dataclass(frozen=True)
class Figures:
    """Every number the pattern caught, in the log's order, and what it caught that was none."""

    values: list[float]
    rejected: list[str]


def read_figures(text: str, pattern: str) -> Figures:
    """The numbers the pattern's group `value` (else its first group) caught; a match whose group
    is not a plain number ("0.098s", "N/A", "nan", "1,306": a thousands separator or a decimal
    comma, which cannot be told apart) is kept aside as rejected, never read as another number."""
    compiled = re.compile(pattern, re.MULTILINE)
    group: int | str = "value" if "value" in compiled.groupindex else 1
    found = Figures([], [])
    for match in compiled.finditer(text):
        caught = match.group(group)
        try:
            value = float(caught)
        except (TypeError, ValueError):  # the group matched nothing, or not a number
            found.rejected.append(str(caught))
            continue
        if math.isfinite(value):
            found.values.append(value)
        else:
            found.rejected.append(caught)
    return found
