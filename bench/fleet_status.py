"""`rdmaprov status`'s work on the control machine for a large fleet: one `scontrol -o show node`
answer of 2,000 and 10,000 nodes (tests/support/slurm_fleet.py: the lab's real Slurm 22.05.8 line
with each node's own name, state and reason) parsed, each inventory host classified, the JSON and
the table made. Not included: scontrol's own time on the controller and the SSH transfer of its
answer (about 0.85 KiB a node). Needs no root and no lab. Goal (issue 34): 10,000 nodes in <= 5 s.
"""

from __future__ import annotations

import argparse
import io
import json
import resource
import sys
import tempfile
import time
from pathlib import Path

from common import REPO, median, table, write_result

sys.path.insert(0, str(REPO))
from rich.console import Console  # noqa: E402

from rdmaprov.inventory import load_inventory  # noqa: E402
from rdmaprov.report.status import print_status  # noqa: E402
from rdmaprov.slurm.status import FleetStatus  # noqa: E402
from rdmaprov.workflows.status import read  # noqa: E402
from tests.support.slurm_fleet import scontrol_nodes  # noqa: E402


def inventory_of(size: int, folder: Path):
    hosts = "".join(
        f"  node{i}: {{address: 10.{i // 62500}.{i // 250 % 250}.{i % 250 + 1}}}\n" for i in range(1, size + 1)
    )
    path = folder / f"fleet{size}.yaml"
    path.write_text(f"cluster:\n  name: big\n  slurm: {{enabled: true, controller: node1}}\nhosts:\n{hosts}")
    return load_inventory(path, require_files=False)


def once(size: int, answer: str, inventory) -> float:
    started = time.perf_counter()
    result = FleetStatus(inventory.name, "node1", "")
    read(result, f"2026-11-23T21:40:00\n{answer}", inventory, list(inventory.hosts))
    json.dumps(result.to_json())
    print_status(result, Console(file=io.StringIO(), width=160))
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    rows, samples = [], []
    with tempfile.TemporaryDirectory() as folder:
        for size in (2_000, 10_000):
            answer = scontrol_nodes(size)
            started = time.perf_counter()
            inventory = inventory_of(size, Path(folder))
            load = time.perf_counter() - started
            times = [once(size, answer, inventory) for _ in range(args.repeat)]
            rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
            samples.append(
                {"nodes": size, "answer_bytes": len(answer), "inventory_s": load, "seconds": times, "peak_rss_mib": rss}
            )
            rows.append([size, f"{len(answer) / 2**20:.1f}", f"{load:.2f}", f"{median(times):.2f}", f"{rss:.0f}"])
    print(table(["nodes", "answer MiB", "inventory load s", "status s (median)", "peak RSS MiB"], rows))
    write_result("fleet_status", {"samples": samples})


if __name__ == "__main__":
    main()
