"""RoCE's lossless chain as one declaration: the class RoCE traffic travels in (a DSCP and the
802.1p priority it maps to), the congestion notifications' own class, and whether DCQCN's ECN
marking is on. Everything else the chain needs is derived here, so that no two places of it can
disagree: the RDMA-CM and verbs ToS, NCCL_IB_TC and NCCL_IB_SL, perftest's --tclass, the PFC
mask and the DSCP → priority entries.

Field figures (docs/roce-qos.md): NVIDIA's default is DSCP 26 on priority 3 (ToS 106 with the
ECN-capable bit) and CNPs on priority 6 with DSCP 48, DCQCN on; Meta's training fabric runs PFC
alone, without DCQCN (SIGCOMM 2024).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from rdmaprov.inventory.settings import Section
from rdmaprov.parsers.roce_qos import NicQos, QosState
from rdmaprov.quoting import sh, sh_join

# ECN-capable transport, ECT(0): the low two bits of the ToS byte a switch may mark as congested.
ECT0 = 0b10
# Fabrics where the hosts set the chain; on SoftRoCE only the IP header's class (no DCB on the NIC).
HOST_QOS_FABRICS = frozenset({"roce", "softroce"})


@dataclass(frozen=True)
class RoceQos:
    """The roce_qos section. `profile` off: rdmaprov leaves QoS alone (and checks none of it)."""

    profile: str = "off"
    priority: int = 3
    dscp: int = 26
    cnp_priority: int = 6
    cnp_dscp: int = 48
    tool: str = "dcb"
    firmware: bool = False  # also the NICs' persistent DCQCN and CNP settings (mstconfig/mlxconfig)

    @classmethod
    def from_settings(cls, settings: Mapping[str, object]) -> RoceQos:
        """The roce_qos section after fill_defaults."""
        qos = Section.of(settings, ("roce_qos",))
        cnp = qos.section("cnp")
        return cls(
            qos.text("profile"),
            qos.integer("priority"),
            qos.integer("dscp"),
            cnp.integer("priority"),
            cnp.integer("dscp"),
            qos.text("tool"),
            qos.flag("firmware"),
        )

    def settings(self) -> dict[str, object]:
        """The section back in the inventory's shape (what node-check's expectations carry)."""
        cnp = {"priority": self.cnp_priority, "dscp": self.cnp_dscp}
        return {
            "profile": self.profile,
            "priority": self.priority,
            "dscp": self.dscp,
            "cnp": cnp,
            "tool": self.tool,
            "firmware": self.firmware,
        }

    @property
    def enabled(self) -> bool:
        return self.profile != "off"

    @property
    def ecn(self) -> bool:
        """DCQCN on the RoCE priority: packets ECN-capable, NICs reacting to CNPs."""
        return self.profile == "dcqcn"

    @property
    def tos(self) -> int:
        """The IP ToS byte of RoCE v2 packets: the DSCP in the top six bits, ECT(0) under DCQCN
        (26 → 106, NVIDIA's figure; 104 without ECN)."""
        return self.dscp << 2 | (ECT0 if self.ecn else 0)

    @property
    def pfc(self) -> tuple[bool, ...]:
        """PFC per priority 0–7: on for the RoCE priority only (CNPs must never be paused)."""
        return tuple(p == self.priority for p in range(8))

    @property
    def dscp_priorities(self) -> dict[int, int]:
        """The DSCP → priority entries the NIC is given (trust DSCP classifies by them)."""
        return {self.dscp: self.priority, self.cnp_dscp: self.cnp_priority}

    def nccl_env(self) -> dict[str, str]:
        """What NCCL needs to send in the class: the GRH traffic class and the service level."""
        return {"NCCL_IB_TC": str(self.tos), "NCCL_IB_SL": str(self.priority)}

    def conflicts(self) -> list[str]:
        """Settings that each are valid but break the chain together."""
        problems = []
        if self.cnp_priority == self.priority:
            problems.append(
                f"roce_qos.cnp.priority is the RoCE priority {self.priority}: congestion notifications "
                "would wait behind the traffic they are meant to slow (and be paused by PFC)"
            )
        if self.cnp_dscp == self.dscp:
            problems.append(
                f"roce_qos.cnp.dscp is the RoCE DSCP {self.dscp}: switches could not give CNPs their own queue"
            )
        return problems

    def scope(self, fabric: str | None) -> str | None:
        """Why the chain is not the hosts' business on this fabric (None: it is)."""
        if fabric in HOST_QOS_FABRICS:
            return None
        if fabric == "infiniband":
            return "InfiniBand's quality of service is the subnet manager's (SL to VL), not the hosts'"
        if fabric == "erdma":
            return "eRDMA's congestion control is the cloud's own"
        return f"fabric {fabric or 'unset'} is not RoCE"

    def reads_firmware(self, fabric: str | None) -> bool:
        """Whether the NICs' firmware settings are read and set: declared, and the NIC side is the
        hosts' (RoCE on NICs with DCB)."""
        return self.firmware and self.dcb_scope(fabric) is None

    def dcb_scope(self, fabric: str | None) -> str | None:
        """Why the NIC side (trust, PFC, ECN) is not set here (None: it is)."""
        if fabric == "softroce":
            return "SoftRoCE runs on NICs without DCB (no PFC, no DSCP trust, no DCQCN)"
        return self.scope(fabric)


@dataclass(frozen=True)
class QosLink:
    """One link of the chain on one node: what it must be, what it is, and the shell lines that
    set it (run now where it differs, and at every boot). `unknown`: why it cannot be read or set
    here; `blocking`: the node cannot carry lossless RoCE as it is (a NIC without DCB, the tool
    missing), which no deploy can mend; otherwise a link that is simply not exposed (no ECN files)."""

    check: str  # roce.tos, roce.tclass, roce.trust, roce.pfc, roce.dscp_map, roce.ecn, roce.cnp, roce.firmware
    subject: str
    expected: str
    found: str
    ok: bool
    commands: tuple[str, ...] = ()
    unknown: str | None = None
    blocking: bool = False
    # In the NIC's firmware: set once (not by the boot unit), in force from the next boot on.
    next_boot: bool = False


def _mask(pfc: tuple[bool, ...]) -> str:
    return ",".join("1" if on else "0" for on in pfc)


# At boot an mlx5 device appears after its netdev: wait for it (at most a minute) before its lines.
_WAIT = "for i in $(seq 60); do [ -e {path} ] && break; sleep 1; done"


def _configfs_lines(device: str, port: int, tos: int) -> tuple[str, ...]:
    """RDMA-CM's default ToS of one port: the device there, configfs mounted, rdma_cm loaded, the
    device's group made (the kernel then fills in its ports)."""
    group = f"/sys/kernel/config/rdma_cm/{device}"
    return (
        _WAIT.format(path=sh(f"/sys/class/infiniband/{device}")),
        "modprobe rdma_cm",
        "mountpoint -q /sys/kernel/config || mount -t configfs none /sys/kernel/config",
        sh_join(["mkdir", "-p", group]),
        f"echo {tos} > {sh(f'{group}/ports/{port}/default_roce_tos')}",
    )


def qos_devices(state: QosState, named: list[str], storage: tuple[str, ...]) -> list[str]:
    """The RDMA devices the chain is set on: those the inventory names (NodeConfig.named_devices),
    else every device with a RoCE port but the storage HCAs."""
    if named:
        return named
    return sorted(set(state.tos) - set(storage))


def chain_links(
    qos: RoceQos, fabric: str | None, state: QosState, named: list[str], storage: tuple[str, ...]
) -> list[QosLink]:
    """Every link of the chain this node's fabric lets the hosts set (none outside RoCE)."""
    if qos.scope(fabric) is not None:
        return []
    devices = qos_devices(state, named, storage)
    links = host_links(qos, state, devices)
    if qos.dcb_scope(fabric) is not None:
        return links
    firmware = firmware_links(qos, state, devices) if qos.reads_firmware(fabric) else []
    return links + nic_links(qos, state, devices) + firmware


def host_links(qos: RoceQos, state: QosState, devices: list[str]) -> list[QosLink]:
    """The host side, on any RoCE device (SoftRoCE too): RDMA-CM's ToS per port, and the verbs
    traffic class where the driver has one (mlx5's tc/1, one per device, which overrides every QP's)."""
    links = []
    for device in devices:
        ports = state.tos.get(device, {})
        for port in sorted(ports) or [1]:
            found = ports.get(port)
            seen = "unset (0)" if found is None else str(found)
            if not state.configfs:
                seen = "no RDMA-CM configfs (rdma_cm not loaded or configfs not mounted)"
            lines = _configfs_lines(device, port, qos.tos)
            links.append(QosLink("roce.tos", f"{device} port {port}", str(qos.tos), seen, found == qos.tos, lines))
        if device in state.tclass:
            found = state.tclass[device]
            path = sh(f"/sys/class/infiniband/{device}/tc/1/traffic_class")
            line = f"echo tclass={qos.tos} > {path}"
            links.append(QosLink("roce.tclass", device, str(qos.tos), str(found), found == qos.tos, (line,)))
    return links


def nic_links(qos: RoceQos, state: QosState, devices: list[str]) -> list[QosLink]:
    """The NIC side of each device's netdevs: trust DSCP, PFC on the RoCE priority alone, the DSCP
    → priority entries (set with the declared tool), and mlx5's ECN/CNP files."""
    links = []
    for netdev in sorted({n for d in devices for n in state.netdevs.get(d, ())}):
        nic = state.nics.get(netdev) or NicQos(netdev)
        links += _dcb_links(qos, nic) + _ecn_links(qos, nic)
    return links


def _dcb_commands(qos: RoceQos, netdev: str) -> dict[str, tuple[str, ...]]:
    """{check: lines} setting trust, PFC and the DSCP entries with the declared tool. With dcb the
    entries set the trust too: mlx5 trusts DSCP while its app table has DSCP entries (iproute2
    6.1, Debian 12's, has no `dcb apptrust`)."""
    entries = qos.dscp_priorities
    if qos.tool == "mlnx_qos":
        return {
            "roce.trust": (sh_join(["mlnx_qos", "-i", netdev, "--trust", "dscp"]),),
            "roce.pfc": (sh_join(["mlnx_qos", "-i", netdev, "--pfc", _mask(qos.pfc)]),),
            "roce.dscp_map": tuple(
                sh_join(["mlnx_qos", "-i", netdev, "--dscp2prio", f"set,{d},{p}"]) for d, p in entries.items()
            ),
        }
    table = (sh_join(["dcb", "app", "replace", "dev", netdev, "dscp-prio", *(f"{d}:{p}" for d, p in entries.items())]),)
    pfc = (sh_join(["dcb", "pfc", "set", "dev", netdev, "prio-pfc", "all:off", f"{qos.priority}:on"]),)
    return {"roce.trust": table, "roce.pfc": pfc, "roce.dscp_map": table}


def _dcb_blocked(qos: RoceQos, nic: NicQos) -> str | None:
    """Why trust, PFC and the DSCP entries cannot be read or set on this NIC (None: they can)."""
    if nic.unsupported:
        return f"{nic.netdev} has no DCB ({nic.tool}: {nic.unsupported})"
    if not nic.tool:
        return "neither dcb (iproute2) nor mlnx_qos is installed"
    if qos.tool == "mlnx_qos" and nic.tool != "mlnx_qos":
        return "roce_qos.tool is mlnx_qos but it is not installed (MLNX_OFED or DOCA)"
    return None


def _dcb_links(qos: RoceQos, nic: NicQos) -> list[QosLink]:
    entries = qos.dscp_priorities
    shown = " ".join(f"{d}:{nic.dscp_priorities.get(d, '-')}" for d in entries)
    found = {
        "roce.trust": (nic.trust, nic.trust == "dscp"),
        "roce.pfc": (_mask(nic.pfc) if nic.pfc is not None else None, nic.pfc == qos.pfc),
        "roce.dscp_map": (shown, all(nic.dscp_priorities.get(d) == p for d, p in entries.items())),
    }
    expected = {
        "roce.trust": "dscp",
        "roce.pfc": _mask(qos.pfc),
        "roce.dscp_map": " ".join(f"{d}:{p}" for d, p in entries.items()),
    }
    blocked = _dcb_blocked(qos, nic)
    links = []
    for check, commands in _dcb_commands(qos, nic.netdev).items():
        if blocked is not None:
            links.append(QosLink(check, nic.netdev, expected[check], "", False, commands, blocked, blocking=True))
        else:
            seen, ok = found[check]
            links.append(QosLink(check, nic.netdev, expected[check], seen or "not shown", ok, commands))
    return links


def _ecn_links(qos: RoceQos, nic: NicQos) -> list[QosLink]:
    """DCQCN per priority (both roles: the notification point marks, the reaction point slows) and
    the CNPs' class, where the driver exposes them (MLNX_OFED's mlx5: /sys/class/net/NETDEV/ecn)."""
    netdev, files = nic.netdev, nic.ecn
    base = f"/sys/class/net/{netdev}/ecn"
    enable = 1 if qos.ecn else 0
    wanted = {
        f"roce_np/enable/{qos.priority}": ("roce.ecn", enable),
        f"roce_rp/enable/{qos.priority}": ("roce.ecn", enable),
        "roce_np/cnp_802p_prio": ("roce.cnp", qos.cnp_priority),
        "roce_np/cnp_dscp": ("roce.cnp", qos.cnp_dscp),
    }
    if not files:
        why = f"the driver of {netdev} exposes no ECN settings ({base}: MLNX_OFED's mlx5 has them)"
        if qos.firmware:
            why += "; the firmware's are checked (roce.firmware)"
        return [QosLink("roce.ecn", netdev, f"DCQCN {'on' if qos.ecn else 'off'}", "", False, (), why)]
    links = []
    for name, (check, value) in wanted.items():
        subject = f"{netdev} {name}"
        if name not in files:
            why = f"{base}/{name} is missing (this driver's ECN files differ)"
            links.append(QosLink(check, subject, str(value), "", False, (), why))
            continue
        line = f"echo {value} > {sh(f'{base}/{name}')}"
        links.append(QosLink(check, subject, str(value), str(files[name]), files[name] == value, (line,)))
    return links


# Why a node's firmware settings could not be read, and what apply does about it.
_FIRMWARE_TOOLS = (
    "neither mstconfig (Debian's and RHEL's mstflint package) nor mlxconfig (NVIDIA MFT) is installed: "
    "apply installs mstflint, then reads and sets them (a changed setting owes a reboot)"
)


def firmware_wanted(qos: RoceQos, port: int, mask: int) -> dict[str, int]:
    """The firmware settings of one NIC port: DCQCN on the RoCE priority (a bit of its priority
    mask, the other priorities' bits left as they are) and the CNPs' priority and DSCP."""
    bit = 1 << qos.priority
    return {
        f"ROCE_CC_PRIO_MASK_P{port}": mask | bit if qos.ecn else mask & ~bit,
        f"CNP_802P_PRIO_P{port}": qos.cnp_priority,
        f"CNP_DSCP_P{port}": qos.cnp_dscp,
    }


def firmware_links(qos: RoceQos, state: QosState, devices: list[str]) -> list[QosLink]:
    """The NICs' persistent firmware settings (roce_qos.firmware): what DCQCN and the CNPs are
    at every boot before anything else sets them, and the only place to set them where the
    driver has no ECN files (the distro's mlx5). A setting is judged for the next boot, and
    where the firmware shows the running value too, a change not yet in force is named."""
    links = []
    for device in devices:
        nic = state.firmware.get(device)
        if nic is None:
            continue
        if not nic.tool:
            links.append(
                QosLink("roce.firmware", device, "DCQCN and CNP firmware settings", "", False, (), _FIRMWARE_TOOLS)
            )
            continue
        config = nic.config
        wanted: dict[str, int] = {}
        for port in state.firmware_ports(device):
            wanted |= firmware_wanted(qos, port, config.next_boot.get(f"ROCE_CC_PRIO_MASK_P{port}") or 0)
        for name, want in wanted.items():
            subject = f"{device} {name}"
            planned, running = config.next_boot.get(name), config.current.get(name)
            if planned is None:
                errors = "; ".join(config.errors) or "no such setting in its query"
                why = f"{nic.tool} cannot read {name} of {device} ({nic.pci}): {errors}"
                links.append(QosLink("roce.firmware", subject, str(want), "", False, (), why))
                continue
            found = str(planned) if running in (None, planned) else f"{running} now, {planned} from the next boot"
            line = f"{nic.tool} -y -d {sh(nic.pci)} set {name}={want}"
            commands = () if planned == want else (line,)
            ok = planned == want and running in (None, want)
            links.append(QosLink("roce.firmware", subject, str(want), found, ok, commands, next_boot=True))
    return links
