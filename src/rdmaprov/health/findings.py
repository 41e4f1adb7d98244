"""What every check produces: a finding (host, subject, expected, found, hint), the registry of
check ids with the deploy that establishes each, and the Checker that collects findings."""

from __future__ import annotations

from dataclasses import dataclass, replace


@dataclass(frozen=True)
class Check:
    """One kind of check: a stable id (JSON, JUnit, drift), the label tables show, the deploy that
    establishes what it looks at (None: the hardware's own state, which no deploy changes), and
    whether it reads the node's wear and errors (counters, ECC, Xids, DCGM) rather than a setting:
    the readiness report shows those apart, as health findings."""

    id: str
    label: str
    deploy: str | None = None
    health: bool = False


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
        Check("rdma.port_errors", "error counters", health=True),
        Check("rdma.pcie_link", "PCIe link"),
        Check("rdma.active_mtu", "active MTU", "mtu"),
        Check("mtu.netdev", "MTU", "mtu"),
        Check("netns.mode", "netns mode", "netns_mode"),
        Check("nccl.conf_present", "present", "nccl_env"),
        Check("nccl.hca_matches", "NCCL_IB_HCA matches devices", "nccl_env"),
        Check("nccl.hca_excludes_storage", "NCCL_IB_HCA excludes storage HCAs", "nccl_env"),
        Check("nccl.library", "library programs load", "nccl"),
        Check("nccl.tests_library", "library nccl-tests load", "nccl"),
        Check("nccl.net_plugin", "net plugin loads", "erdma"),
        Check("nccl.framework", "the framework's NCCL"),
        Check("gpu.count", "count"),
        Check("gpu.driver_version", "driver version", "gpu_driver"),
        Check("gpu.ecc_mode", "ECC mode"),
        Check("gpu.ecc_uncorrectable", "uncorrectable ECC errors", health=True),
        Check("gpu.row_remap", "memory row remapping", health=True),
        Check("gpu.hw_slowdown", "hardware or thermal slowdown", health=True),
        Check("gpu.pcie_width", "PCIe link width"),
        Check("gpu.persistence", "persistence mode"),
        Check("gpu.mig_mode", "MIG mode"),
        Check("gpu.nvlink", "NVLinks active"),
        Check("gpu.xid", "Xid errors since boot", health=True),
        Check("gpu.fabric_manager", "fabric manager", "gpu_driver"),
        Check("gpu.fabric", "NVSwitch fabric"),
        Check("gpu.acs", "PCIe ACS redirect"),
        Check("gpu.iommu", "IOMMU"),
        Check("gpu.hca_affinity", "nearest HCA"),
        Check("gpu.dcgm_diag", "DCGM diagnostic", health=True),
        Check("roce.qos", "RoCE QoS", "roce_qos"),
        Check("roce.dcb", "DCB", "roce_qos"),
        Check("roce.tos", "RDMA-CM ToS", "roce_qos"),
        Check("roce.tclass", "verbs traffic class", "roce_qos"),
        Check("roce.trust", "trust", "roce_qos"),
        Check("roce.pfc", "PFC per priority", "roce_qos"),
        Check("roce.dscp_map", "DSCP to priority", "roce_qos"),
        Check("roce.ecn", "ECN (DCQCN)", "roce_qos"),
        Check("roce.cnp", "CNP class", "roce_qos"),
        Check("roce.firmware", "NIC firmware (DCQCN, CNPs)", "roce_qos"),
        Check("roce.ecn_activity", "no ECN marks or CNPs", health=True),
        Check("roce.dcqcn", "ECN marks answered", health=True),
        Check("roce.pause", "no pause outside the RoCE priority", health=True),
        Check("roce.pause_time", "time paused on the RoCE priority", health=True),
        Check("containers.enroot", "enroot gives containers RDMA"),
        Check("limits.memlock_login", "login limit", "limits"),
        Check("limits.memlock_services", "service limit", "limits"),
        Check("exporter.answers", "exporter answers", "exporter"),
        Check("fleet.kernel", "same as the fleet"),
        Check("fleet.rdma_core", "same as the fleet", "rdma_userspace"),
        Check("fleet.gpu_driver", "same as the fleet", "gpu_driver"),
        Check("fleet.cuda", "same as the fleet", "gpu_driver"),
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
    drift: str | None = None  # check only, for a failure: corrective, intentional, new or manual
    id: str = ""
    deploy: str | None = None
    # Could not be judged (the node does not report it): not a failure, never shown as a pass.
    unknown: bool = False


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
    unknown: bool = False,
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
        unknown=unknown,
    )


class Checker:
    """Collects one host's findings; `check` records one and says whether it passed."""

    def __init__(self, host: str, fabric: str | None) -> None:
        self.host = host
        self.fabric = fabric
        self.findings: list[Finding] = []

    def check(
        self,
        subject: str,
        check_id: str,
        ok: bool,
        expected: str,
        found: str,
        hint: str = "",
        label: str | None = None,
        apply_fixes: bool = True,
    ) -> bool:
        """Record one finding. `apply_fixes` False: its cause lies outside what the check's deploy
        writes (another file sets the value), so no deploy is named and check calls it manual."""
        found_here = finding(self.host, self.fabric, check_id, subject, ok, expected, found, hint, label)
        self.findings.append(found_here if apply_fixes else replace(found_here, deploy=None))
        return ok

    def judge(
        self, subject: str, check_id: str, unknown: str | None, ok: bool, expected: str, found: str, hint: str
    ) -> None:
        """`check` when the node reported what the check looks at; else, with `unknown` saying
        why not, record it as unknown (ok and found are then meaningless and ignored)."""
        if unknown is not None:
            self.unknown(subject, check_id, expected, unknown)
        else:
            self.check(subject, check_id, ok, expected, found, hint)

    def not_applicable(self, subject: str, check_id: str, expected: str, why: str) -> None:
        """Record that `check_id` does not apply to this node, and why (a fabric manager on a
        node without NVSwitch): a pass that says so rather than a silent one."""
        self.findings.append(
            finding(self.host, self.fabric, check_id, subject, True, expected, f"not applicable: {why}")
        )

    def unknown(self, subject: str, check_id: str, expected: str, why: str) -> None:
        """Record that `check_id` could not be judged here, and why: the node does not report
        what it looks at (a field N/A, a device without the sysfs file)."""
        self.findings.append(
            finding(self.host, self.fabric, check_id, subject, True, expected, f"unknown: {why}", unknown=True)
        )
