"""Benchmark: shipping one built archive (~100 MB) to 8, 32 and 64 real SSH hosts.

A build of the inventory's `builds:` packs 100 MB of random bytes (so gzip cannot shrink it), is
compiled once on node1 and installed everywhere. Each measured apply (`--tags builds`) starts
with node1 holding the archive and every other node without the build or a copy of it: it is
the shipping alone. Measured: wall time as a user sees it and the bytes the control machine sent
onto the hosts' bridge (the kernel's tx counter of the bridge's own interface: traffic between
hosts is switched from link to link and never counted there). With `--no-holder` node1 loses its
copy too, so the archive can only come from the control machine's cache. The hosts are sshd in
network namespaces (tests/support/sshhosts.py), writing to disk. Needs root.

    .venv/bin/python bench/ship_builds.py [--sizes 8,32,64] [--repeat 3] [--mb 100] [--name ship_builds]
        [--env PYTHONPATH=/other/checkout/src] [--no-holder]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

from common import REPO, load_1m, measure, median, rdmaprov, run_json, table, write_result

sys.path.insert(0, str(REPO))
from tests.support.sshhosts import SSHHostFarm  # noqa: E402

BUILD = """defaults:
  builds:
    - name: blob
      version: "1"
      source: {{kind: file, path: {source}}}
      build: 'mkdir -p "$STAGE/share" && head -c {size} /dev/urandom > "$STAGE/share/blob"'
"""


def sent(farm: SSHHostFarm) -> int:
    return int(Path(f"/sys/class/net/{farm.bridge}/statistics/tx_bytes").read_text())


def forget(farm: SSHHostFarm, hosts: list) -> None:
    """These hosts lose the installed build and their copy of the archive, all at once."""
    procs = [
        subprocess.Popen(
            [
                "ssh",
                "-i",
                str(farm.client_key),
                "-o",
                f"UserKnownHostsFile={farm.known_hosts}",
                "-o",
                "BatchMode=yes",
                f"root@{host.address}",
                "rm -rf /opt/blob /var/cache/rdmaprov/artifacts/blob-*",
            ]
        )
        for host in hosts
    ]
    for proc in procs:
        assert proc.wait() == 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="8,32,64")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--mb", type=int, default=100, help="archive size in MB (random, incompressible)")
    parser.add_argument("--name", default="ship_builds")
    parser.add_argument("--env", action="append", default=[], help="KEY=VALUE for rdmaprov (repeatable)")
    parser.add_argument("--no-holder", action="store_true", help="no node holds the archive: from the cache only")
    args = parser.parse_args()
    sizes = sorted(int(n) for n in args.sizes.split(","))
    work = Path(tempfile.mkdtemp(prefix="rdmaprov-ship-"))
    env = {"RDMAPROV_ARTIFACTS": str(work / "artifacts"), **dict(item.split("=", 1) for item in args.env)}
    source = work / "blob-1.tar.gz"
    (work / "blob-1").mkdir()
    (work / "blob-1" / "README").write_text("the build writes its payload itself\n")
    subprocess.run(["tar", "-C", str(work), "-czf", str(source), "blob-1"], check=True)
    farm = SSHHostFarm(max(sizes), disk=True)
    print(f"starting {max(sizes)} sshd hosts (load {load_1m():.2f})…", flush=True)
    rows, runs = [], {}
    try:
        farm.start()
        extra = BUILD.format(source=source, size=args.mb * 1000 * 1000)
        for size in sizes:
            inventory = str(farm.inventory(work / f"hosts{size}.yaml", extra, farm.hosts[:size], 60))
            first = run_json(
                measure(rdmaprov("apply", inventory, "--tags", "ssh_trust,builds", "--skip-verify", "--json"), env)
            )
            bad = [(h["name"], h["status"], h["error"]) for h in first["hosts"] if h["status"] == "failed"]
            assert not bad, bad[:3]
            samples = []
            for _ in range(args.repeat):
                forget(farm, farm.hosts[0 if args.no_holder else 1 : size])
                before = sent(farm)
                m = measure(rdmaprov("apply", inventory, "--tags", "builds", "--skip-verify", "--json"), env)
                control = sent(farm) - before
                result = run_json(m)
                changed = sum(h["status"] == "changed" for h in result["hosts"])
                expected = size if args.no_holder else size - 1
                assert result["exit_code"] == 2 and changed == expected, (
                    result["exit_code"],
                    [(h["name"], h["status"], h["error"]) for h in result["hosts"] if h["status"] != "changed"][:3],
                )
                samples.append(
                    {
                        "wall_s": round(m.wall_s, 2),
                        "control_mb": round(control / 1e6, 1),
                        "cpu_s": round(m.cpu_s, 2),
                        "load_1m": m.load_1m,
                        "warnings": sum(len(h["warnings"]) for h in result["hosts"]),
                    }
                )
                print(size, samples[-1], flush=True)
            runs[size] = samples
            rows.append(
                [
                    size,
                    f"{median([s['wall_s'] for s in samples]):.1f}",
                    f"{median([s['control_mb'] for s in samples]):.0f}",
                    f"{median([s['control_mb'] for s in samples]) / args.mb:.2f}",
                    " ".join(f"{s['load_1m']:.1f}" for s in samples),
                ]
            )
        print(table(["hosts", "ship wall s", "control MB sent", "archives' worth", "load"], rows))
        path = write_result(
            args.name,
            {
                "hosts": "sshd in network namespaces, writing to disk",
                "archive_mb": args.mb,
                "no_holder": args.no_holder,
                "repeat": args.repeat,
                "env": {k: v for k, v in env.items() if k != "RDMAPROV_ARTIFACTS"},
                "runs": runs,
            },
        )
        print(f"wrote {path}")
    finally:
        farm.stop()


if __name__ == "__main__":
    main()
