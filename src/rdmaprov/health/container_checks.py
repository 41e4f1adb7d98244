"""What a node's container tooling gives a training job, where rdmaprov configures tooling it
does not install: enroot (containers.enroot), which sites install from NVIDIA's packages and
pyxis runs for every Slurm job with --container-image. rdmaprov's mount file only helps where
that enroot reads /etc/enroot, and an RDMA job only runs where enroot's own settings leave the
container the node's /dev and network (parsers/enroot.py)."""

from __future__ import annotations

from rdmaprov.health.findings import Checker
from rdmaprov.inventory.containers import ENROOT_SYSCONF
from rdmaprov.parsers.enroot import EnrootState

_CHECK = "containers.enroot"
_WANTED = f"installed, reading {ENROOT_SYSCONF}, /dev and the network shared"
_TAKES = {
    "ENROOT_RESTRICT_DEV": "a /dev of its own without /dev/infiniband",
    "ENROOT_UNSHARE_IPC": "a /dev of its own without /dev/infiniband",
    "ENROOT_UNSHARE_NET": "a network of its own without the node's interfaces and RDMA devices",
}


def check_enroot(c: Checker, state: EnrootState | None) -> None:
    """One finding: enroot is there, reads the configuration rdmaprov writes, and gives its
    containers the node's RDMA devices and network."""
    if state is None:
        c.unknown("enroot", _CHECK, _WANTED, "not read (a node-check report from before containers.enroot)")
        return
    if not state.installed:
        c.check(
            "enroot",
            _CHECK,
            False,
            _WANTED,
            "not installed",
            "install NVIDIA's enroot and enroot+caps packages (from the site's mirror) and pyxis for Slurm: rdmaprov "
            "writes enroot's configuration but does not install it",
            apply_fixes=False,
        )
        return
    named = f"enroot {state.version or '(version unknown)'}"
    wanted_conf = f"{ENROOT_SYSCONF}/enroot.conf"
    if state.conf != wanted_conf:
        c.check(
            "enroot",
            _CHECK,
            False,
            _WANTED,
            f"{named} reads {state.conf or 'an unknown enroot.conf'}",
            f"this enroot does not read {ENROOT_SYSCONF}, so no container gets rdmaprov's mount of /etc/nccl.conf: "
            f"install one built with sysconfdir /etc (NVIDIA's packages are)",
            apply_fixes=False,
        )
        return
    taking = state.taking
    c.check(
        "enroot",
        _CHECK,
        not taking,
        _WANTED,
        "; ".join(f"{key} {s.value} in {s.file}" for key, s in taking.items())
        or f"{named}, /dev and the network shared",
        "turn "
        + ", ".join(f"{key} off in {s.file} (each container gets {_TAKES[key]})" for key, s in taking.items())
        + ": RDMA jobs in enroot containers need the node's devices and network (on ConnectX nodes, enroot's "
        "99-mellanox hook with MELLANOX_VISIBLE_DEVICES can put the devices back; not judged here)",
        apply_fixes=False,
    )
