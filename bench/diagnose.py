"""Benchmark: `rdmaprov diagnose` on the lab's SoftRoCE VMs (ib_write_bw pairs over rxe) and on
32 containers (no RDMA in the host kernel: the pair test is the all_reduce gate's CPU probe over
a pair, mpirun over TCP), healthy and with the last node slowed down on the way out (on the VMs
only RoCE's UDP port 4791, policed; on the containers the whole link, shaped: see throttle()).

Reports the diagnose time as rounds × one pair test: each round's wall time (its longest test,
when the pairs of a round run at once) against the sum of its tests (what testing them one after
another would cost), from the `duration_s` each test carries. Writes bench/results/diagnose.json.
Needs root (the lab).

    .venv/bin/python bench/diagnose.py [--vms 3] [--containers 32] [--skip-vms] [--skip-containers]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

import yaml
from common import REPO, lab_down, lab_up, measure, rdmaprov, run_json, table, write_result

# The container lab has no RDMA: the stack the CPU probe needs (MPI, the probe itself).
CONTAINER_TAGS = "package_sources,rdma_userspace,openmpi,ssh_trust,limits,nccl_env,gate_tools"


def throttle(dev: str, rate: str, kind: str) -> tuple[str, str]:
    """Commands that slow what a node sends to `rate`, and that undo it.

    VMs (their own kernel): RoCE v2 only (UDP 4791, what ib_write_bw measures), policed on egress
    with clsact, which holds no queue: an rxe packet queued in an egress qdisc when its QP is
    destroyed can crash the lab VMs' kernel, and SSH to the node keeps its speed. Containers share
    this machine's kernel, which has no police action (CONFIG_NET_ACT_POLICE is not set here):
    a token bucket (tbf) shapes the whole link instead; at the rates used SSH stays usable."""
    if kind == "vm":
        match = "protocol ip u32 match ip protocol 17 0xff match ip dport 4791 0xffff"
        return (
            f"tc qdisc replace dev {dev} clsact && "
            f"tc filter replace dev {dev} egress {match} action police rate {rate} burst 32k drop",
            f"tc qdisc del dev {dev} clsact",
        )
    return f"tc qdisc replace dev {dev} root tbf rate {rate} burst 32k latency 50ms", f"tc qdisc del dev {dev} root"


def neighbour_count(nodes: int) -> int:
    """Pairs in round 1 (health/diagnose.neighbour_pairs): ⌈N/2⌉."""
    return (nodes + 1) // 2


def rounds_of(result: dict, nodes: int) -> list[dict]:
    """Each round's tests: round 1 is the ⌈N/2⌉ neighbour pairs, round 2 the re-tests (the rail
    and node gates on the suspects come after and are not pair rounds)."""
    pairs = [t for t in result["tests"] if t["gate"] in ("ib_write_bw", "all_reduce")]
    first = neighbour_count(nodes)
    out = []
    for number, tests in ((1, pairs[:first]), (2, pairs[first:])):
        if not tests:
            continue
        durations = [t["duration_s"] or 0.0 for t in tests]
        out.append(
            {
                "round": number,
                "tests": len(tests),
                "longest_s": round(max(durations), 2),
                "sum_s": round(sum(durations), 2),
                "failed": sum(not t["passed"] for t in tests),
            }
        )
    return out


def ssh(lab_dir: Path, node: str, command: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        rdmaprov("lab", "--dir", str(lab_dir), "ssh", node, "--", command),
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )


def diagnose_once(inventory: str, nodes: int) -> tuple[dict, dict]:
    m = measure(rdmaprov("diagnose", inventory, "--json"))
    result = run_json(m)
    summary = {
        "wall_s": round(m.wall_s, 2),
        "exit_code": m.code,
        "rounds": result["rounds"],
        "suspects": list(result["suspects"]),
        "cleared": len(result["cleared"]),
        "per_round": rounds_of(result, nodes),
        "other_tests": [
            (t["gate"], t["subject"], t["duration_s"]) for t in result["tests"] if t["gate"] in ("rail", "node")
        ],
    }
    return summary, result


def with_threshold(inventory: str, busbw_gbs: float) -> str:
    """The container lab's inventory with an all_reduce threshold a policed node cannot reach, and
    no retry (a failing pair is tested once, as a passing one)."""
    data = yaml.safe_load(open(inventory))
    data["cluster"]["gates"]["all_reduce"].update({"min_busbw_gbs": round(busbw_gbs, 6), "retries": 0})
    path = Path(inventory).with_name("bench-threshold.yaml")
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return str(path)


def scenario(lab_dir: Path, kind: str, nodes: int, subnet: str, bridge: str) -> dict:
    """Boot, converge, diagnose healthy, then with the last node slowed down; take the lab down."""
    dev = "eth0" if kind == "vm" else "host0"
    lab_up(lab_dir, kind, nodes, subnet, bridge)
    inventory = str(lab_dir / "inventory.yaml")
    try:
        tags = ["--tags", CONTAINER_TAGS] if kind == "container" else []
        converge = measure(rdmaprov("apply", inventory, *tags, "--skip-verify", "--json"))
        assert converge.code in (0, 2), f"the {kind} lab did not converge:\n{converge.stdout[-3000:]}"
        print(f"{kind}: converged {nodes} nodes in {converge.wall_s:.0f} s")
        healthy, raw = diagnose_once(inventory, nodes)
        assert healthy["exit_code"] == 0, raw
        if kind == "vm":
            # ib_write_bw's floor in the lab is 0.01 Gb/s: 200 kbit/s is well under it
            rate, policed = "200kbit", inventory
        else:
            # the CPU probe's floor in the container lab is 0.0001 GB/s, which any link clears:
            # hold every pair to a quarter of the slowest healthy pair's busbw, and shape the last
            # node to an eighth of it (slowest / 8 GB/s is `slowest` Gbit/s)
            slowest = min(t["measured"] for t in raw["tests"] if t["gate"] == "all_reduce")
            policed = with_threshold(inventory, slowest / 4)
            rate = f"{max(int(slowest * 1000), 1)}mbit"
        slow = f"node{nodes}"
        slow_down, undo = throttle(dev, rate, kind)
        done = ssh(lab_dir, slow, slow_down)
        assert done.returncode == 0, f"could not slow {slow} down: {done.stderr or done.stdout}"
        try:
            throttled, _ = diagnose_once(policed, nodes)
        finally:
            if ssh(lab_dir, slow, undo).returncode != 0:
                print(f"warning: could not take the throttle off {slow}", file=sys.stderr)
        return {
            "nodes": nodes,
            "converge_s": round(converge.wall_s, 1),
            "policed": {"node": slow, "rate": rate},
            "healthy": healthy,
            "throttled": throttled,
        }
    finally:
        lab_down(lab_dir)


def report(name: str, data: dict) -> list[list]:
    rows = []
    for case in ("healthy", "throttled"):
        run = data[case]
        for r in run["per_round"]:
            rows.append(
                [
                    name,
                    case,
                    run["wall_s"],
                    run["rounds"],
                    r["round"],
                    r["tests"],
                    r["longest_s"],
                    r["sum_s"],
                    ",".join(run["suspects"]) or "-",
                ]
            )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--vms", type=int, default=3)
    parser.add_argument("--containers", type=int, default=32)
    parser.add_argument("--skip-vms", action="store_true")
    parser.add_argument("--skip-containers", action="store_true")
    args = parser.parse_args()
    doc: dict = {}
    if not args.skip_vms:
        doc["vms"] = scenario(REPO / "bench" / ".lab-diagnose-vm", "vm", args.vms, "10.79.3.0/24", "rdbdiag0")
        write_result("diagnose", doc)  # kept should the container lab fail
    if not args.skip_containers:
        doc["containers"] = scenario(
            REPO / "bench" / ".lab-diagnose-ct", "container", args.containers, "10.79.4.0/24", "rdbdiag1"
        )
    rows = [row for name, data in doc.items() for row in report(name, data)]
    headers = ["lab", "case", "diagnose wall s", "rounds", "round", "pair tests", "longest s", "sum s", "suspects"]
    print(table(headers, rows))
    print(f"wrote {write_result('diagnose', doc)}")


if __name__ == "__main__":
    main()
