"""The gate settings of a SoftRoCE lab, in one place for every inventory a lab gets (`lab up`,
`lab vagrant-inventory`, inventories/lab.yaml): rxe under TCG emulation moves ~0.1 Gb/s and its
p99 latency is milliseconds, so the fabric's defaults (fractions of the port rate; no SoftRoCE
latency default at all) would fail every healthy lab. A copy per inventory drifted once: the
Vagrant inventory lacked the rail and latency settings the gates had come to need.
"""

from __future__ import annotations

# p99 of a 2-byte ib_write_lat over rxe0 on two TCG VMs: 4.5-11 ms, up to 34 ms while other VMs
# loaded the same cores (tests/fixtures/lab/ib_write_lat_*): 100 ms fails only a stuck link.
LAB_P99_US = 100000
# Healthy runs a minute apart on the 2-VM lab (bench/RESULTS.md, 2026-11-25): ib_write_bw
# 0.099-0.17 Gb/s, all_reduce 0.039-0.065 GB/s, p99 2.5-5 ms (22 ms seen while other VMs ran).
# Against its own past a lab part is flagged only when it lost more than 60 % of its bandwidth or
# its p99 grew more than tenfold: the fabric defaults (5 %, 25 %) warn on every other healthy run.
LAB_BASELINE = {"max_drop": 0.6, "max_latency_rise": 10}


def softroce_gates(launcher_ifname: str, rdma: bool = True) -> dict[str, object]:
    """cluster.gates for a lab whose nodes talk over `launcher_ifname`; without `rdma` (containers,
    no rxe in their kernel) only the all_reduce gate's CPU probe runs."""
    return {
        "ib_write_bw": {"enabled": rdma, "min_gbps": 0.01, "duration_s": 3},
        # 64 KiB messages as ib_write_bw: 1 MiB ones gain nothing on emulated SoftRoCE
        "rail": {"enabled": rdma, "min_gbps": 0.01, "duration_s": 3, "size": 65536},
        # 500 round trips take 2-5 s on a quiet lab; with other VMs on the same cores 1,000 ran
        # past the default 60 s (CI's Vagrant test), so the bound is the stuck link's, not load's
        "latency": {"enabled": rdma, "max_p99_us": LAB_P99_US, "iterations": 500, "timeout_s": 180},
        # a healthy sweep takes ~10 s on the lab; its threshold is too low to bound it
        "all_reduce": {
            "min_busbw_gbs": 0.0001,
            "max_bytes": "4M",
            "timeout_s": 300,
            "launcher_ifname": launcher_ifname,
        },
        "baseline": dict(LAB_BASELINE),
    }
