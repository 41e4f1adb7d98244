"""`rdmaprov validate` on generated inventories of 1, 2,000 and 10,000 hosts: wall time and peak RSS.

The inventories are shaped like inventories/prod.yaml grown large: a few groups with node vars,
every host with its address and some host vars of its own, a shared SSH key. Needs no root and
no lab. Goal (issue 15): 10,000 hosts in <= 2 s.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from common import measure, median, rdmaprov, table, write_result

RACK = 32  # hosts per group (a rack)


def inventory_text(hosts: int, key: Path) -> str:
    """A valid inventory of `hosts` hosts in racks of 32."""
    lines = [
        "cluster:",
        "  name: big",
        f"  ssh: {{user: root, key: {key}, connect_timeout: 10}}",
        "  gates: {all_reduce: {min_bytes: 1M, max_bytes: 8G}}",
        "defaults:",
        "  fabric: infiniband",
        "  netns_mode: exclusive",
        "  rdma: {devices: [mlx5_0, mlx5_1, mlx5_2, mlx5_3], storage_hcas: [mlx5_8], rate_gbps: 200}",
        "  gpu: {count: 8, driver_version: '535.129.03', cuda_version: '12.2', arch: sm_80}",
        "  nccl: {version: 2.18.3-1, env: {NCCL_DEBUG: WARN, NCCL_SOCKET_IFNAME: eth0}}",
        "groups:",
    ]
    for rack in range((hosts + RACK - 1) // RACK):
        lines += [f"  rack{rack}:", f"    vars: {{tags: [rack{rack}], mtu: {{eth0: 9000}}}}", "    hosts:"]
        for index in range(rack * RACK, min(hosts, (rack + 1) * RACK)):
            lines.append(
                f"      gpu{index}: "
                f"{{address: 10.{index // 65536}.{index // 256 % 256}.{index % 256}, vars: {{tags: [node{index}]}}}}"
            )
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--sizes", default="1,2000,10000")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    rows, samples = [], {}
    with tempfile.TemporaryDirectory() as tmp:
        key = Path(tmp) / "id"
        key.write_text(
            "-----BEGIN OPENSSH PRIVATE KEY-----\nnot used: validate only reads the header\n-----END OPENSSH PRIVATE "
            "KEY-----\n"
        )
        key.chmod(0o600)
        for size in sizes:
            path = Path(tmp) / f"hosts-{size}.yaml"
            path.write_text(inventory_text(size, key))
            runs = [measure(rdmaprov("validate", str(path))) for _ in range(args.repeat)]
            if any(run.code != 0 for run in runs):
                raise SystemExit(f"validate failed on {size} hosts:\n{runs[0].stderr[-2000:]}")
            wall = median([run.wall_s for run in runs])
            rss = max(run.peak_rss_mib for run in runs)
            samples[size] = {
                "wall_s": [round(r.wall_s, 3) for r in runs],
                "peak_rss_mib": [round(r.peak_rss_mib, 1) for r in runs],
                "bytes": path.stat().st_size,
            }
            rows.append(
                [
                    size,
                    f"{path.stat().st_size / 1024:.0f} KiB",
                    f"{wall:.2f}",
                    f"{1000 * wall / size:.3f}",
                    f"{rss:.0f}",
                ]
            )
    print(table(["hosts", "file", "wall s (median)", "ms/host", "peak RSS MiB"], rows))
    print(f"wrote {write_result('validate_scaling', {'repeat': args.repeat, 'samples': samples})}")


if __name__ == "__main__":
    main()
