"""Benchmark: one built archive shipped by Slurm's sbcast against the SSH tree, on the VM lab.

The lab's two cluster VMs (SoftRoCE, QEMU TCG) run Slurm from the lab mirror: the script applies
the lab inventory with `cluster.slurm` (node1 the controller) once, then alternates two inventories
that differ only in `cluster.slurm`: each run declares a new version of a build that packs `--mb`
MB of random bytes (gzip cannot shrink it), so node1 builds it, the control machine fetches it and
node2 receives it, by sbcast (Slurm declared) or from node1 over SSH (not declared). Measured:
the whole `apply --tags builds` as a user sees it, build and fetch included (the same for both),
and what each node's install step said it did. Needs root and a lab:

    .venv/bin/python -m tests.support.keep_lab up /tmp/keptlab
    .venv/bin/python bench/ship_by_slurm.py --lab /tmp/keptlab/lab-vm [--repeat 2] [--mb 64]
"""

from __future__ import annotations

import argparse
import subprocess
import tempfile
import time
from pathlib import Path

import yaml
from common import measure, median, rdmaprov, run_json, table, write_result

MEMBERS = ("node1", "node2")


def inventory(lab: Path, work: Path, slurm: bool, build: dict | None) -> Path:
    """The lab's cluster (node1, node2), with Slurm declared or not, with `build` declared."""
    data = yaml.safe_load((lab / "inventory.yaml").read_text())
    for group in data["groups"].values():
        group["hosts"] = {name: spec for name, spec in group["hosts"].items() if name in MEMBERS}
    if slurm:
        data["cluster"]["slurm"] = {"enabled": True, "controller": "node1"}
    if build:
        data.setdefault("defaults", {})["builds"] = [build]
    path = work / f"{'slurm' if slurm else 'ssh'}.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lab", required=True, type=Path, help="a lab directory (keep_lab's lab-vm)")
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--mb", type=int, default=64, help="archive size in MiB (random, incompressible)")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="rdmaprov-sbcast-"))
    source = work / "blob.tar.gz"
    (work / "blob").mkdir()
    (work / "blob" / "README").write_text("the build writes its payload itself\n")
    subprocess.run(["tar", "-C", str(work), "-czf", str(source), "blob"], check=True)
    slurm = run_json(measure(rdmaprov("apply", str(inventory(args.lab, work, True, None)), "--skip-gates", "--json")))
    assert slurm["exit_code"] in (0, 2), [(h["name"], h["error"]) for h in slurm["hosts"]]
    runs: dict[str, list[dict]] = {"sbcast": [], "ssh": []}
    for _ in range(args.repeat):
        for way in runs:
            build = {
                "name": "blob",
                "version": f"{way}-{time.time_ns()}",
                "source": {"kind": "file", "path": str(source)},
                "build": f'mkdir -p "$STAGE" && head -c {args.mb}M /dev/urandom > "$STAGE/blob"',
            }
            path = inventory(args.lab, work, way == "sbcast", build)
            m = measure(rdmaprov("apply", str(path), "--tags", "builds", "--skip-verify", "--skip-gates", "--json"))
            result = run_json(m)
            said = [
                c
                for h in result["hosts"]
                for o in h["ops"]
                if o["name"].endswith("installed")
                for c in o["commands"]
                if c.startswith(("send ", "receive "))
            ]
            warnings = [w for h in result["hosts"] for w in h["warnings"]]
            assert result["exit_code"] == 2 and not warnings, (result["exit_code"], warnings)
            runs[way].append({"wall_s": round(m.wall_s, 1), "cpu_s": round(m.cpu_s, 2), "shipping": said})
            print(way, runs[way][-1], flush=True)
    rows = []
    for way, samples in runs.items():
        walls = [r["wall_s"] for r in samples]
        rows.append([way, " ".join(f"{w:.1f}" for w in walls), f"{median(walls):.1f}"])
    print(table(["shipped by", "wall s (runs)", "median"], rows))
    path = write_result(
        "ship_by_slurm", {"lab": "2 TCG VMs (SoftRoCE), Slurm from the lab mirror", "mb": args.mb, "runs": runs}
    )
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
