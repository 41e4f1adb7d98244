"""Profile: which functions' control-side CPU grows faster than the host count.

Runs one command (default: check) under py-spy, in one process (RDMAPROV_SHARDS=1), on two
sizes of the same real SSH farm as host_scaling.py, then lists the functions whose own CPU per
host grew the most from the small size to the large one: a function whose cost per host is flat
is linear in the cluster; one whose cost per host grows with the size is where n² lives. Writes
bench/results/NAME.json with both profiles' top functions. Needs root; installs py-spy from the
Python package index into bench/.venv-py-spy the first time.

A sampler, not cProfile: cProfile times a function by the clock, and under pyinfra's gevent a
function that yields (a socket send, a lock) is charged with whatever the other greenlets ran
meanwhile. py-spy samples the thread that holds the GIL (--gil), so a function's samples are its
own CPU (seconds = samples / rate). Without --gil it took the lock waits of gevent's pool
threads for work: 19 s of samples in a 3.3 s run of apply on 32 hosts. With it a run's samples
still come to more than its CPU as the kernel counts it (5.4 s against 3.3 s on 32 hosts, 2.2
against 2.1 s on one): read them as shares of a run, not as seconds to add up.

    .venv/bin/python bench/profile_hosts.py [--sizes 64,256] [--command check] [--top 25] [--twins]

With --twins the hosts are host_scaling.py's DGX-shaped twins, so that `verify` parses and judges
node reports of a real GPU node's size.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tempfile
from pathlib import Path

from common import REPO, tool_venv, write_result
from host_scaling import CONNECT_TIMEOUT, DEFAULTS, TAGS, command_line, twins_in

sys.path.insert(0, str(REPO))
from tests.support.sshhosts import SSHHostFarm  # noqa: E402
from tests.support.twin import TWIN_DEFAULTS  # noqa: E402

PYTHON = str(REPO / ".venv" / "bin" / "python")


RATE = 200  # samples per second


def own_cpu(raw: str, rate: int = RATE) -> dict[str, float]:
    """Own CPU seconds per function, by "file:line(name)", from py-spy's raw output (one stack a
    line, outermost frame first, each frame "name (path:line)", then the sample count): a
    stack's samples belong to its innermost frame."""
    found: dict[str, float] = {}
    for line in raw.splitlines():
        stack, _, count = line.rpartition(" ")
        frame = re.fullmatch(r"(.*) \((.*):(\d+)\)", stack.rpartition(";")[2])
        if frame and count.isdigit():
            where = f"{Path(frame.group(2)).name}:{frame.group(3)}({frame.group(1)})"
            found[where] = found.get(where, 0.0) + int(count) / rate
    return found


def profiled(command: str, inventory: str, out: Path) -> dict[str, float]:
    """Own CPU seconds per function of one run of `command`, sampled by py-spy."""
    words = command_line(command, inventory)
    spy = [str(tool_venv("py-spy", "py-spy", "py-spy")), "record", "-r", str(RATE), "-f", "raw", "--function", "--gil"]
    args = [*spy, "-o", str(out), "--", PYTHON, "-m", "rdmaprov", *words[words.index(command) :]]
    subprocess.run(args, env={"PATH": "/usr/bin:/bin", "RDMAPROV_SHARDS": "1"}, capture_output=True, check=False)
    return own_cpu(out.read_text())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="64,256")
    parser.add_argument("--command", default="check")
    parser.add_argument("--top", type=int, default=25)
    parser.add_argument("--name", default="profile_hosts")
    parser.add_argument("--twins", action="store_true", help="DGX-shaped twin hosts (real-size node reports)")
    args = parser.parse_args()
    small, large = sorted(int(n) for n in args.sizes.split(","))
    work = Path(tempfile.mkdtemp(prefix="rdmaprov-profile-"))
    farm = SSHHostFarm(large, prepare=twins_in(work) if args.twins else None)
    defaults = TWIN_DEFAULTS if args.twins else DEFAULTS
    farm.start()
    try:
        times = {}
        for size in (small, large):
            inventory = str(farm.inventory(work / f"hosts{size}.yaml", defaults, farm.hosts[:size], CONNECT_TIMEOUT))
            converge = [PYTHON, "-m", "rdmaprov", "apply", inventory, "--tags", TAGS, "--skip-verify", "--json"]
            subprocess.run(converge, capture_output=True, check=False)
            times[size] = profiled(args.command, inventory, work / f"{size}.txt")
    finally:
        farm.stop()
    per_host = {size: {k: v / size for k, v in found.items()} for size, found in times.items()}
    growth = sorted(
        ((per_host[large].get(k, 0.0) - per_host[small].get(k, 0.0), k) for k in per_host[large]), reverse=True
    )
    total = {size: sum(found.values()) for size, found in times.items()}
    print(f"{args.command}: CPU {total[small]:.2f} s on {small} hosts, {total[large]:.2f} s on {large}")
    print(f"per host: {total[small] / small * 1000:.1f} ms -> {total[large] / large * 1000:.1f} ms")
    print(f"{'growth ms/host':>15} {'ms/host @' + str(small):>14} {'ms/host @' + str(large):>14}  function")
    for grown, key in growth[: args.top]:
        before, after = per_host[small].get(key, 0) * 1000, per_host[large][key] * 1000
        print(f"{grown * 1000:15.3f} {before:14.3f} {after:14.3f}  {key}")
    top = {size: dict(sorted(found.items(), key=lambda kv: -kv[1])[: args.top]) for size, found in times.items()}
    write_result(args.name, {"command": args.command, "sizes": [small, large], "cpu_s": total, "top": top})


if __name__ == "__main__":
    main()
