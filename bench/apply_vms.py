"""Benchmark: first apply and no-op re-apply of the full node stack on 2 lab VMs, and a check.

Prints times and changes (the re-apply must make none) and the re-apply/check ratio; writes
bench/results/apply_vms.json. Needs root and QEMU (the lab); the first apply installs OpenMPI
and compilers under TCG emulation, which takes minutes.

    .venv/bin/python bench/apply_vms.py [--repeat 3]
"""

from __future__ import annotations

import argparse
from pathlib import Path

from common import REPO, lab_down, lab_up, measure, median, rdmaprov, run_json, table, write_result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    lab_dir = Path(REPO / "bench" / ".lab-vms")
    lab_up(lab_dir, "vm", 2, "10.79.2.0/24", "rdbench2")
    inventory = str(lab_dir / "inventory.yaml")
    try:
        first = measure(rdmaprov("apply", inventory, "--skip-verify", "--json"))
        first_result = run_json(first)
        changes = sum(h["changed"] for h in first_result["hosts"])
        reapply, check = [], []
        for _ in range(args.repeat):
            m = measure(rdmaprov("apply", inventory, "--skip-verify", "--json"))
            result = run_json(m)
            assert result["exit_code"] == 0, (
                f"re-apply changed something: {[(h['name'], h['changed']) for h in result['hosts']]}"
            )
            reapply.append({"wall_s": round(m.wall_s, 2), "round_trips": [h["round_trips"] for h in result["hosts"]]})
            c = measure(rdmaprov("check", inventory, "--skip-verify", "--json"))
            assert run_json(c)["exit_code"] == 0
            check.append(round(c.wall_s, 2))
        again = median([r["wall_s"] for r in reapply])
        rows = [
            ["first apply", f"{first.wall_s:.1f}", changes],
            ["no-op re-apply (median)", f"{again:.2f}", 0],
            ["check (median)", f"{median(check):.2f}", "-"],
        ]
        print(table(["run", "wall s", "changes"], rows))
        print(f"re-apply / check: {again / median(check):.2f}x (goal <= 2x)")
        path = write_result(
            "apply_vms",
            {
                "first_apply_s": round(first.wall_s, 1),
                "first_apply_changes": changes,
                "reapply": reapply,
                "check_s": check,
                "ratio_reapply_to_check": round(again / median(check), 3),
            },
        )
        print(f"wrote {path}")
    finally:
        lab_down(lab_dir)


if __name__ == "__main__":
    main()
