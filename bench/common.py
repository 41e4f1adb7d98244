"""Shared by the benchmarks: run rdmaprov as a user would, timing it and its peak memory."""

from __future__ import annotations

import json
import os
import platform
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "bench" / "results"
# The deploys that run in containers (no kernel modules, no RDMA devices there).
CONTAINER_TAGS = "package_sources,rdma_userspace,ssh_trust,limits,nccl_env"


@dataclass
class Measured:
    """One command: exit status, wall time, the child's peak RSS, and its stdout."""

    code: int
    wall_s: float
    peak_rss_mib: float
    stdout: str
    stderr: str


# Runs one command and writes the command's own peak RSS (KiB) to a file: RUSAGE_CHILDREN of
# this one-child wrapper is that child alone.
_WRAPPER = (
    "import resource, subprocess, sys; "
    "code = subprocess.call(sys.argv[2:]); "
    "open(sys.argv[1], 'w').write(str(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)); "
    "sys.exit(code)"
)


def measure(argv: list[str], env: dict[str, str] | None = None, timeout: int = 3600) -> Measured:
    """Run argv; wall time, and peak RSS of that process as the kernel accounted it."""
    import tempfile

    with tempfile.NamedTemporaryFile("r", suffix=".rss") as rss:
        started = time.monotonic()
        proc = subprocess.run(
            [sys.executable, "-c", _WRAPPER, rss.name, *argv],
            capture_output=True,
            text=True,
            cwd=REPO,
            env=dict(os.environ, **(env or {})),
            timeout=timeout,
        )
        wall = time.monotonic() - started
        rss_kib = int(rss.read() or 0)
    return Measured(proc.returncode, wall, rss_kib / 1024, proc.stdout, proc.stderr)


def rdmaprov(*args: str) -> list[str]:
    return [sys.executable, "-m", "rdmaprov", *args]


def lab_up(lab_dir: Path, kind: str, nodes: int, subnet: str, bridge: str) -> None:
    proc = subprocess.run(
        rdmaprov(
            "lab",
            "--dir",
            str(lab_dir),
            "up",
            "--kind",
            kind,
            "--nodes",
            str(nodes),
            "--subnet",
            subnet,
            "--bridge",
            bridge,
        ),
        cwd=REPO,
        capture_output=True,
        text=True,
    )
    if proc.returncode != 0:
        raise SystemExit(f"lab up failed:\n{proc.stdout}\n{proc.stderr}")
    print(proc.stdout.strip())


def lab_down(lab_dir: Path) -> None:
    subprocess.run(rdmaprov("lab", "--dir", str(lab_dir), "down"), cwd=REPO, capture_output=True, text=True)


def run_json(measured: Measured) -> dict:
    try:
        return json.loads(measured.stdout)
    except json.JSONDecodeError:
        raise SystemExit(
            f"no JSON (exit {measured.code}):\n{measured.stdout[-2000:]}\n{measured.stderr[-2000:]}"
        ) from None


def machine() -> dict:
    with open("/proc/meminfo") as handle:
        mem_kib = int(handle.readline().split()[1])
    return {
        "cpus": os.cpu_count(),
        "memory_gib": round(mem_kib / 1024 / 1024, 1),
        "kernel": platform.release(),
        "python": platform.python_version(),
    }


def median(values: list[float]) -> float:
    return statistics.median(values)


def write_result(name: str, doc: dict) -> Path:
    RESULTS.mkdir(parents=True, exist_ok=True)
    doc = {
        "benchmark": name,
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "machine": machine(),
        "command": " ".join(sys.argv),
        **doc,
    }
    path = RESULTS / f"{name}.json"
    path.write_text(json.dumps(doc, indent=2) + "\n")
    return path


def table(headers: list[str], rows: list[list]) -> str:
    widths = [max(len(str(x)) for x in [h, *[r[i] for r in rows]]) for i, h in enumerate(headers)]
    line = lambda cells: "  ".join(str(c).rjust(w) for c, w in zip(cells, widths, strict=True))  # noqa: E731
    return "\n".join([line(headers), line(["-" * w for w in widths]), *[line(r) for r in rows]])
