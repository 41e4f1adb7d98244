"""A check's result as Prometheus text-format metrics, for node_exporter's textfile collector.

A cron job or systemd timer runs `rdmaprov check --textfile DIR/rdmaprov.prom`; node_exporter
serves the file, so drift raises an alert like any other metric. The file is written to a temp
name and renamed, so the collector never reads half of it.
"""

from __future__ import annotations

import os
import tempfile
import time
from collections import Counter
from pathlib import Path

from rdmaprov.engine.results import RunResult

OP_KINDS = ("corrective", "intentional", "new")
FACT_KINDS = (*OP_KINDS, "manual")  # a fact apply cannot restore (hardware, a file not rdmaprov's)


def _label(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def render_metrics(result: RunResult, now: float | None = None) -> str:
    """The metrics text for one check run."""
    cluster = _label(result.cluster)
    lines = [
        "# HELP rdmaprov_drift_operations Operations a check found would change, by kind of drift.",
        "# TYPE rdmaprov_drift_operations gauge",
    ]
    verified = {v.name: v for v in result.verify or []}
    for host in result.hosts:
        kinds = Counter(op.drift or "new" for op in host.ops if op.status == "would_change")
        for kind in OP_KINDS:
            lines.append(
                f'rdmaprov_drift_operations{{cluster="{cluster}",host="{_label(host.name)}",drift="{kind}"}} '
                f"{kinds[kind]}"
            )
    lines += [
        "# HELP rdmaprov_drift_facts Verify checks that no longer hold, by kind of drift.",
        "# TYPE rdmaprov_drift_facts gauge",
    ]
    for name, verification in verified.items():
        kinds = Counter(f.drift or "corrective" for f in verification.failures)
        for kind in FACT_KINDS:
            lines.append(
                f'rdmaprov_drift_facts{{cluster="{cluster}",host="{_label(name)}",drift="{kind}"}} {kinds[kind]}'
            )
    lines += [
        "# HELP rdmaprov_check_failures Findings of each verify check that failed on the host (0: it passed).",
        "# TYPE rdmaprov_check_failures gauge",
    ]
    for name, verification in verified.items():
        failed = Counter(f.id for f in verification.failures)
        for check in sorted({f.id for f in verification.findings if f.id}):
            lines.append(
                f'rdmaprov_check_failures{{cluster="{cluster}",host="{_label(name)}",check="{check}"}} {failed[check]}'
            )
    lines += [
        "# HELP rdmaprov_host_reachable Whether the check could reach and plan the host.",
        "# TYPE rdmaprov_host_reachable gauge",
    ]
    for host in result.hosts:
        lines.append(
            f'rdmaprov_host_reachable{{cluster="{cluster}",host="{_label(host.name)}"}} '
            f"{0 if host.status == 'unreachable' else 1}"
        )
    lines += [
        "# HELP rdmaprov_host_failed Whether the check failed on the host (planning error, unreachable or a failed "
        "check).",
        "# TYPE rdmaprov_host_failed gauge",
    ]
    for host in result.hosts:
        bad = host.status in ("failed", "unreachable") or (host.name in verified and verified[host.name].status != "ok")
        lines.append(f'rdmaprov_host_failed{{cluster="{cluster}",host="{_label(host.name)}"}} {int(bad)}')
    if result.gates:
        lines += ["# HELP rdmaprov_gate_passed Whether a bandwidth gate passed.", "# TYPE rdmaprov_gate_passed gauge"]
        for gate in result.gates:
            lines.append(
                f'rdmaprov_gate_passed{{cluster="{cluster}",gate="{_label(gate.gate)}",'
                f'subject="{_label(str(gate.subject))}"}} {int(gate.passed)}'
            )
    lines += [
        "# HELP rdmaprov_check_exit_code The check's exit code (0 no drift, 2 drift, 4 failures, 6 both).",
        "# TYPE rdmaprov_check_exit_code gauge",
        f'rdmaprov_check_exit_code{{cluster="{cluster}"}} {result.exit_code}',
        "# HELP rdmaprov_check_duration_seconds How long the check took.",
        "# TYPE rdmaprov_check_duration_seconds gauge",
        f'rdmaprov_check_duration_seconds{{cluster="{cluster}"}} {result.duration_s:.3f}',
        "# HELP rdmaprov_check_last_run_timestamp_seconds When the check finished (Unix time).",
        "# TYPE rdmaprov_check_last_run_timestamp_seconds gauge",
        f'rdmaprov_check_last_run_timestamp_seconds{{cluster="{cluster}"}} '
        f"{now if now is not None else time.time():.0f}",
    ]
    return "\n".join(lines) + "\n"


def write_textfile(path: str, text: str) -> None:
    """Write `text` to `path` atomically (temp file in the same directory, then rename)."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, temp = tempfile.mkstemp(prefix=f".{target.name}.", dir=target.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
        os.chmod(temp, 0o644)
        os.replace(temp, target)
    except BaseException:
        Path(temp).unlink(missing_ok=True)
        raise
