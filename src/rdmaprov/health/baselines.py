"""Each part against its own past: a rail that used to carry 392 Gb/s and now carries 375 still
clears a 95 % threshold, but it is the slow drift (a dirty connector, a cable bent too far, a
port retraining) that absolute thresholds miss until the day it fails.

Every gate result is a part: a node (node gate), a pair (ib_write_bw, and container: the same pair
in the site's image, a part of its own for each image, by its name and tag), one rail of a pair
(rail, latency, container_latency in an image), a set of nodes (all_reduce) or a receiver and
its sender count (incast), named by its gate and subject. The median of a
part's first `runs` passing figures is its baseline, fixed from then on, so that a slow slide is measured
against where the part started, not against last week. A later figure more than `max_drop`
lower (bandwidth), or `max_latency_rise` higher (a p99 latency, which jitters more), is flagged: a
warning, or a failure with `action: fail`.
Failed runs are never recorded. `rdmaprov baseline --reset` drops a node's parts (after a NIC or
cable is replaced) and the next runs record new ones.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import TypedDict, TypeGuard

from rdmaprov.health.gates.result import GateResult
from rdmaprov.health.state import load_section, updating
from rdmaprov.inventory.gates import BaselineConfig
from rdmaprov.paths import cluster_file

FILE = "baselines.json"
# Gates whose figure is better when lower (a workload's figure says its own way in its details).
LOWER_IS_BETTER = frozenset({"latency", "container_latency"})
# Gates whose figure is made in the site's image as much as by the fabric.
IN_AN_IMAGE = frozenset({"container", "container_latency"})


def baseline_file(cluster: str) -> Path:
    return cluster_file(cluster, FILE)


def part_key(result: GateResult) -> str:
    """The part a figure belongs to: the gate and its subject; for the container gates the image
    too, whose own libraries make the figure as much as the fabric does (a new image starts a
    baseline of its own instead of being held to the old image's). An incast's part is its
    receiver and how many sent into it: which nodes sent depends on the nodes selected (--limit,
    a node down), and on a fleet of like nodes the sum is the same whichever sent."""
    subject = result.subject
    if subject.kind == "incast":
        *senders, receiver = subject.hosts
        return f"{result.gate} into {receiver} from {len(senders)} senders"
    image = result.details.get("image") if result.gate in IN_AN_IMAGE else None
    return f"{result.gate} {subject}" + (f" in {image}" if image else "")


class PartRecord(TypedDict, total=False):
    """A part's record in baselines.json, as _judge and compare write it: what the part is, its
    samples while the baseline is being recorded, the baseline (and since when) once it is, and
    the last figure. A record still recording has no baseline or since yet."""

    gate: str
    subject: str
    hosts: list[str]
    unit: str
    samples: list[float]
    baseline: float | None  # None (or absent): still recording
    since: float
    last: float
    last_at: float


@dataclass(frozen=True)
class Comparison:
    """What a figure says against its part's past: "recording" (no baseline yet), "steady" or
    "drift", with the sentence the verdict gets."""

    kind: str
    note: str
    change: float | None = None  # the figure against its baseline, as a fraction (+0.02: 2 % higher)


def _when(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, timezone.utc).strftime("%Y-%m-%d")


def compare(
    measured: float, unit: str, record: PartRecord, settings: BaselineConfig, lower_is_better: bool, now: float
) -> tuple[Comparison, PartRecord]:
    """Judge `measured` against the part's `record` and return the record to keep: a sample more
    while the baseline is being recorded, the last figure once it exists."""
    record = {**record, "last": measured, "last_at": now}
    baseline = record.get("baseline")
    if baseline is None:
        samples = [*record.get("samples", []), measured]
        record["samples"] = samples
        if len(samples) < settings.runs:
            return Comparison("recording", f"baseline: {len(samples)} of {settings.runs} runs recorded"), record
        record["baseline"] = statistics.median(samples)
        record["since"] = now
        return Comparison("recording", f"baseline recorded: {record['baseline']:.4g} {unit}"), record
    change = (measured - baseline) / baseline
    worse = change if lower_is_better else -change
    runs = len(record.get("samples", []))
    of = f"its baseline {baseline:.4g} {unit} (median of {runs} runs since {_when(record.get('since', now))})"
    setting, tolerance = (
        ("max_latency_rise", settings.max_latency_rise) if lower_is_better else ("max_drop", settings.max_drop)
    )
    if worse > tolerance:
        direction = "above" if lower_is_better else "below"
        note = f"{worse:.1%} {direction} {of}, more than gates.baseline.{setting} {tolerance:.0%}"
        return Comparison("drift", note, change), record
    return Comparison("steady", f"{change:+.1%} against {of}", change), record


def _number(value: object, positive: bool = False) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and (value > 0 or not positive)


def _strings(value: object) -> bool:
    return isinstance(value, list) and all(isinstance(item, str) for item in value)


def sound(record: object) -> TypeGuard[PartRecord]:
    """A part's record as this module writes it (PartRecord): a hand-edited or damaged one (a
    baseline of 0 would divide by zero, a word where a figure belongs, a null this module never
    writes) is dropped and recorded again."""
    if not isinstance(record, dict):
        return False
    samples = record.get("samples", [])
    return (
        (record.get("baseline") is None or _number(record["baseline"], positive=True))
        and isinstance(samples, list)
        and all(_number(s) for s in samples)
        and all(k not in record or _number(record[k]) for k in ("since", "last", "last_at"))
        and all(isinstance(record.get(k, ""), str) for k in ("gate", "subject", "unit"))
        and _strings(record.get("hosts", []))
    )


def _load_parts(path: Path) -> dict[str, PartRecord]:
    return {key: record for key, record in load_section(path, "parts").items() if sound(record)}


def apply_baselines(results: list[GateResult], cluster: str, settings: BaselineConfig) -> None:
    """Judge every passing figure against its part's past (in place: a drift turns a pass into a
    warning, or a failure with action fail) and keep the figures on the control machine."""
    if not settings.enabled:
        return
    with updating(baseline_file(cluster), "parts") as kept:
        _judge(results, kept, settings)


def _judge(results: list[GateResult], kept: dict[str, object], settings: BaselineConfig) -> None:
    """apply_baselines' work on the kept parts, which it updates in place (sound records only)."""
    parts = {key: record for key, record in kept.items() if sound(record)}
    now = time.time()
    for result in results:
        if result.status not in ("pass", "warn") or result.measured is None:
            continue
        key = part_key(result)
        record: PartRecord = parts.get(key, {})
        if record.get("unit") not in (None, result.unit):
            record = {}  # the figure changed meaning (a gate's unit): start over
        record = {
            **record,
            "gate": result.gate,
            "subject": str(result.subject),
            "hosts": result.hosts,
            "unit": result.unit,
        }
        lower = result.gate in LOWER_IS_BETTER or result.details.get("better") == "lower"
        comparison, parts[key] = compare(result.measured, result.unit, record, settings, lower, now)
        result.baseline = {
            "value": parts[key].get("baseline"),
            "runs": len(parts[key].get("samples", [])),
            "since": _when(parts[key]["since"]) if "since" in parts[key] else None,
            "change": None if comparison.change is None else round(comparison.change, 4),
            "drift": comparison.kind == "drift",
        }
        result.reason += f"; {comparison.note}"
        if comparison.kind == "drift":
            result.status = "fail" if settings.action == "fail" else "warn"
            result.passed = result.status != "fail"
    kept.clear()
    kept.update(parts)


def load_parts(cluster: str) -> dict[str, PartRecord]:
    return _load_parts(baseline_file(cluster))


def reset_parts(cluster: str, hosts: list[str] | None) -> list[str]:
    """Drop the parts that involve any of `hosts` (every part with None); the keys dropped."""
    with updating(baseline_file(cluster), "parts") as parts:
        dropped = [k for k, p in parts.items() if sound(p) and (hosts is None or set(p.get("hosts", [])) & set(hosts))]
        for key in dropped:
            del parts[key]
    return dropped
