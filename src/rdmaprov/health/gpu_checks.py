"""The checks of a GPU node: every GPU visible on the declared driver, each GPU's health and
NVLinks, hardware Xids since boot, and the NCCL that programs, nccl-tests and plugins load."""

from __future__ import annotations

from rdmaprov.health.findings import Checker
from rdmaprov.inventory.config import GpuConfig, NodeConfig
from rdmaprov.nvidia import driver_matches
from rdmaprov.parsers.fabric import FabricManagerState
from rdmaprov.parsers.ldd import Linkage
from rdmaprov.parsers.node import NodeReport, nccl_library_version
from rdmaprov.parsers.nvidia_smi import GpuHealth


def check_gpus(c: Checker, node: NodeConfig, report: NodeReport) -> None:
    """GPU nodes: every declared GPU visible, on the declared driver, with an NCCL to use them."""
    gpu = node.gpu
    if gpu is None:
        return
    c.check(
        "gpus",
        "gpu.count",
        len(report.gpus) == gpu.count,
        str(gpu.count),
        str(len(report.gpus)),
        "nvidia-smi sees fewer GPUs: check the driver is loaded (a reboot may be owed after a driver change) and "
        "`nvidia-smi -q` for fallen-off GPUs",
    )
    wanted = gpu.driver_version
    if wanted and report.gpus:
        loaded = report.gpus[0].driver_version
        c.check(
            "gpus",
            "gpu.driver_version",
            driver_matches(wanted, loaded),
            wanted,
            loaded,
            "run `rdmaprov apply --allow-reboot` (a new driver loads at the next boot)",
        )
    for index, health in enumerate(report.gpu_health):
        _check_gpu_health(c, f"gpu{index} {health.bus_id}", health)
    _check_nvlinks(c, report)
    _check_fabric(c, gpu, report)
    _check_xids(c, report)
    if node.nccl.version:
        _check_nccl_library(c, node, report)
        if node.nccl.tests_enabled:
            _check_tests_library(c, node, report)


def check_net_plugin(c: Checker, node: NodeConfig, report: NodeReport) -> None:
    """eRDMA nodes with the AIACC plugin declared: an NCCL net plugin is installed and every
    library it needs resolves (NCCL silently skips a plugin it cannot load and runs on sockets)."""
    if node.fabric != "erdma" or not node.erdma.aiacc_plugin:
        return
    plugins = {path: linkage for path, linkage in report.linkage.items() if "libnccl-net" in path and linkage.exists}
    broken = {path: linkage.missing for path, linkage in plugins.items() if linkage.missing}
    found = (
        "; ".join(f"{path} needs {', '.join(missing)} (not found)" for path, missing in broken.items())
        if broken
        else ", ".join(plugins) or "no libnccl-net*.so"
    )
    c.check(
        "nccl",
        "nccl.net_plugin",
        bool(plugins) and not broken,
        "an NCCL net plugin (AIACC) whose libraries all resolve",
        found,
        "run `rdmaprov apply` (the erdma deploy installs the AIACC plugin package); if a library is not found, "
        "install what provides it or fix its ld.so.conf.d entry",
    )


def _check_tests_library(c: Checker, node: NodeConfig, report: NodeReport) -> None:
    """The NCCL the gates' all_reduce_perf loads is the one declared: nccl-tests built against
    another NCCL, or a node whose linker finds another copy first, measures the wrong library."""
    program = node.nccl.all_reduce_perf
    linkage = report.linkage.get(program, Linkage(False))
    resolved = linkage.libraries.get("libnccl.so.2")
    wanted, prefix = declared_nccl(node)
    if not linkage.exists:
        found, ok = f"{program} is missing", False
    elif resolved is None:
        found, ok = f"{program}: libnccl.so.2 not found", False
    else:
        found, ok = f"{program} → {resolved}", _is_declared(resolved, wanted, prefix)
    c.check(
        "nccl-tests",
        "nccl.tests_library",
        ok,
        f"libnccl.so.2 {wanted}" + (f" under {prefix}" if prefix else ""),
        found,
        "run `rdmaprov apply` (the nccl deploy builds nccl-tests against the declared NCCL); if another NCCL is "
        "found first, remove it or its ld.so.conf.d entry",
    )


def _check_nvlinks(c: Checker, report: NodeReport) -> None:
    """Each GPU has as many active NVLinks as the best-connected GPU of the node: a link that
    dropped leaves the GPU working while collectives inside the node slow down. Inactive links
    alone are no fault (a bridged PCIe pair uses 12 of its 18); nodes without NVLink (no GPU
    with an active link) are not judged. A GPU that lists no links at all while others have
    some (no bridge on it, or every link down) cannot be told apart here: unknown."""
    most = max((len(g.active) for g in report.nvlinks), default=0)
    if not most:
        return
    for gpu in report.nvlinks:
        c.judge(
            f"gpu{gpu.index}",
            "gpu.nvlink",
            None
            if gpu.active or gpu.inactive
            else f"nvidia-smi lists no NVLinks for it while other GPUs have {most} active (no bridge, or all down)",
            len(gpu.active) == most,
            f"{most} active (as on the node's best-connected GPU)",
            f"{len(gpu.active)} active"
            + (f", inactive: {', '.join(f'link {n}' for n in gpu.inactive)}" if gpu.inactive else ""),
            "an NVLink is down: reset the GPU (`nvidia-smi -r`) or reboot; if it stays down, check the NVLink "
            "bridge/baseboard and RMA the GPU",
        )


