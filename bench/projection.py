"""Projection: rdmaprov on N hosts from a control machine with C cores, from measured runs.

Reads host_scaling results of one process (RDMAPROV_SHARDS=1) and of two (RDMAPROV_SHARDS=2) at
several sizes, fits the control machine's CPU seconds of one process as a + b·n + c·n² (least
squares on relative errors; a is start-up, b·n the per-host work, c·n² what still grows with the cluster on every
host: the trust blocks' bytes) and its memory as m0 + m1·n, takes the cost of one more process
from the two-process runs, and projects, for K = min(C, N / HOSTS_PER_SHARD) shards:

    wall ≈ a + (b·N + c·N²) / K + o        (shards work at once; o: one shard's own start)
    memory ≈ m0 + m1·N + (K − 1)·p         (PSS: what the forked shards do not share)

Network latency is left out (a converged check is 2–3 round trips a host, all hosts at once) and
so is the nodes' own work (on their CPUs, in parallel). Prints the fit and the projection.

    .venv/bin/python bench/projection.py [--one results/host_scaling_1shard.json]
        [--two results/host_scaling_2shards.json] [--hosts 2000] [--cores 16] [--command check]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys

from common import REPO, RESULTS

sys.path.insert(0, str(REPO / "src"))
from rdmaprov.engine.shards import HOSTS_PER_SHARD  # noqa: E402


def medians(path: str, command: str, key: str) -> dict[int, float]:
    runs = json.loads(open(path).read())["runs"]
    return {int(n): statistics.median(s[key] for s in by[command]) for n, by in runs.items() if command in by}


def peaks(path: str, command: str, key: str) -> dict[int, float]:
    runs = json.loads(open(path).read())["runs"]
    return {int(n): max(s[key] for s in by[command]) for n, by in runs.items() if command in by}


def solve(rows: list[list[float]], values: list[float]) -> list[float]:
    """Least squares by the normal equations (a handful of points, 2 or 3 unknowns)."""
    size = len(rows[0])
    matrix = [[sum(r[i] * r[j] for r in rows) for j in range(size)] for i in range(size)]
    vector = [sum(r[i] * v for r, v in zip(rows, values, strict=True)) for i in range(size)]
    for col in range(size):  # Gauss-Jordan
        pivot = max(range(col, size), key=lambda r: abs(matrix[r][col]))
        matrix[col], matrix[pivot] = matrix[pivot], matrix[col]
        vector[col], vector[pivot] = vector[pivot], vector[col]
        for row in range(size):
            if row != col:
                factor = matrix[row][col] / matrix[col][col]
                matrix[row] = [x - factor * y for x, y in zip(matrix[row], matrix[col], strict=True)]
                vector[row] -= factor * vector[col]
    return [vector[i] / matrix[i][i] for i in range(size)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--one", default=str(RESULTS / "host_scaling_1shard.json"))
    parser.add_argument("--two", default=str(RESULTS / "host_scaling_2shards.json"))
    parser.add_argument("--hosts", type=int, default=2000)
    parser.add_argument("--cores", type=int, default=16)
    parser.add_argument("--command", default="check")
    args = parser.parse_args()
    cpu1 = medians(args.one, args.command, "cpu_s")
    cpu2 = medians(args.two, args.command, "cpu_s")
    pss1 = peaks(args.one, args.command, "peak_tree_pss_mib")
    pss2 = peaks(args.two, args.command, "peak_tree_pss_mib")
    sizes = sorted(cpu1)
    # Relative errors count, not absolute ones: the largest size would otherwise decide alone.
    a, b, c = solve([[1 / cpu1[n], n / cpu1[n], n * n / cpu1[n]] for n in sizes], [1.0] * len(sizes))
    m0, m1 = solve([[1 / pss1[n], n / pss1[n]] for n in sizes], [1.0] * len(sizes))
    both = sorted(set(cpu1) & set(cpu2))
    shard_cpu = statistics.median(cpu2[n] - cpu1[n] for n in both)
    shard_pss = statistics.median(pss2[n] - pss1[n] for n in both)
    print(f"one process, {args.command}: CPU s = {a:.3f} + {b * 1000:.3f} ms·n + {c * 1e6:.4f} µs·n²")
    for n in sizes:
        fitted = a + b * n + c * n * n
        print(f"  n={n:>4}: measured {cpu1[n]:.2f} s, fitted {fitted:.2f} s")
    print(f"memory (PSS, all processes): {m0:.0f} MiB + {m1 * 1024:.0f} KiB·n")
    print(f"one more process: +{shard_cpu:.2f} s CPU, +{shard_pss:.0f} MiB PSS (median over n = {both})")
    n, k = args.hosts, max(1, min(args.cores, args.hosts // HOSTS_PER_SHARD))
    work = b * n + c * n * n
    wall = a + work / k + max(shard_cpu, 0.0)
    memory = m0 + m1 * n + (k - 1) * max(shard_pss, 0.0)
    print(
        f"\n{n} hosts, {args.cores} cores, {k} shards: per-host work {b * n:.1f} s + growing {c * n * n:.1f} s = "
        f"{work:.1f} s of CPU\n  wall ≈ {a:.2f} + {work:.1f} / {k} + {shard_cpu:.2f} = {wall:.1f} s"
        f"\n  memory ≈ {m0:.0f} + {m1 * n:.0f} + {k - 1} × {shard_pss:.0f} = {memory:.0f} MiB"
        f"\n  in one process: {a + work:.1f} s, {m0 + m1 * n:.0f} MiB"
    )


if __name__ == "__main__":
    main()
