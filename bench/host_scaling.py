"""Benchmark: control-side cost per host of `check`, a no-op `apply` and more on 1 to 2,000 SSH hosts.

The hosts are real sshd processes, each in its own network and mount namespace on a private
bridge (tests/support/sshhosts.py): light enough for hundreds on one machine, where containers
or VMs are not. They share this machine's root filesystem (an overlay each), so the deploys
measured are those that need no package downloads: `limits`, `nccl_env` and `ssh_trust` (the
cluster-wide one: every node's keys on every node). For each size the inventory holds exactly
those hosts; the first apply converges them (not timed), then no-op applies and checks
alternate. Prints, per size and command: median wall time, control-side CPU seconds (rdmaprov
and every process it started) and per host, peak memory of all of rdmaprov's processes, SSH
round trips per host; writes bench/results/NAME.json. Needs root.

With --twins each host is a DGX-shaped twin (tests/support/twin.py): its GPU and HCA tools answer
from real captured outputs (8 GPUs, 8 compute HCAs, 4 NVSwitches), so verify reads, parses and
judges a node report of a real GPU node's size. With --diagnose N as well, after the other
commands `diagnose` runs once over the first N hosts, one of which (two thirds in) has an mlx5_4
that moves data at half its rate: its pair rounds must name that node and rail. The results file
is written again after each size, so a run stopped by a time limit (a lent machine's) keeps what
it measured.

    .venv/bin/python bench/host_scaling.py [--sizes 1,32,128,256] [--repeat 3] [--name host_scaling]
        [--commands check,apply] [--env RDMAPROV_SHARDS=1] [--twins [--diagnose N]]
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from common import REPO, Measured, load_1m, measure, median, rdmaprov, run_json, table, write_result

sys.path.insert(0, str(REPO))
from tests.support.sshhosts import SSHHost, SSHHostFarm  # noqa: E402
from tests.support.twin import TWIN_DEFAULTS, TwinNode, with_twin_gates  # noqa: E402

TAGS = "limits,nccl_env,ssh_trust"
DEFAULTS = """defaults:
  fabric: roce
  rdma: {devices: [mlx5_0, mlx5_1], storage_hcas: [mlx5_2]}
  nccl: {env: {NCCL_DEBUG: WARN, NCCL_SOCKET_IFNAME: eth0}}
