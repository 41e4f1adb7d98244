"""Benchmark: control-side cost per host of `check` and a no-op `apply` on 1 to 256 real SSH hosts.

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
judges a node report of a real GPU node's size.

    .venv/bin/python bench/host_scaling.py [--sizes 1,32,128,256] [--repeat 3] [--name host_scaling]
        [--commands check,apply] [--env RDMAPROV_SHARDS=1] [--twins]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

from common import REPO, Measured, load_1m, measure, median, rdmaprov, run_json, table, write_result

sys.path.insert(0, str(REPO))
from tests.support.sshhosts import SSHHostFarm  # noqa: E402
from tests.support.twin import TWIN_DEFAULTS, TwinNode  # noqa: E402

TAGS = "limits,nccl_env,ssh_trust"
DEFAULTS = """defaults:
  fabric: roce
  rdma: {devices: [mlx5_0, mlx5_1], storage_hcas: [mlx5_2]}
  nccl: {env: {NCCL_DEBUG: WARN, NCCL_SOCKET_IFNAME: eth0}}
"""
# Hundreds of handshakes at once on 2 shared cores take longer than the tests' 5 s.
CONNECT_TIMEOUT = 60


def command_line(command: str, inventory: str) -> list[str]:
    if command == "verify":
        return rdmaprov("verify", inventory, "--json")
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1,32,128,256")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--commands", default="check,apply", help="check, apply (no-op), verify")
    parser.add_argument("--name", default="host_scaling", help="results file name")
    parser.add_argument("--env", action="append", default=[], help="KEY=VALUE for rdmaprov (repeatable)")
    parser.add_argument("--twins", action="store_true", help="DGX-shaped twin hosts (real-size node reports)")
    args = parser.parse_args()
    sizes = sorted(int(n) for n in args.sizes.split(","))
    commands = args.commands.split(",")
    env = dict(item.split("=", 1) for item in args.env)
    work = Path(tempfile.mkdtemp(prefix="rdmaprov-bench-"))
    farm = SSHHostFarm(max(sizes), prepare=(lambda host: TwinNode().write(host.workdir)) if args.twins else None)
    defaults = TWIN_DEFAULTS if args.twins else DEFAULTS
    what = "DGX-shaped twin hosts" if args.twins else "sshd hosts"
    print(f"starting {max(sizes)} {what} (load {load_1m():.2f})…", flush=True)
    try:
        farm.start()
        rows, runs = [], {}
        for size in sizes:
            inventory = str(farm.inventory(work / f"hosts{size}.yaml", defaults, farm.hosts[:size], CONNECT_TIMEOUT))
            converge = run_json(measure(rdmaprov("apply", inventory, "--tags", TAGS, "--skip-verify", "--json"), env))
            bad = [
                (h["name"], h["status"], h["error"])
                for h in converge["hosts"]
                if h["status"] not in ("changed", "unchanged")
            ]
            assert not bad, f"{size} hosts did not converge: {bad[:5]}"
            runs[size] = {command: [] for command in commands}
            for _ in range(args.repeat):
                for command in commands:
                    nodes_before = node_cpu_s(farm, size)
                    m = measure(command_line(command, inventory), env)
                    time.sleep(0.5)  # the sessions' processes are reaped by then
                    nodes_s = node_cpu_s(farm, size) - nodes_before
                    result = run_json(m)
                    if command != "verify":
                        assert result["exit_code"] == 0, f"{command} on {size} converged hosts: {result['summary']}"
                    runs[size][command].append(sample(m, result, size, nodes_s))
            for command in commands:
                samples = runs[size][command]
                cpu = median([s["cpu_s"] for s in samples])
                rows.append(
                    [
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
                )
            print(table(HEADERS, rows[-len(commands) :]), flush=True)
        print()
        print(table(HEADERS, rows))
        path = write_result(
            args.name,
            {"hosts": f"{what} in network namespaces", "tags": TAGS, "repeat": args.repeat, "env": env, "runs": runs},
        )
        print(f"wrote {path}")
    finally:
        farm.stop()


HEADERS = [
    "hosts", "command", "wall s", "CPU s", "CPU ms/host", "nodes ms/host", "RSS MiB", "PSS MiB", "trips/host", "load"
]  # fmt: skip

if __name__ == "__main__":
    main()