# Xids that mean the hardware, not the program, failed (NVIDIA's Xid catalog), most severe first,
# and what to do. Application faults (13, 31, 43, 45…) are the job's, not the node's.
HARDWARE_XIDS = {
    79: "the GPU fell off the bus: drain the node, check its power and PCIe seating, RMA if it recurs",
    64: "row remapping failed: RMA the GPU",
    95: "uncontained ECC error: drain the node and reset the GPU",
    48: "double-bit ECC error: drain the node, reset the GPU, RMA if it recurs",
    74: "NVLink error: reset the GPU, check the NVLink bridge/baseboard if it recurs",
    94: "contained ECC error (the job was killed): reset the GPU",
    63: "a row was marked for remapping: reset the GPU to apply it",
    92: "high single-bit ECC error rate: watch it, RMA if it persists",
    119: "GSP timeout: reset the GPU or reboot; update the driver if it recurs",
    120: "GSP error: reset the GPU or reboot; update the driver if it recurs",
}


def _check_fabric(c: Checker, gpu: GpuConfig, report: NodeReport) -> None:
    """NVSwitch boards: the fabric manager of the running driver's exact version active, and
    every GPU's fabric set up (CUDA fails with "system not yet initialized" until it is)."""
    expected = "active, the driver's version"
    if not gpu.on_nvswitch(bool(report.nvswitches)):
        why = "gpu.nvswitch is false" if gpu.nvswitch is False else "no NVSwitch on this node's PCI bus"
        c.not_applicable("fabric", "gpu.fabric_manager", expected, why)
        return
    manager, driver = report.fabric_manager, report.gpus[0].driver_version if report.gpus else ""
    if manager is None or not driver:
        c.unknown("fabric", "gpu.fabric_manager", expected, "nvidia-smi does not answer on this node")
    else:
        c.check(
            "fabric",
            "gpu.fabric_manager",
            manager.service == "active" and manager.version == driver,
            f"active, {driver}",
            f"{manager.service or 'no service'}, {manager.version or 'not installed'}",
            _fabric_manager_hint(manager, driver),
        )
    for index, health in enumerate(report.gpu_health):
        state, status = health.fabric_state, health.fabric_status
        c.judge(
            f"gpu{index} {health.bus_id}",
            "gpu.fabric",
            "nvidia-smi reports no fabric state for it (drivers before 525 and GPUs before Hopper do not): the "
            "fabric manager's finding stands for it"
            if state == "N/A"
            else None,
            (state, status) == ("Completed", "Success"),
            "Completed, Success",
            f"{state}, {status}",
            "the fabric is not set up: GPUs wait In Progress until the fabric manager runs; start it "
            "(`rdmaprov apply`), or if it has just started, verify again in a minute"
            if state == "In Progress"
            else "the fabric manager could not set up this GPU's NVLinks: CUDA cannot start here; see "
            "/var/log/fabricmanager.log, then `systemctl restart nvidia-fabricmanager` or reboot",
        )


def _fabric_manager_hint(manager: FabricManagerState, driver: str) -> str:
    if not manager.version:
        return "run `rdmaprov apply`: the gpu_driver deploy installs the fabric manager of the driver's version"
    if manager.version != driver:
        return (
            f"the fabric manager {manager.version} refuses to run with driver {driver}: `rdmaprov apply` installs "
            "the driver's version (or reboot if the driver itself changed)"
        )
    return "`systemctl start nvidia-fabricmanager`; `journalctl -u nvidia-fabricmanager` says why it stopped"


def _check_xids(c: Checker, report: NodeReport) -> None:
    """Hardware Xids in the kernel log since boot, each GPU's latest of each kind named."""
    hardware = [x for x in report.xids if x.code in HARDWARE_XIDS]
    seen = list(dict.fromkeys((x.code, x.bus_id) for x in hardware))
    worst = min((x.code for x in hardware), key=list(HARDWARE_XIDS).index, default=None)
    c.check(
        "kernel log",
        "gpu.xid",
        not hardware,
        "no hardware Xid",
        ", ".join(f"Xid {code} on {bus}" for code, bus in seen) or "none",
        f"Xid {worst}: {HARDWARE_XIDS[worst]}" if worst is not None else "",
    )


