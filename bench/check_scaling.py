"""Benchmark: `rdmaprov check` of the container node stack on 1, 8 and 32 converged lab containers.

Prints wall time, SSH round trips per host (counted on each host's connection) and the peak
memory of the rdmaprov process; writes bench/results/check_scaling.json. Needs root (the lab).

    .venv/bin/python bench/check_scaling.py [--sizes 1,8,32] [--repeat 3] [--keep]
"""

from __future__ import annotations

import argparse
from pathlib import Path

from common import CONTAINER_TAGS, REPO, lab_down, lab_up, measure, median, rdmaprov, run_json, table, write_result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1,8,32")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--dir", default=str(REPO / "bench" / ".lab-containers"))
    parser.add_argument("--subnet", default="10.79.0.0/24")
    parser.add_argument(
        "--keep", action="store_true", help="leave the containers running (vs_ansible.py can reuse them)"
    )
    args = parser.parse_args()
    sizes = [int(n) for n in args.sizes.split(",")]
    lab_dir = Path(args.dir)
    lab_up(lab_dir, "container", max(sizes), args.subnet, "rdbench0")
    inventory = str(lab_dir / "inventory.yaml")
    try:
        converge = measure(rdmaprov("apply", inventory, "--tags", CONTAINER_TAGS, "--skip-verify", "--json"))
        again = run_json(measure(rdmaprov("apply", inventory, "--tags", CONTAINER_TAGS, "--skip-verify", "--json")))
        assert again["exit_code"] == 0, (
            f"the containers did not converge: {[(h['name'], h['status'], h['error']) for h in again['hosts']]}"
        )
        print(f"converged {max(sizes)} containers in {converge.wall_s:.1f}s; re-apply: 0 changes")
        rows, runs = [], {}
        for size in sizes:
            limit = ",".join(f"node{i}" for i in range(1, size + 1))
            samples = []
            for _ in range(args.repeat):
                m = measure(
                    rdmaprov("check", inventory, "--tags", CONTAINER_TAGS, "--skip-verify", "--limit", limit, "--json")
                )
                result = run_json(m)
                assert result["exit_code"] == 0, f"drift on a converged lab: {result['summary']}"
                samples.append(
                    {
                        "wall_s": round(m.wall_s, 3),
                        "peak_rss_mib": round(m.peak_rss_mib, 1),
                        "round_trips_max": max(h["round_trips"] for h in result["hosts"]),
                        "round_trips_mean": round(sum(h["round_trips"] for h in result["hosts"]) / size, 2),
                    }
                )
            runs[size] = samples
            rows.append(
                [
                    size,
                    f"{median([s['wall_s'] for s in samples]):.2f}",
                    max(s["round_trips_max"] for s in samples),
                    f"{max(s['peak_rss_mib'] for s in samples):.0f}",
                ]
            )
        base = median([s["wall_s"] for s in runs[sizes[0]]])
        top = median([s["wall_s"] for s in runs[sizes[-1]]])
        print(table(["hosts", "check wall s (median)", "round trips/host (max)", "peak RSS MiB"], rows))
        print(f"{sizes[-1]}-host / {sizes[0]}-host wall time: {top / base:.2f}x (goal <= 1.5x)")
        path = write_result(
            "check_scaling",
            {
                "tags": CONTAINER_TAGS,
                "repeat": args.repeat,
                "converge_s": round(converge.wall_s, 1),
                "runs": {str(k): v for k, v in runs.items()},
                "ratio_largest_to_smallest": round(top / base, 3),
            },
        )
        print(f"wrote {path}")
    finally:
        if not args.keep:
            lab_down(lab_dir)


if __name__ == "__main__":
    main()