"""
# Hundreds of handshakes at once on 2 shared cores take longer than the tests' 5 s.
CONNECT_TIMEOUT = 60


def command_line(command: str, inventory: str) -> list[str]:
    if command in ("verify", "diagnose"):
        return rdmaprov(command, inventory, "--json")
    return rdmaprov(command, inventory, "--tags", TAGS, "--skip-verify", "--json")


def node_cpu_s(farm: SSHHostFarm, size: int) -> float:
    """CPU seconds the first `size` hosts' sshd used so far, with the sessions it started and
    reaped (the nodes' side of the work, which shares this machine's cores with rdmaprov here)."""
    total = 0
    for host in farm.hosts[:size]:
        fields = Path(f"/proc/{host.pid}/stat").read_text().rsplit(")", 1)[1].split()
        total += sum(int(x) for x in fields[11:15])  # utime stime cutime cstime
    return total / os.sysconf("SC_CLK_TCK")


def sample(m: Measured, result: dict, size: int, nodes_s: float) -> dict:
    trips = [h["round_trips"] for h in result.get("hosts", [])] or [0]
    return {
        "wall_s": round(m.wall_s, 3),
        "cpu_s": round(m.cpu_s, 3),
        "node_cpu_s": round(nodes_s, 3),
        "load_1m": m.load_1m,
        "peak_rss_mib": round(m.peak_rss_mib, 1),
        "peak_tree_rss_mib": round(m.peak_tree_rss_mib, 1),
        "peak_tree_pss_mib": round(m.peak_tree_pss_mib, 1),
        "round_trips_max": max(trips),
        "round_trips_mean": round(sum(trips) / max(size, 1), 2),
        "exit_code": result.get("exit_code"),
    }


def diagnosed(m: Measured, result: dict, slow: str) -> dict:
    """What a diagnose run found, beside its cost: the rounds, the suspects and the evidence
    naming the slow node's rail (the twin's fault is on mlx5_4)."""
    suspects = result.get("suspects", {})
    evidence = " ".join(suspects.get(slow, []))
    return {
        "exit_code": m.code,
        "rounds": result.get("rounds"),
        "suspects": list(suspects),
        "cleared": len(result.get("cleared", [])),
        "undecided": len(result.get("undecided", {})),
        "named": list(suspects) == [slow] and f"{slow}:mlx5_4" in evidence,
        "pair_tests": sum(1 for t in result.get("tests", []) if t.get("gate") == "rail"),
        # why tests failed, where they did: the slow rail's, or the test bed's own
        "failures": sorted({t.get("reason", "")[:200] for t in result.get("tests", []) if not t.get("passed")})[:5],
    }


def twins_in(work: Path, slow: str = "") -> Callable[[SSHHost], None]:
    """A farm's `prepare` that makes each host a healthy twin, laid out once in `work` and linked
    (each host's start script copies from it), and the host named `slow` one with a slow rail."""
    TwinNode().write(work)

    def prepare(host: SSHHost) -> None:
        if host.name == slow:
            TwinNode(frozenset({"slow_rail"})).write(host.workdir)
        else:
            (host.workdir / "twin").symlink_to(work / "twin")

    return prepare


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1,32,128,256")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--commands", default="check,apply", help="check, apply (no-op), verify")
    parser.add_argument("--name", default="host_scaling", help="results file name")
    parser.add_argument("--env", action="append", default=[], help="KEY=VALUE for rdmaprov (repeatable)")
    parser.add_argument("--twins", action="store_true", help="DGX-shaped twin hosts (real-size node reports)")
    parser.add_argument("--diagnose", type=int, default=0, metavar="N", help="with --twins: over N, one rail slow")
    args = parser.parse_args()
    if args.diagnose and not args.twins:
        parser.error("--diagnose needs --twins (a slow rail is a twin's fault)")
    sizes = sorted(int(n) for n in args.sizes.split(","))
    if args.diagnose > max(sizes):
        parser.error("--diagnose N: at most the largest size")
    commands = args.commands.split(",")
    env = dict(item.split("=", 1) for item in args.env)
    work = Path(tempfile.mkdtemp(prefix="rdmaprov-bench-"))
    slow = f"node{args.diagnose * 2 // 3 + 1}" if args.diagnose else ""

    farm = SSHHostFarm(max(sizes), prepare=twins_in(work, slow) if args.twins else None)
    defaults = TWIN_DEFAULTS if args.twins else DEFAULTS
    what = "DGX-shaped twin hosts" if args.twins else "sshd hosts"
    print(f"starting {max(sizes)} {what} (load {load_1m():.2f})…", flush=True)
    doc: dict = {"hosts": f"{what} in network namespaces", "tags": TAGS, "repeat": args.repeat, "env": env}
    try:
        began = time.monotonic()
        farm.start()
        doc["farm_start_s"] = round(time.monotonic() - began, 1)
        print(f"started in {doc['farm_start_s']} s", flush=True)
        rows: list[list] = []
        runs: dict[int, dict[str, list[dict]]] = {}
        doc["runs"] = runs
        for size in sizes:
            inventory = farm.inventory(work / f"hosts{size}.yaml", defaults, farm.hosts[:size], CONNECT_TIMEOUT)
            try:
                runs[size] = measure_size(farm, str(inventory), size, commands, args.repeat, env)
            except AssertionError as failed:  # the test bed or rdmaprov failed: keep what was measured
                print(f"{size} hosts: {failed}", flush=True)
                doc.setdefault("failed", {})[size] = str(failed)[:2000]
                write_result(args.name, doc)
                continue
            rows += [row(size, command, runs[size][command]) for command in commands]
            print(table(HEADERS, rows[-len(commands) :]), flush=True)
            write_result(args.name, doc)
        print()
        print(table(HEADERS, rows))
        if args.diagnose:
            hosts = farm.hosts[: args.diagnose]
            inventory = with_twin_gates(farm.inventory(work / "diagnose.yaml", defaults, hosts, CONNECT_TIMEOUT))
            m = measure(command_line("diagnose", str(inventory)), env)
            result = run_json(m)
            doc["diagnose"] = sample(m, result, args.diagnose, 0.0) | diagnosed(m, result, slow)
            print(f"diagnose on {args.diagnose} twins, {slow} slow: {doc['diagnose']}", flush=True)
        print(f"wrote {write_result(args.name, doc)}")
    finally:
        farm.stop()
        shutil.rmtree(work, ignore_errors=True)  # the inventories and the twin laid out once


def measure_size(farm: SSHHostFarm, inventory: str, size: int, commands: list[str], repeat: int, env: dict) -> dict:
    """Converge the first `size` hosts (not timed), then run each command `repeat` times."""
    converge = run_json(measure(rdmaprov("apply", inventory, "--tags", TAGS, "--skip-verify", "--json"), env))
    ok = ("changed", "unchanged")
    bad = [(h["name"], h["status"], h["error"]) for h in converge["hosts"] if h["status"] not in ok]
    assert not bad, f"{size} hosts did not converge: {bad[:5]}"
    runs: dict[str, list[dict]] = {command: [] for command in commands}
    for _ in range(repeat):
        for command in commands:
            nodes_before = node_cpu_s(farm, size)
            m = measure(command_line(command, inventory), env)
            time.sleep(0.5)  # the sessions' processes are reaped by then
            nodes_s = node_cpu_s(farm, size) - nodes_before
            result = run_json(m)
            if command != "verify":
                assert result["exit_code"] == 0, f"{command} on {size} converged hosts: {result['summary']}"
            runs[command].append(sample(m, result, size, nodes_s))
    return runs


def row(size: int, command: str, samples: list[dict]) -> list:
    cpu = median([s["cpu_s"] for s in samples])
    return [
        size,
        command,
        f"{median([s['wall_s'] for s in samples]):.2f}",
        f"{cpu:.2f}",
        f"{cpu / size * 1000:.0f}",
        f"{median([s['node_cpu_s'] for s in samples]) / size * 1000:.0f}",
        f"{max(s['peak_tree_rss_mib'] for s in samples):.0f}",
        f"{max(s['peak_tree_pss_mib'] for s in samples):.0f}",
        max(s["round_trips_max"] for s in samples),
        " ".join(f"{s['load_1m']:.1f}" for s in samples),
    ]


HEADERS = [
    "hosts", "command", "wall s", "CPU s", "CPU ms/host", "nodes ms/host", "RSS MiB", "PSS MiB", "trips/host", "load"
]  # fmt: skip

if __name__ == "__main__":
    main()
