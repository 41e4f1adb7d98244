"""Benchmark: `rdmaprov-node-check` on the nodes themselves (budget: 10 s), on lab VMs (emulated
CPUs, TCG) and on this machine (its real CPUs).

On the VMs: the node stack and the node check are applied (cluster.slurm in health_check mode: the
check alone, no Slurm), then the installed command runs N times on each node over SSH, timed on
the node (interpreter start, the zipapp's imports, the node report, the checks). Here: the same
zipapp runs N times against this machine with the same expectations. Prints a table and writes
bench/results/node_check.json. Needs root and QEMU unless --inventory names a running lab.

    .venv/bin/python bench/node_check.py [--repeat 5] [--inventory LAB/inventory.yaml]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml
from common import REPO, lab_down, lab_up, measure, median, rdmaprov, run_json, table, write_result

BUDGET_S = 10.0
# On the node: wall time of one run in ms, and the check's own figure (report + checks) from --json.
_TIMED = (
    "s=$(date +%s%N); out=$(/usr/local/sbin/rdmaprov-node-check --json); code=$?; e=$(date +%s%N); "
    'echo "$(( (e - s) / 1000000 )) $code $(echo "$out" | python3 -c '
    '\'import json,sys; print(json.load(sys.stdin)["duration_s"])\')"'
)


def _health_check_inventory(inventory: Path, into: Path) -> Path:
    data = yaml.safe_load(inventory.read_text())
    data["cluster"]["slurm"] = {"enabled": True, "mode": "health_check"}
    into.write_text(yaml.safe_dump(data, sort_keys=False))
    return into


def _ssh(inventory: dict, host: str, command: str) -> str:
    ssh = inventory["cluster"]["ssh"]
    address = inventory["groups"]["nodes"]["hosts"][host]["address"]
    argv = ["ssh", "-i", ssh["key"], "-o", f"UserKnownHostsFile={ssh['known_hosts']}", "-o", "BatchMode=yes"]
    return subprocess.run([*argv, f"root@{address}", command], capture_output=True, text=True, check=True).stdout


def on_nodes(inventory: Path, repeat: int) -> dict[str, list[dict[str, float]]]:
    data = yaml.safe_load(inventory.read_text())
    runs: dict[str, list[dict[str, float]]] = {}
    for host in data["groups"]["nodes"]["hosts"]:
        for _ in range(repeat):
            wall_ms, code, checks_s = _ssh(data, host, _TIMED).split()
            runs.setdefault(host, []).append(
                {"wall_s": int(wall_ms) / 1000, "checks_s": float(checks_s), "exit": int(code)}
            )
    return runs


def here(expectations: str, repeat: int) -> list[dict[str, float]]:
    """The same zipapp on this machine's python3 -I -S (its real CPU; no RDMA here, so it fails)."""
    sys.path.insert(0, str(REPO / "src"))
    from rdmaprov.nodecheck import zipapp

    with tempfile.TemporaryDirectory() as folder:
        app = Path(folder) / "node-check.pyz"
        app.write_bytes(zipapp.build())
        state = Path(folder) / "state"
        out = []
        for _ in range(repeat):
            started = time.monotonic()
            proc = subprocess.run(
                ["python3", "-I", "-S", str(app), "--expectations", expectations, "--state-dir", str(state), "--json"],
                capture_output=True,
                text=True,
            )
            wall = time.monotonic() - started
            out.append({"wall_s": wall, "checks_s": json.loads(proc.stdout)["duration_s"], "exit": proc.returncode})
        return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--inventory", help="a running lab's inventory (default: boot a 2-VM lab)")
    args = parser.parse_args()
    lab_dir = Path(REPO / "bench" / ".lab-node-check")
    if not args.inventory:
        lab_up(lab_dir, "vm", 2, "10.79.43.0/24", "rdbenchnc")
    base = Path(args.inventory or lab_dir / "inventory.yaml")
    try:
        with tempfile.TemporaryDirectory() as folder:
            inventory = _health_check_inventory(base, Path(folder) / "health-check.yaml")
            applied = measure(rdmaprov("apply", str(inventory), "--skip-gates", "--json"))
            result = run_json(applied)
            assert result["exit_code"] in (0, 2), [(h["name"], h["error"]) for h in result["hosts"]]
            vms = on_nodes(inventory, args.repeat)
            expectations = Path(folder) / "node-check.json"
            data = yaml.safe_load(inventory.read_text())
            first = next(iter(data["groups"]["nodes"]["hosts"]))
            expectations.write_text(_ssh(data, first, "cat /etc/rdmaprov/node-check.json"))
            local = here(str(expectations), args.repeat)
        rows = []
        for where, runs in [*((f"{h} (TCG VM)", r) for h, r in vms.items()), ("this machine (native)", local)]:
            walls = [r["wall_s"] for r in runs]
            checks = [r["checks_s"] for r in runs]
            rows.append([where, f"{median(walls):.2f}", f"{max(walls):.2f}", f"{median(checks):.2f}", runs[0]["exit"]])
        print(table(["where", "wall s (median)", "wall s (max)", "report+checks s (median)", "exit"], rows))
        worst = max(r["wall_s"] for runs in [*vms.values(), local] for r in runs)
        print(f"budget {BUDGET_S:g} s: {'met' if worst <= BUDGET_S else 'MISSED'} (slowest run {worst:.2f} s)")
        path = write_result("node_check", {"vms": vms, "here": local, "budget_s": BUDGET_S, "worst_s": worst})
        print(f"wrote {path}")
    finally:
        if not args.inventory:
            lab_down(lab_dir)


if __name__ == "__main__":
    main()
