"""The checks `verify` runs on one node's report: pure functions, so they are tested on real outputs.

Each failure names the host, the subject (device/port or setting), what was expected, what was
found, and a hint at the fix.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from rdmaprov.deploys.limits import LOGIN_LIMITS, SERVICE_LIMITS, memlock_value
from rdmaprov.inventory.config import ETHERNET_FABRICS, NodeConfig, hca_specs, spec_matches
from rdmaprov.inventory.model import HostSpec
from rdmaprov.nvidia import driver_matches
from rdmaprov.parsers.limits import SettingLine, pam_memlock, systemd_memlock
from rdmaprov.parsers.node import NodeReport, SysfsPort, nccl_library_version
from rdmaprov.parsers.nvidia_smi import GpuHealth

# IB MTUs a RoCE port can run, and the RoCE headers the kernel subtracts from the netdev MTU.
_IB_MTUS = (4096, 2048, 1024, 512, 256)
_ROCE_OVERHEAD = 40 + 12 + 4 + 28 + 4


@dataclass(frozen=True)
class Check:
    """One kind of check: a stable id (JSON, JUnit, drift), the label tables show, and the deploy
    that establishes what it looks at (None: the hardware's own state, which no deploy changes)."""

    id: str
    label: str
    deploy: str | None = None


# Every check verify makes, by id. SoftRoCE links are rdmaprov's own (softroce deploy), so the
# device and port checks point back to that deploy on a softroce node only.
CHECKS = {
    c.id: c
    for c in (
        Check("rdma.device_present", "device present"),
        Check("rdma.devices", "devices"),
        Check("rdma.port_present", "port present"),
        Check("rdma.port_state", "port state"),
        Check("rdma.physical_state", "physical state"),
        Check("rdma.link_layer", "link layer"),
        Check("rdma.rate", "rate"),
        Check("rdma.gid", "GID index"),
        Check("rdma.port_errors", "error counters"),
        Check("rdma.active_mtu", "active MTU", "mtu"),
        Check("mtu.netdev", "MTU", "mtu"),
        Check("netns.mode", "netns mode", "netns_mode"),
        Check("nccl.conf_present", "present", "nccl_env"),
        Check("nccl.hca_matches", "NCCL_IB_HCA matches devices", "nccl_env"),
        Check("nccl.hca_excludes_storage", "NCCL_IB_HCA excludes storage HCAs", "nccl_env"),
        Check("nccl.library", "library programs load", "nccl"),
        Check("gpu.count", "count"),
        Check("gpu.driver_version", "driver version", "gpu_driver"),
        Check("gpu.ecc_mode", "ECC mode"),
        Check("gpu.ecc_uncorrectable", "uncorrectable ECC errors"),
        Check("gpu.row_remap", "memory row remapping"),
        Check("gpu.hw_slowdown", "hardware slowdown"),
        Check("gpu.pcie_width", "PCIe link width"),
        Check("gpu.persistence", "persistence mode"),
        Check("gpu.xid", "Xid errors since boot"),
        Check("limits.memlock_login", "login limit", "limits"),
        Check("limits.memlock_services", "service limit", "limits"),
        Check("exporter.answers", "exporter answers", "exporter"),
        Check("fleet.kernel", "same as the fleet"),
        Check("fleet.rdma_core", "same as the fleet", "rdma_userspace"),
        Check("fleet.gpu_driver", "same as the fleet", "gpu_driver"),
        Check("fleet.nccl_version", "same as the fleet", "nccl"),
        Check("fleet.hca_firmware", "same as the fleet"),
    )
}
_SOFTROCE_LINK_CHECKS = {
    "rdma.device_present",
    "rdma.devices",
    "rdma.port_present",
    "rdma.port_state",
    "rdma.physical_state",
    "rdma.link_layer",
    "rdma.rate",
}


def check_deploy(check_id: str, fabric: str | None) -> str | None:
    """The deploy a failed check points back to on a node of this fabric."""
    if check_id in _SOFTROCE_LINK_CHECKS:
        return "softroce" if fabric == "softroce" else None
    return CHECKS[check_id].deploy


@dataclass(frozen=True)
class Finding:
    host: str
    subject: str
    check: str  # the label tables show (e.g. "GID index 3"); `id` is what to match on
    ok: bool
    expected: str
    found: str
    hint: str = ""
    drift: str | None = None  # check only, for a failure: corrective, intentional or new
    id: str = ""
    deploy: str | None = None


def finding(
    host: str,
    fabric: str | None,
    check_id: str,
    subject: str,
    ok: bool,
    expected: str,
    found: str,
    hint: str = "",
    label: str | None = None,
) -> Finding:
    """A finding of the check `check_id`; the hint is kept only for a failure."""
    return Finding(
        host,
        subject,
        label or CHECKS[check_id].label,
        ok,
        expected,
        found,
        "" if ok else hint,
        id=check_id,
        deploy=check_deploy(check_id, fabric),
    )


def roce_active_mtu(netdev_mtu: int) -> int:
    """The IB MTU a RoCE port takes on a netdev of this MTU (the kernel's iboe_get_mtu)."""
    return next((m for m in _IB_MTUS if m <= netdev_mtu - _ROCE_OVERHEAD), 256)


def expected_devices(node: NodeConfig, report: NodeReport) -> list[str]:
    """Declared devices; for SoftRoCE the rxe links rdmaprov makes; else every non-storage device."""
    rdma = node.rdma
    if rdma.devices:
        return list(rdma.devices)
    if node.fabric == "softroce":
        return [f"rxe{i}" for i, _ in enumerate(rdma.netdevs)]
    storage = set(rdma.storage_hcas)
    return sorted({p.device for p in report.ports if p.device not in storage})


class _Checker:
    def __init__(self, host: str, fabric: str | None) -> None:
        self.host = host
        self.fabric = fabric
        self.findings: list[Finding] = []

    def check(
        self, subject: str, check_id: str, ok: bool, expected: str, found: str, hint: str = "", label: str | None = None
    ) -> bool:
        self.findings.append(finding(self.host, self.fabric, check_id, subject, ok, expected, found, hint, label))
        return ok


def _check_port(c: _Checker, node: NodeConfig, port: SysfsPort, report: NodeReport) -> None:
    fabric = node.fabric
    rdma = node.rdma
    name = port.name
    c.check(
        name,
        "rdma.port_state",
        port.state == "ACTIVE",
        "ACTIVE",
        port.state or "unknown",
        "the link is down or the subnet manager has not configured it: check cables, the switch port and `ibstat`",
    )
    c.check(
        name,
        "rdma.physical_state",
        port.phys_state == "LinkUp",
        "LinkUp",
        port.phys_state or "unknown",
        "no physical link: check the cable/transceiver and the switch port",
    )
    if fabric:
        wanted = "Ethernet" if fabric in ETHERNET_FABRICS else "InfiniBand"
        c.check(
            name,
            "rdma.link_layer",
            port.link_layer == wanted,
            wanted,
            port.link_layer or "unknown",
            f"fabric {fabric} needs {wanted}: set the port type (e.g. mlxconfig LINK_TYPE_P1) or fix the inventory's "
            "fabric",
        )
    if rdma.rate_gbps:
        c.check(
            name,
            "rdma.rate",
            port.rate_gbps >= rdma.rate_gbps,
            f">= {rdma.rate_gbps:g} Gb/s",
            port.rate_text or "unknown",
            "the link trained below its rate: check the cable, the switch port speed and `ethtool`/`ibstat`",
        )
    if port.link_layer == "Ethernet":
        index = node.gid_index
        if index is not None:
            gid = port.gids.get(index)
            found = f"{gid.gid} ({gid.type})" if gid else "no GID at that index"
            c.check(
                name,
                "rdma.gid",
                gid is not None and gid.type == "RoCE v2",
                "a RoCE v2 GID",
                found,
                "the index NCCL will use has no RoCE v2 address: give the netdev an IP address or fix rdma.gid_index "
                "(`show_gids`)",
                label=f"GID index {index}",
            )
        netdev = next((g.netdev for g in port.gids.values() if g.netdev), None)
        device = next((d for d in report.devices if d.hca == port.device), None)
        ib_port = next((p for p in device.ports if p.number == port.port), None) if device else None
        if netdev in report.mtus and ib_port and ib_port.active_mtu:
            expected = roce_active_mtu(report.mtus[netdev])
            c.check(
                name,
                "rdma.active_mtu",
                ib_port.active_mtu == expected,
                f"{expected} (netdev {netdev} MTU {report.mtus[netdev]})",
                str(ib_port.active_mtu),
                "the RDMA MTU does not follow the netdev MTU: re-create the link or reload the driver",
            )


def verify_node(spec: HostSpec, report: NodeReport) -> list[Finding]:
    """Every check for one host; a finding per check, passing or not."""
    node = spec.node
    c = _Checker(spec.name, node.fabric)
    port_number = node.rdma.port
    present = {p.device for p in report.ports}
    expected = expected_devices(node, report)
    for device in expected:
        if not c.check(
            device,
            "rdma.device_present",
            device in present,
            "present",
            "present" if device in present else "missing",
            f"no RDMA device {device}: load its driver (or `rdmaprov apply` for SoftRoCE links); it has "
            f"{', '.join(sorted(present)) or 'no RDMA devices'}",
        ):
            continue
        port = report.port(device, port_number)
        if (
            c.check(
                f"{device}/{port_number}",
                "rdma.port_present",
                port is not None,
                "present",
                "present" if port else "missing",
                f"{device} has no port {port_number}: fix rdma.port",
            )
            and port
        ):
            _check_port(c, node, port, report)
    if not expected and node.fabric:
        c.check(
            "rdma",
            "rdma.devices",
            False,
            "at least one RDMA device",
            "none",
            "no RDMA device at all: install the driver, or declare rdma.devices",
        )

    for netdev, mtu in node.wanted_mtus().items():
        found = report.mtus.get(netdev)
        c.check(
            netdev,
            "mtu.netdev",
            found == mtu,
            str(mtu),
            str(found) if found is not None else "no such netdev",
            "run `rdmaprov apply` (the MTU deploy) or fix the inventory's mtu",
        )

    if node.netns_mode:
        c.check(
            "ib_core",
            "netns.mode",
            report.netns == node.netns_mode,
            node.netns_mode,
            report.netns or "unknown (ib_core not loaded)",
            "run `rdmaprov apply` (it switches live when no other network namespace exists, otherwise the host needs a "
            "reboot)",
        )

    _check_nccl_hca(c, node, report)
    _check_gpus(c, node, report)
    _check_memlock(c, node, report)
    return c.findings


def _check_memlock(c: _Checker, node: NodeConfig, report: NodeReport) -> None:
    """The limit a login and a service get, and where it comes from when it is not what the node
    needs: a line in a file that is not rdmaprov's is the operator's to change, not apply's."""
    login, services = memlock_value(node.memlock)
    c.check(
        "memlock",
        "limits.memlock_login",
        report.memlock_login == login,
        login,
        report.memlock_login or "unknown",
        _memlock_hint(report, LOGIN_LIMITS, pam_memlock, login, "log in again")
        or "RDMA pins memory: run `rdmaprov apply` (limits deploy), then log in again",
    )
    if report.memlock_services:
        c.check(
            "memlock",
            "limits.memlock_services",
            report.memlock_services == services,
            services,
            report.memlock_services,
            _memlock_hint(
                report, SERVICE_LIMITS, systemd_memlock, services, "run `systemctl daemon-reexec` and restart services"
            )
            or "run `rdmaprov apply` (limits deploy); systemd applies it to services started afterwards",
        )


def _memlock_hint(
    report: NodeReport, ours: str, value: Callable[[SettingLine], str | None], wanted: str, then: str
) -> str | None:
    """The operator's fix when other files set memlock to something else, None when none does."""
    others = [line for line in report.memlock_lines if line.path != ours and value(line) not in (None, wanted)]
    if not others:
        return None
    return (
        f"set to something else outside rdmaprov's {ours}: {'; '.join(map(str, others))}. "
        f"Remove or change {'that line' if len(others) == 1 else 'those lines'} to {wanted} "
        f"(apply leaves files it did not write alone), then {then}"
    )


def _check_gpus(c: _Checker, node: NodeConfig, report: NodeReport) -> None:
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
    _check_xids(c, report)
    if node.nccl.version:
        _check_nccl_library(c, node, report)


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


def _check_xids(c: _Checker, report: NodeReport) -> None:
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


def _check_gpu_health(c: _Checker, subject: str, gpu: GpuHealth) -> None:
    """What takes a training job down while the GPU still answers: the field's health checks
    (DCGM, AzNHC, NVSentinel) on one GPU's `nvidia-smi -q`, each with what to do about it."""
    if gpu.ecc_mode != "N/A":
        c.check(
            subject,
            "gpu.ecc_mode",
            gpu.ecc_mode == "Enabled",
            "Enabled",
            gpu.ecc_mode,
            "without ECC, memory errors corrupt results silently: `nvidia-smi -e 1`, then reset the GPU or reboot",
        )
    if gpu.volatile_uncorrectable is not None:
        c.check(
            subject,
            "gpu.ecc_uncorrectable",
            gpu.volatile_uncorrectable == 0,
            "0 since the driver loaded",
            f"{gpu.volatile_uncorrectable} (lifetime {gpu.aggregate_uncorrectable})",
            "drain the node: jobs on this GPU crash or compute wrong results; a GPU reset or reboot remaps the "
            "rows, and if errors come back, RMA the GPU",
        )
    pending = gpu.remap_pending or gpu.retirement_pending
    c.check(
        subject,
        "gpu.row_remap",
        not pending and not gpu.remap_failed,
        "nothing pending, no failure",
        "remapping failed" if gpu.remap_failed else "a remap is pending" if pending else "nothing pending",
        "remapping failed: the GPU is out of spare rows, RMA it"
        if gpu.remap_failed
        else "reset the GPU (`nvidia-smi -r`) or reboot to apply the pending remap; until then drain the node",
    )
    c.check(
        subject,
        "gpu.hw_slowdown",
        not gpu.hw_slowdown,
        "none active",
        ", ".join(gpu.hw_slowdown) or "none active",
        "the GPU throttles itself in hardware: check its cooling and power (fans, inlet temperature, PSU, power "
        "brake signal)",
    )
    current, widest = gpu.link_width
    if "N/A" not in (current, widest):
        c.check(
            subject,
            "gpu.pcie_width",
            current == widest,
            widest,
            f"{current} (generation {gpu.link_generation[0]} of {gpu.link_generation[1]})",
            "the PCIe link trained narrower than the GPU supports: reseat the GPU or its riser and check the slot",
        )
    c.check(
        subject,
        "gpu.persistence",
        gpu.persistence == "Enabled",
        "Enabled",
        gpu.persistence,
        "enable nvidia-persistenced (or `nvidia-smi -pm 1`): without it the driver tears the GPU down between jobs "
        "and the next start is slow",
    )


def _check_nccl_library(c: _Checker, node: NodeConfig, report: NodeReport) -> None:
    """The libnccl.so.2 the dynamic linker gives programs is the declared version and, for a
    build, rdmaprov's own: another NCCL first in the linker's cache (a distro or image copy)
    is what training jobs would load."""
    nccl = node.nccl
    wanted = nccl.version.split("-")[0] if nccl.version else ""
    prefix = None if nccl.source_kind == "packages" else nccl.prefix.rstrip("/")
    if not report.nccl_linked:
        found, ok = "not in the dynamic linker's cache (ldconfig -p)", False
    else:
        path, real = report.nccl_linked[0]
        version = nccl_library_version(real)
        found = f"{path} → {real}" if real != path else path
        ok = version == wanted and (prefix is None or real.startswith(prefix + "/"))
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


def _check_nccl_hca(c: _Checker, node: NodeConfig, report: NodeReport) -> None:
    if report.nccl_conf is None:
        c.check(
            "/etc/nccl.conf", "nccl.conf_present", False, "present", "missing", "run `rdmaprov apply` (nccl_env deploy)"
        )
        return
    hca = report.nccl_conf.get("NCCL_IB_HCA")
    if not hca or hca.startswith("^"):
        return
    devices = sorted({p.device for p in report.ports})
    specs = hca_specs(hca)
    matched = [d for d in devices if any(spec_matches(s, d) for s in specs)]
    c.check(
        "/etc/nccl.conf",
        "nccl.hca_matches",
        bool(matched),
        f"a device matching {hca}",
        ", ".join(matched) or f"none (devices: {', '.join(devices) or 'none'})",
        "NCCL would fall back to sockets: fix NCCL_IB_HCA in the inventory (nccl.env) or rdma.devices",
    )
    storage = node.rdma.storage_hcas
    hit = [d for d in storage if any(spec_matches(s, d) for s in specs)]
    c.check(
        "/etc/nccl.conf",
        "nccl.hca_excludes_storage",
        not hit,
        "no storage HCA",
        ", ".join(hit) or "none",
        "NCCL traffic would land on storage HCAs: list compute HCAs exactly (=mlx5_0,mlx5_1)",
    )