def _check_gpu_health(c: Checker, subject: str, gpu: GpuHealth) -> None:
    """What takes a training job down while the GPU still answers: the field's health checks
    (DCGM, AzNHC, NVSentinel) on one GPU's `nvidia-smi -q`, each with what to do about it. A
    field the GPU does not report is an unknown, never a pass."""
    c.judge(
        subject,
        "gpu.ecc_mode",
        "the GPU reports no ECC mode (a model without ECC?)" if gpu.ecc_mode == "N/A" else None,
        gpu.ecc_mode == "Enabled",
        "Enabled",
        gpu.ecc_mode,
        "without ECC, memory errors corrupt results silently: `nvidia-smi -e 1`, then reset the GPU or reboot",
    )
    c.judge(
        subject,
        "gpu.ecc_uncorrectable",
        "the GPU reports no ECC error counts" if gpu.volatile_uncorrectable is None else None,
        gpu.volatile_uncorrectable == 0,
        "0 since the driver loaded",
        f"{gpu.volatile_uncorrectable} (lifetime {gpu.aggregate_uncorrectable})",
        "drain the node: jobs on this GPU crash or compute wrong results; a GPU reset or reboot remaps the "
        "rows, and if errors come back, RMA the GPU",
    )
    pending = gpu.remap_pending or gpu.retirement_pending
    c.judge(
        subject,
        "gpu.row_remap",
        None if gpu.remap_known else "no remapped rows or retired pages reported",
        not pending and not gpu.remap_failed,
        "nothing pending, no failure",
        "remapping failed" if gpu.remap_failed else "a remap is pending" if pending else "nothing pending",
        "remapping failed: the GPU is out of spare rows, RMA it"
        if gpu.remap_failed
        else "reset the GPU (`nvidia-smi -r`) or reboot to apply the pending remap; until then drain the node",
    )
    c.judge(
        subject,
        "gpu.hw_slowdown",
        None if gpu.slowdown_known else "no clock event (throttle) reasons reported",
        not gpu.hw_slowdown,
        "none active",
        ", ".join(gpu.hw_slowdown) or "none active",
        "the GPU throttles itself in hardware: check its cooling and power (fans, inlet temperature, PSU, power "
        "brake signal)",
    )
    current, widest = gpu.link_width
    c.judge(
        subject,
        "gpu.pcie_width",
        f"nvidia-smi reports width {current} of {widest}" if "N/A" in (current, widest) else None,
        current == widest,
        widest,
        f"{current} (generation {gpu.link_generation[0]} of {gpu.link_generation[1]})",
        "the PCIe link trained narrower than the GPU supports: reseat the GPU or its riser and check the slot",
    )
    c.judge(
        subject,
        "gpu.persistence",
        "the GPU reports no persistence mode" if gpu.persistence == "N/A" else None,
        gpu.persistence == "Enabled",
        "Enabled",
        gpu.persistence,
        "enable nvidia-persistenced (or `nvidia-smi -pm 1`): without it the driver tears the GPU down between jobs "
        "and the next start is slow",
    )
    if gpu.mig_mode != "N/A":  # GPUs without MIG say N/A: nothing to judge, nothing unknown
        c.check(
            subject,
            "gpu.mig_mode",
            gpu.mig_mode == "Disabled",
            "Disabled",
            gpu.mig_mode,
            "MIG splits the GPU into instances NCCL cannot use across (NVIDIA/nccl#1716): `nvidia-smi -i N -mig 0`, "
            "then reset the GPU, on nodes meant for multi-GPU training",
        )


def _check_nccl_library(c: Checker, node: NodeConfig, report: NodeReport) -> None:
    """The libnccl.so.2 the dynamic linker gives programs is the declared version and, for a
    build, rdmaprov's own: another NCCL first in the linker's cache (a distro or image copy)
    is what training jobs would load."""
    wanted, prefix = declared_nccl(node)
    if not report.nccl_linked:
        found, ok = "not in the dynamic linker's cache (ldconfig -p)", False
    else:
        path, real = report.nccl_linked[0]
        found = f"{path} → {real}" if real != path else path
        ok = _is_declared(real, wanted, prefix)
    c.check(
        "nccl",
        "nccl.library",
        ok,
        f"libnccl.so.2 {wanted}" + (f" under {prefix}" if prefix else ""),
        found,
        "run `rdmaprov apply` (the nccl deploy installs it, registers it in "
        "/etc/ld.so.conf.d/rdmaprov-nccl.conf and runs ldconfig); if another NCCL still comes first, remove it or "
        "its ld.so.conf.d entry",
    )


def declared_nccl(node: NodeConfig) -> tuple[str, str | None]:
    """The NCCL version declared (2.18.3 of 2.18.3-1) and, for a build, the prefix it lives under."""
    nccl = node.nccl
    wanted = nccl.version.split("-")[0] if nccl.version else ""
    return wanted, None if nccl.source_kind == "packages" else nccl.prefix.rstrip("/")


def _is_declared(real: str, wanted: str, prefix: str | None) -> bool:
    """Whether the library file `real` (symlinks resolved) is the declared NCCL."""
    return nccl_library_version(real) == wanted and (prefix is None or real.startswith(prefix + "/"))
