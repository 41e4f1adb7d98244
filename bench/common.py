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


def tool_venv(name: str, package: str, program: str) -> Path:
    """`program` from `package`, installed from the Python package index into bench/.venv-NAME
    the first time: a tool a benchmark needs that rdmaprov itself does not."""
    venv = REPO / "bench" / f".venv-{name}"
    if not (venv / "bin" / program).exists():
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        subprocess.run([str(venv / "bin" / "pip"), "install", "-q", package], check=True)
    return venv / "bin" / program


@dataclass
class Measured:
    """One command: exit status, wall time, its memory and CPU, and its stdout.

    `peak_rss_mib` is the largest single process's peak RSS (the kernel's accounting, as before
    the runs were split across processes); `peak_tree_rss_mib` and `peak_tree_pss_mib` are the
    largest sum over the command and every process it started, sampled every 50 ms: RSS counts
    pages that forked processes share once per process, PSS splits them among the sharers, so
    PSS is what the control machine really holds. `cpu_s` is user + system time of the command
    and all its descendants; `load_1m` the machine's 1-minute load average when it started.
    """

    code: int
    wall_s: float
    peak_rss_mib: float
    stdout: str
    stderr: str
    cpu_s: float = 0.0
    peak_tree_rss_mib: float = 0.0
    peak_tree_pss_mib: float = 0.0
    load_1m: float = 0.0


# Runs one command and writes its peak RSS (KiB) and CPU seconds to a file: RUSAGE_CHILDREN of
# this one-child wrapper is that child and every descendant it waited for.
_WRAPPER = (
    "import resource, subprocess, sys; "
    "code = subprocess.call(sys.argv[2:]); "
    "u = resource.getrusage(resource.RUSAGE_CHILDREN); "
    "open(sys.argv[1], 'w').write(f'{u.ru_maxrss} {u.ru_utime + u.ru_stime}'); "
    "sys.exit(code)"
)


def load_1m() -> float:
    with open("/proc/loadavg") as handle:
        return float(handle.read().split()[0])


def _children(pid: int) -> list[int]:
    found = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            found += [int(c) for c in (task / "children").read_text().split()]
        except OSError:
            continue
    return found


def _tree_memory_kib(root: int) -> tuple[int, int]:
    """(sum of RSS, sum of PSS) in KiB over `root`'s descendants (the wrapper itself excluded)."""
    rss = pss = 0
    todo = _children(root)
    while todo:
        pid = todo.pop()
        try:
            for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
                if line.startswith("Rss:"):
                    rss += int(line.split()[1])
                elif line.startswith("Pss:"):
                    pss += int(line.split()[1])
        except (OSError, ValueError):
            continue
        todo += _children(pid)
    return rss, pss


def measure(argv: list[str], env: dict[str, str] | None = None, timeout: int = 3600) -> Measured:
    """Run argv; wall time, CPU time, and peak memory of it and what it started."""
    import tempfile
    import threading

    with tempfile.NamedTemporaryFile("r", suffix=".rss") as rss:
        load = load_1m()
        started = time.monotonic()
        proc = subprocess.Popen(
            [sys.executable, "-c", _WRAPPER, rss.name, *argv],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=REPO,
            env=dict(os.environ, **(env or {})),
        )
        peak = [0, 0]
        done = threading.Event()

        def sample() -> None:
            while not done.wait(0.05):
                tree = _tree_memory_kib(proc.pid)
                peak[0], peak[1] = max(peak[0], tree[0]), max(peak[1], tree[1])

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        try:
            stdout, stderr = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate()
            raise
        finally:
            done.set()
            sampler.join()
        wall = time.monotonic() - started
        fields = (rss.read() or "0 0").split()
    return Measured(
        proc.returncode,
        wall,
        int(fields[0]) / 1024,
        stdout,
        stderr,
        cpu_s=float(fields[1]),
        peak_tree_rss_mib=peak[0] / 1024,
        peak_tree_pss_mib=peak[1] / 1024,
        load_1m=load,
    )


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
