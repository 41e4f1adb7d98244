"""GPU health from `nvidia-smi -q`: the state that takes training jobs down while the GPU still
shows up in `nvidia-smi -L` (uncorrectable ECC errors, a pending or failed row remap, hardware
slowdown, a PCIe link trained narrower than the slot).

`-q` is an indented tree of `Key : value` lines, one tree per GPU. Older drivers name some parts
differently ("Clocks Throttle Reasons", ECC counts under "Double Bit", retired pages instead of
remapped rows); the lookups below take either.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_VALUE = re.compile(r"^( *)(\S.*?)\s*: (.*)$")
_SECTION = re.compile(r"^( *)(\S.*?)\s*$")
_GPU = re.compile(r"^GPU ([0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-9A-Fa-f])\s*$")

Tree = dict[tuple[str, ...], str]


@dataclass(frozen=True)
class GpuHealth:
    bus_id: str
    name: str
    persistence: str  # Enabled, Disabled
    mig_mode: str  # Enabled, Disabled, N/A (a GPU without MIG)
    ecc_mode: str  # Enabled, Disabled, N/A
    volatile_uncorrectable: int | None  # since the driver loaded; None where not reported
    aggregate_uncorrectable: int | None  # over the GPU's life
    remap_pending: bool
    remap_failed: bool
    retirement_pending: bool  # pre-Ampere GPUs retire pages instead of remapping rows
    remap_known: bool  # the output says Yes/No for a pending remap or retirement
    # slowdowns that mean the hardware is in trouble, active now: every "HW …" reason, and the
    # driver's own thermal one (the GPU is past its software temperature limit: cooling)
    hw_slowdown: tuple[str, ...]
    slowdown_known: bool  # the output has its clock event (throttle) reasons
    link_width: tuple[str, str]  # PCIe (current, max), e.g. ("8x", "16x")
    link_generation: tuple[str, str]  # PCIe (current, max)
    # the NVSwitch fabric as this GPU sees it (Completed/Success once the fabric manager set it
    # up; In Progress, Not Started; N/A on GPUs without NVSwitch and on drivers before 525)
    fabric_state: str = "N/A"
    fabric_status: str = "N/A"


def parse_tree(lines: list[str]) -> list[tuple[str, Tree]]:
    """Each GPU's lines as {path of keys: value}, e.g. ("ECC Mode", "Current") → "Enabled"."""
    gpus: list[tuple[str, Tree]] = []
    path: list[str] = []
    for line in lines:
        gpu = _GPU.match(line)
        if gpu:
            gpus.append((gpu.group(1), {}))
            path = []
            continue
        if not gpus or not line.strip():
            continue
        match = _VALUE.match(line) or _SECTION.match(line)
        if not match:
            continue
        depth = max(len(match.group(1)) // 4 - 1, 0)  # GPU keys start at 4 spaces
        path = path[:depth] + [match.group(2)]
        if match.re is _VALUE:
            gpus[-1][1][tuple(path)] = match.group(3).strip()
    return gpus


def _count(value: str | None) -> int | None:
    return int(value) if value is not None and value.isdigit() else None


def _sum(values: list[int | None]) -> int | None:
    known = [v for v in values if v is not None]
    return sum(known) if known else None


def _uncorrectable(tree: Tree, scope: str) -> int | None:
    """Uncorrectable ECC errors in `scope` (Volatile or Aggregate): every "…Uncorrectable…"
    counter (Hopper: SRAM parity and SEC-DED, DRAM), or the "Double Bit" totals on older GPUs."""
    return _sum(
        [
            _count(value)
            for path, value in tree.items()
            if path[:2] == ("ECC Errors", scope)
            and (any("Uncorrectable" in key for key in path[2:]) or path[2:] == ("Double Bit", "Total"))
        ]
    )


def _first(tree: Tree, *paths: tuple[str, ...]) -> str:
    return next((tree[p] for p in paths if p in tree), "N/A")


_PENDING_REMAP = (("Remapped Rows", "Pending"),)
_PENDING_RETIRE = (("Retired Pages", "Pending Page Blacklist"), ("Retired Pages", "Pending Page Retirement"))


def gpu_health(bus_id: str, tree: Tree) -> GpuHealth:
    reasons = "Clocks Event Reasons" if any(p[0] == "Clocks Event Reasons" for p in tree) else "Clocks Throttle Reasons"
    slowdown = tuple(
        path[-1]
        for path, value in tree.items()
        if path[0] == reasons
        and (path[-1].startswith("HW ") or path[-1] == "SW Thermal Slowdown")
        and value == "Active"
    )
    link = ("PCI", "GPU Link Info")
    return GpuHealth(
        bus_id=bus_id,
        name=_first(tree, ("Product Name",)),
        persistence=_first(tree, ("Persistence Mode",)),
        mig_mode=_first(tree, ("MIG Mode", "Current")),
        ecc_mode=_first(tree, ("ECC Mode", "Current"), ("Ecc Mode", "Current")),  # "Ecc" up to driver 525
        volatile_uncorrectable=_uncorrectable(tree, "Volatile"),
        aggregate_uncorrectable=_uncorrectable(tree, "Aggregate"),
        remap_known=any(v in ("Yes", "No") for v in (_first(tree, *_PENDING_REMAP), _first(tree, *_PENDING_RETIRE))),
        remap_pending=_first(tree, *_PENDING_REMAP) == "Yes",
        remap_failed=_first(tree, ("Remapped Rows", "Remapping Failure Occurred")) == "Yes",
        retirement_pending=_first(tree, *_PENDING_RETIRE) == "Yes",
        hw_slowdown=slowdown,
        slowdown_known=any(p[0] == reasons for p in tree),
        link_width=(_first(tree, (*link, "Link Width", "Current")), _first(tree, (*link, "Link Width", "Max"))),
        link_generation=(
            _first(tree, (*link, "PCIe Generation", "Current")),
            _first(tree, (*link, "PCIe Generation", "Max")),
        ),
        fabric_state=_first(tree, ("Fabric", "State")),
        fabric_status=_first(tree, ("Fabric", "Status")),
    )


def parse_nvidia_smi_q(text: str) -> list[GpuHealth]:
    """`nvidia-smi -q` → one GpuHealth per GPU, in nvidia-smi's order."""
    return [gpu_health(bus_id, tree) for bus_id, tree in parse_tree(text.splitlines())]
