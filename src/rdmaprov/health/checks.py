"""The checks `verify` runs on one node's report: pure functions, so they are tested on real outputs.

Each failure names the host, the subject (device/port or setting), what was expected, what was
found, and a hint at the fix.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypedDict

from rdmaprov.health.container_checks import check_enroot
from rdmaprov.health.dcgm_checks import check_dcgm
from rdmaprov.health.findings import Checker, Finding
from rdmaprov.health.framework_checks import check_frameworks
from rdmaprov.health.gpu_checks import check_gpus, check_net_plugin
from rdmaprov.health.gpudirect_checks import check_gpudirect
from rdmaprov.health.roce_qos_checks import check_roce_qos
from rdmaprov.inventory.config import ETHERNET_FABRICS, GPUDIRECT_FABRICS, NodeConfig, hca_specs, spec_matches
from rdmaprov.inventory.model import HostSpec
from rdmaprov.parsers.limits import (
    LOGIN_LIMITS,
    SERVICE_LIMITS,
    SettingLine,
    memlock_value,
    pam_memlock,
    systemd_memlock,
)
from rdmaprov.parsers.node import NodeReport, SysfsPort
from rdmaprov.parsers.pcie import PciLink

# IB MTUs a RoCE port can run, and the RoCE headers the kernel subtracts from the netdev MTU.
_IB_MTUS = (4096, 2048, 1024, 512, 256)
_ROCE_OVERHEAD = 40 + 12 + 4 + 28 + 4


def roce_active_mtu(netdev_mtu: int) -> int:
    """The IB MTU a RoCE port takes on a netdev of this MTU (the kernel's iboe_get_mtu)."""
    return next((m for m in _IB_MTUS if m <= netdev_mtu - _ROCE_OVERHEAD), 256)


def expected_devices(node: NodeConfig, report: NodeReport) -> list[str]:
    """Declared devices; for SoftRoCE the rxe links rdmaprov makes; else every non-storage device."""
    rdma = node.rdma
    if rdma.devices:
        return list(rdma.devices)
    if node.fabric == "softroce":
        return node.rxe_devices
    storage = set(rdma.storage_hcas)
    return sorted({p.device for p in report.ports if p.device not in storage})


def _check_port(c: Checker, node: NodeConfig, port: SysfsPort, report: NodeReport) -> None:
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
                _gid_hint(port),
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


def _gid_hint(port: SysfsPort) -> str:
    """Where the port's RoCE v2 GIDs really are (its GID type table), so the fix names an index."""
    v2 = sorted((g for g in port.gids.values() if g.type == "RoCE v2"), key=lambda g: g.index)
    ipv4 = [g for g in v2 if g.gid.startswith("0000:0000:0000:0000:0000:ffff:")]
    if not v2:
        return "the port has no RoCE v2 GID at all: give its netdev an IP address (`show_gids` lists the table)"
    best = (ipv4 or v2)[0]
    listed = ", ".join(f"{g.index} ({g.netdev or 'no netdev'})" for g in v2)
    return (
        f"the index NCCL will use has no RoCE v2 address; this port's RoCE v2 GIDs are at {listed}: set "
        f"rdma.gid_index (or NCCL_IB_GID_INDEX in nccl.env) to {best.index}"
        + (" (IPv4-mapped, as NCCL usually wants)" if best in ipv4 else "")
    )


def _check_pci_link(c: Checker, node: NodeConfig, device: str, report: NodeReport) -> None:
    """The HCA's PCIe link at the speed and width the card supports: a link that trained at a
    lower generation or fewer lanes caps the port below its line rate while the port looks fine."""
    link = report.pci_links.get(device)
    why = None
    if link is None or not link.known:
        why = (
            "a SoftRoCE device has no PCIe link of its own"
            if node.fabric == "softroce"
            else "sysfs reports no PCIe link speed and width for it"
        ) + (f" ({link.describe()})" if link else "")
    link = link or PciLink()
    c.judge(
        device,
        "rdma.pcie_link",
        why,
        link.full,
        link.capable,
        link.trained,
        "the HCA's PCIe link trained below what the card supports, so it cannot reach its line rate: reseat the "
        "card or riser, check the slot's lanes and generation in the BIOS (bifurcation, Gen setting); `lspci -vv` "
        "shows LnkSta against LnkCap",
    )


def report_programs(spec: HostSpec) -> tuple[str, ...]:
    """Programs whose linkage the node's report includes: the all_reduce_perf the gates run (verify and
    node-check ask for the same)."""
    node = spec.node
    if node.gpu and node.nccl.version and node.nccl.tests_enabled:
        return (node.nccl.all_reduce_perf,)
    return ()


class ReportArguments(TypedDict):
    """node_report_command's (and NodeFacts') keyword arguments for one host."""

    programs: tuple[str, ...]
    dcgm_level: int
    roce_qos: bool
    frameworks: tuple[str, ...]
    qos_firmware: bool
    enroot: bool


def report_arguments(spec: HostSpec, dcgm_level: int = 0) -> ReportArguments:
    """The node report's arguments for this host: the programs whose linkage is judged, DCGM's
    diagnostic level on GPU nodes that have DCGM (0 elsewhere, and when not asked), and whether
    RoCE's QoS chain is read (where roce_qos applies), the framework interpreters declared, and
    whether enroot's settings are read (containers.enroot)."""
    gpu = spec.node.gpu
    return {
        "programs": report_programs(spec),
        "dcgm_level": dcgm_level if gpu and gpu.dcgm else 0,
        "roce_qos": spec.node.qos is not None,
        "frameworks": spec.node.nccl.frameworks,
        "qos_firmware": spec.node.qos is not None and spec.node.qos.reads_firmware(spec.node.fabric),
        "enroot": spec.node.containers.enroot,
    }


def verify_node(spec: HostSpec, report: NodeReport) -> list[Finding]:
    """Every check for one host; a finding per check, passing or not."""
    node = spec.node
    c = Checker(spec.name, node.fabric)
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
        _check_pci_link(c, node, device, report)
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
    check_roce_qos(c, node, report)
    check_gpus(c, node, report)
    if node.gpu is not None and node.fabric in GPUDIRECT_FABRICS:
        check_gpudirect(c, report, [d for d in expected if d not in node.rdma.storage_hcas])
    if node.gpu is not None:
        check_dcgm(c, report)
    check_net_plugin(c, node, report)
    check_frameworks(c, node, report)
    if node.containers.enroot:
        check_enroot(c, report.enroot)
    _check_memlock(c, node, report)
    return c.findings


def _check_memlock(c: Checker, node: NodeConfig, report: NodeReport) -> None:
    """The limit a login and a service get, and where it comes from when it is not what the node
    needs: a line in a file that is not rdmaprov's is the operator's to change, not apply's."""
    login, services = memlock_value(node.memlock)
    foreign = _memlock_hint(report, LOGIN_LIMITS, pam_memlock, login, "log in again")
    c.check(
        "memlock",
        "limits.memlock_login",
        report.memlock_login == login,
        login,
        report.memlock_login or "unknown",
        foreign or "RDMA pins memory: run `rdmaprov apply` (limits deploy), then log in again",
        apply_fixes=foreign is None,
    )
    if report.memlock_services:
        foreign = _memlock_hint(
            report, SERVICE_LIMITS, systemd_memlock, services, "run `systemctl daemon-reexec` and restart services"
        )
        c.check(
            "memlock",
            "limits.memlock_services",
            report.memlock_services == services,
            services,
            report.memlock_services,
            foreign or "run `rdmaprov apply` (limits deploy); systemd applies it to services started afterwards",
            apply_fixes=foreign is None,
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


def _check_nccl_hca(c: Checker, node: NodeConfig, report: NodeReport) -> None:
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
    # The hint follows the cause: a declared device that NCCL_IB_HCA names but the node lost (a
    # deleted rxe link, an unloaded driver) is not fixed by editing the setting.
    gone = [d for d in expected_devices(node, report) if d not in devices and any(spec_matches(s, d) for s in specs)]
    c.check(
        "/etc/nccl.conf",
        "nccl.hca_matches",
        bool(matched),
        f"a device matching {hca}",
        ", ".join(matched) or f"none (devices: {', '.join(devices) or 'none'})",
        f"NCCL would fall back to sockets: {', '.join(gone)}, which NCCL_IB_HCA names as the inventory declares, "
        "is gone from the node (rdma.device_present): bring it back (driver, link, card), not the setting"
        if gone
        else "NCCL would fall back to sockets: fix NCCL_IB_HCA in the inventory (nccl.env) or rdma.devices",
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
