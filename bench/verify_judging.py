"""Benchmark: verify's own work per node report, without SSH, on 1 to 2,000 DGX-shaped reports.

host_scaling.py --twins measures verify as a user runs it: the reports come over SSH from twins
that share this machine's cores, so its control CPU mixes rdmaprov's work with the cost of
receiving 270 KB per host from loaded senders (more, smaller packets as the load grows). This
script takes that apart. It reads one twin's node report over real SSH once (a one-host farm,
the same command verify sends), then for each size N, in a fresh process (so that memory and
the garbage collector start clean each time), does what verify does with N such reports after
they arrived: load an inventory of N twin hosts, read N reports (NodeFacts.process: unpacked
from gzip where the node sent them so, facts/packed.py, and parsed), send them
across the process boundary as the shards do (pickle out, pickle in), judge them
(verify_hosts: every node's checks, counters against the last read, fleet consistency) and
render the run's JSON. Prints CPU per host of each phase and the process's memory; writes
bench/results/NAME.json. Needs root (the farm).

    .venv/bin/python bench/verify_judging.py [--sizes 1,32,256,1000,2000] [--repeat 3] [--name N]

The inventory's hosts have loopback addresses that nothing connects to.
"""

from __future__ import annotations

import argparse
import json
import pickle
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

from common import REPO, median, table, write_result
from host_scaling import twins_in

sys.path.insert(0, str(REPO))
from rdmaprov.facts.packed import unpacked  # noqa: E402
from tests.support.sshhosts import SSHHostFarm  # noqa: E402
from tests.support.twin import TWIN_DEFAULTS  # noqa: E402

PHASES = ("load", "parse", "pickle", "judge", "json")
DCGM_LEVEL = 1  # verify's default


def address(index: int) -> str:
    return f"127.1.{index // 250}.{index % 250 + 1}"


def write_inventory(path: Path, size: int) -> Path:
    hosts = "".join(f"      node{i + 1}:\n        address: {address(i)}\n" for i in range(size))
    path.write_text(f"cluster:\n  name: judging\ngroups:\n  nodes:\n    hosts:\n{hosts}{TWIN_DEFAULTS}")
    return path


def capture_report(work: Path) -> str:
    """One twin's node report, as verify's command prints it over SSH."""
    from rdmaprov.facts.node import NodeFacts
    from rdmaprov.health.checks import report_arguments
    from rdmaprov.inventory.loader import load_inventory

    farm = SSHHostFarm(1, prepare=twins_in(work))
    farm.start()
    try:
        host = farm.hosts[0]
        spec = load_inventory(write_inventory(work / "one.yaml", 1)).hosts["node1"]
        command = NodeFacts().command(**report_arguments(spec, DCGM_LEVEL))
        ssh = ["ssh", "-i", str(farm.client_key), "-o", f"UserKnownHostsFile={farm.known_hosts}"]
        ssh += ["-o", "StrictHostKeyChecking=yes", "-o", "BatchMode=yes", f"root@{host.address}", command]
        return subprocess.run(ssh, capture_output=True, text=True, check=True).stdout
    finally:
        farm.stop()


def timed(spent: dict[str, float], phase: str, work: Callable[[], Any]) -> Any:
    started = time.process_time()
    value = work()
    spent[phase] = time.process_time() - started
    return value


def pss_mib() -> float:
    for line in Path("/proc/self/smaps_rollup").read_text().splitlines():
        if line.startswith("Pss:"):
            return int(line.split()[1]) / 1024
    return 0.0


def one_size(size: int, report_file: Path, work: Path) -> dict[str, float]:
    """verify's phases on `size` copies of the report, in this process: CPU seconds of each, and memory."""
    from rdmaprov.engine.results import RunResult
    from rdmaprov.engine.session import Readings
    from rdmaprov.facts.node import NodeFacts
    from rdmaprov.health.verify import verify_hosts
    from rdmaprov.inventory.loader import load_inventory

    lines = report_file.read_text().splitlines()
    spent: dict[str, float] = {}
    inventory = timed(spent, "load", lambda: load_inventory(write_inventory(work / f"n{size}.yaml", size)))
    names = list(inventory.hosts)
    facts = NodeFacts()
    parsed = timed(spent, "parse", lambda: {name: facts.process(lines) for name in names})
    reports = timed(spent, "pickle", partial(_across, parsed))
    del parsed
    results = timed(spent, "judge", lambda: verify_hosts(Readings(inventory, reports, {}), names))
    run = RunResult("verify", str(inventory.path), inventory.name, "")
    run.verify = results
    timed(spent, "json", lambda: json.dumps(run.to_json(), indent=2))
    failed = sum(1 for r in results if r.status != "ok")
    return {**spent, "failed_hosts": failed, "pss_mib": pss_mib(), "maxrss_mib": _maxrss_mib()}


def _across(value: Any) -> Any:
    """`value` as a shard's result reaches the parent process: pickled there, unpickled here."""
    return pickle.loads(pickle.dumps(value))


def _maxrss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1,32,256,1000,2000")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--name", default="verify_judging")
    parser.add_argument("--one", type=int, help=argparse.SUPPRESS)  # a child: one size
    parser.add_argument("--report", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--work", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        print(json.dumps(one_size(args.one, args.report, args.work)))
        return
    work = Path(tempfile.mkdtemp(prefix="rdmaprov-judging-"))
    try:
        report = work / "report.txt"
        report.write_text(capture_report(work))
        sizes = [int(n) for n in args.sizes.split(",")]
        samples: dict[int, list[dict[str, float]]] = {n: [] for n in sizes}
        state = work / "state"  # counter reads: a fresh baseline each run, as on a first verify
        for _ in range(args.repeat):
            for size in sizes:
                shutil.rmtree(state, ignore_errors=True)
                child = [sys.executable, __file__, "--one", str(size), "--report", str(report), "--work", str(work)]
                env = {"PATH": "/usr/bin:/bin", "RDMAPROV_STATE": str(state)}
                out = subprocess.run(child, capture_output=True, text=True, check=True, env=env).stdout
                samples[size].append(json.loads(out))
        figures = {n: {k: median([s[k] for s in runs]) for k in runs[0]} for n, runs in samples.items()}
        rows = []
        for n, f in figures.items():
            per_host = [f"{f[p] / n * 1000:.2f}" for p in PHASES]
            total = sum(f[p] for p in PHASES)
            rows.append([n, *per_host, f"{total / n * 1000:.2f}", f"{f['pss_mib']:.0f}", int(f["failed_hosts"])])
        headers = ["reports", *(f"{p} ms/host" for p in PHASES), "total ms/host", "PSS MiB", "failed"]
        sent, text = report.stat().st_size, len(unpacked(report.read_text().splitlines()).encode())
        print(f"one report: {sent} bytes as sent, {text} unpacked")
        print(table(headers, rows))
        doc = {"sizes": sizes, "repeat": args.repeat, "report_bytes_sent": sent, "report_bytes": text}
        write_result(args.name, {**doc, "median": figures, "samples": samples})
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
