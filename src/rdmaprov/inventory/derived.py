"""What the deploys, verify and the gates derive from a node's settings alone: the NCCL
environment and GID index, the wanted MTUs, the MPI prefix.

Pure functions over the merged settings (no pyinfra, no facts), so that `validate` derives them
too and finds a setting they refuse before anything connects.
"""

from __future__ import annotations

from typing import Any


# What each fabric needs when the inventory says nothing (field manuals, DESIGN.md §3).
_FABRIC_HCA = {"erdma": "erdma", "softroce": "rxe"}
_FABRIC_GID_INDEX = {"roce": 3, "erdma": 1, "softroce": 1}


def spec_matches(spec: str, device: str) -> bool:
    """NCCL_IB_HCA semantics: '=name' is exact, otherwise a prefix; ':port' suffixes are ignored."""
    name = spec.split(":", 1)[0]
    if name.startswith("="):
        return device == name[1:]
    return device.startswith(name)


def hca_specs(hca: str) -> list[str]:
    """'=a,b' → ['=a', '=b'] (a leading '=' makes every entry exact); 'mlx5' → ['mlx5']."""
    exact = hca.startswith("=")
    return [("=" + s if exact else s) for s in hca.lstrip("=").split(",") if s]


def gid_index(node: dict[str, Any]) -> int | None:
    """The RoCE GID index NCCL (and the gates) use: nccl.env, else rdma.gid_index, else the fabric's."""
    declared = ((node.get("nccl") or {}).get("env") or {}).get("NCCL_IB_GID_INDEX")
    if declared is not None:
        return int(declared)
    return (node.get("rdma") or {}).get("gid_index", _FABRIC_GID_INDEX.get(node.get("fabric") or ""))


def nccl_environment(node: dict[str, Any]) -> tuple[dict[str, str], list[str]]:
    """The NCCL variables for one node, and warnings about what had to be corrected.

    Storage HCAs must never carry NCCL traffic: a prefix that would match one is replaced by the
    exact list of compute devices, and the replacement is reported.
    """
    rdma = node.get("rdma", {})
    fabric = node.get("fabric")
    declared = dict((node.get("nccl") or {}).get("env") or {})
    env = {key: str(value) for key, value in declared.items()}
    warnings: list[str] = []
    storage = rdma.get("storage_hcas") or []
    devices = [d for d in (rdma.get("devices") or []) if d not in storage]

    if "NCCL_IB_HCA" not in env:
        if fabric in _FABRIC_HCA:
            env["NCCL_IB_HCA"] = _FABRIC_HCA[fabric]
        elif devices:
            env["NCCL_IB_HCA"] = "=" + ",".join(devices)
    hca = env.get("NCCL_IB_HCA", "")
    if hca and not hca.startswith("^"):
        specs = hca_specs(hca)
        hit = [s for s in storage if any(spec_matches(spec, s) for spec in specs)]
        if hit:
            if not devices:
                raise ValueError(
                    f"NCCL_IB_HCA={hca} matches storage HCA(s) {', '.join(hit)} and rdma.devices is empty, "
                    "so the compute HCAs cannot be listed instead; declare rdma.devices or give NCCL_IB_HCA as =dev1,dev2"
                )
            env["NCCL_IB_HCA"] = "=" + ",".join(d for d in devices if any(spec_matches(spec, d) for spec in specs))
            warnings.append(f"NCCL_IB_HCA={hca} matched storage HCA(s) {', '.join(hit)}; wrote {env['NCCL_IB_HCA']} instead")
    gid = gid_index(node)
    if gid is not None:
        env["NCCL_IB_GID_INDEX"] = str(gid)
    return dict(sorted(env.items())), warnings



def erdma_mtu(node: dict[str, Any]) -> int:
    return 8500 if (node.get("erdma") or {}).get("jumbo_frames", True) else 1400


def wanted_mtus(node: dict[str, Any]) -> dict[str, int]:
    """{netdev: mtu} for the node: the declared ones, and the eRDMA rule on the RDMA netdevs."""
    mtus = {name: int(value) for name, value in (node.get("mtu") or {}).items()}
    if node.get("fabric") == "erdma":
        rule = erdma_mtu(node)
        jumbo = "with" if rule == 8500 else "without"
        for netdev in (node.get("rdma") or {}).get("netdevs") or []:
            declared = mtus.setdefault(netdev, rule)
            if declared != rule:
                raise ValueError(
                    f"mtu.{netdev} is {declared} but eRDMA {jumbo} jumbo frames needs {rule} "
                    f"(a wrong MTU corrupts data); fix mtu.{netdev} or erdma.jumbo_frames"
                )
    return dict(sorted(mtus.items()))



def mpi_prefix(node: dict[str, Any]) -> str | None:
    mpi = node.get("mpi") or {}
    if mpi.get("source") != "prefix":
        return None
    if not mpi.get("prefix"):
        raise ValueError("mpi.source is prefix but mpi.prefix is not set; give the install prefix (it has bin/mpirun)")
    return mpi["prefix"].rstrip("/")
