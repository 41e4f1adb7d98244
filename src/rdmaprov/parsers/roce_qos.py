"""What a node's RoCE QoS chain is now, from the lines facts/node_report.py's roce_qos_command prints:
each RoCE port's RDMA-CM ToS (configfs), each device's verbs traffic class (mlx5's tc/1), and per
NIC netdev what mlnx_qos or iproute2's dcb shows (trust, PFC, DSCP → priority) and mlx5's ECN
files, and the NIC's pause counters (`ethtool -S`). Pure functions over text; tested on real
outputs (tests/fixtures/roce_qos/README.md).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace

from rdmaprov.parsers.mlxconfig import FirmwareConfig, parse_mlxconfig_query

# dcb prints DSCP values by their names unless given -N (iproute2's dcb_app.c): CSn, AFxy, EF.
_DSCP_NAMES = {f"CS{n}": 8 * n for n in range(8)} | {"EF": 46}
_DSCP_NAMES |= {f"AF{x}{y}": 8 * x + 2 * y for x in range(1, 5) for y in range(1, 4)}


# A firmware setting of one NIC port (ROCE_CC_PRIO_MASK_P2, CNP_DSCP_P1…), by its port number.
_PORT_SETTING = re.compile(r".+_P(\d+)")


@dataclass(frozen=True)
class NicQos:
    """One NIC netdev's DCB state as its tool shows it. `unsupported`: what the tool said when the
    NIC has no DCB (a virtio or veth NIC: "Operation not supported")."""

    netdev: str
    tool: str = ""  # mlnx_qos or dcb; "" when neither is installed
    trust: str | None = None  # dscp or pcp; None when the tool does not say
    pfc: tuple[bool, ...] | None = None  # per priority 0–7
    dscp_priorities: dict[int, int] = field(default_factory=dict)
    unsupported: str | None = None
    ecn: dict[str, int] = field(default_factory=dict)  # "roce_np/enable/3" → 1, "roce_np/cnp_dscp" → 48


@dataclass(frozen=True)
class QosState:
    """A node's chain as read: what verify compares with roce_qos and apply sets where it differs."""

    tos: dict[str, dict[int, int | None]] = field(default_factory=dict)  # device → port → ToS; None: unset
    tclass: dict[str, int | None] = field(default_factory=dict)  # device → verbs traffic class (mlx5)
    netdevs: dict[str, tuple[str, ...]] = field(default_factory=dict)  # device → its NIC netdevs
    nics: dict[str, NicQos] = field(default_factory=dict)
    configfs: bool = True  # RDMA-CM's configfs is there (rdma_cm loaded, configfs mounted)
    pause: dict[str, dict[str, int]] = field(default_factory=dict)  # NIC netdev → pause_counters()
    firmware: dict[str, FirmwareNic] = field(default_factory=dict)  # device → its firmware settings
    lags: dict[str, str] = field(default_factory=dict)  # a RoCE LAG device → its bond

    def firmware_ports(self, device: str) -> tuple[int, ...]:
        """The NIC ports whose firmware settings are the device's: its PCI function's, and under
        RoCE LAG (both PFs of the NIC in one bond, one device for both) every port its query shows."""
        nic = self.firmware[device]
        shown = {int(m[1]) for k in nic.config.next_boot if (m := _PORT_SETTING.fullmatch(k)) is not None}
        return tuple(sorted(shown)) if device in self.lags and shown else (nic.port,)


@dataclass(frozen=True)
class FirmwareNic:
    """A RoCE device's persistent firmware settings (read with roce_qos.firmware): the tool that
    read them ("" when neither mstconfig nor mlxconfig is installed) and its PCI function."""

    pci: str
    tool: str = ""
    config: FirmwareConfig = field(default_factory=FirmwareConfig)

    @property
    def port(self) -> int:
        """The NIC's physical port this function drives, as its settings number it (`_P1`, `_P2`):
        a ConnectX's PCI function N is its port N + 1."""
        function = self.pci.rpartition(".")[2]
        return int(function) + 1 if function.isdigit() else 1


# Pause frames by direction and priority in each driver's `ethtool -S` names, and link-level
# (802.3x) pause beside them: mlx5 `rx_prio3_pause`, `tx_global_pause` (it prints a priority's
# counters only while PFC is on for it); bnxt_en `rx_pfc_ena_frames_pri3`, `rx_pause_frames`; ice
# `rx_priority_3_xoff.nic` (xoff: a pause; xon ends one), `link_xoff_rx.nic`.
_PFC_NAME = re.compile(r"(rx|tx)_(?:prio(\d)_pause|pfc_ena_frames_pri(\d)|priority_(\d)_xoff(?:\.nic)?)")
_LINK_NAME = re.compile(r"(?:(rx|tx)_(?:global_pause|pause_frames)|link_xoff_(rx|tx)(?:\.nic)?)")
# mlx5's PFC storm prevention: a port that kept sending pause too long stopped doing so.
_STORM_NAME = re.compile(r"tx_pause_storm_(warning|error)_events")
# The time paused on a priority, in microseconds (rx: this port held by its peer; tx: this port
# holding its peer): mlx5 `rx_prio3_pause_duration` (its driver's name, which RCCL's telemetry
# reads too), bnxt_en `pfc_pri3_rx_duration_us`. ice counts frames only.
_PFC_DURATION = re.compile(r"(?:(rx|tx)_prio(\d)_pause_duration|pfc_pri(\d)_(rx|tx)_duration_us)")
# What the roce_qos section keeps of `ethtool -S`: the lines these names can be among.
PAUSE_WORDS = "pause|pfc|xoff"


def pause_counters(text: str) -> dict[str, int]:
    """`ethtool -S NETDEV` (or the lines of it naming pause) → {"rx_pfc_prio3": N, "tx_pfc_prio3": N,
    "rx_link_pause": N, "tx_link_pause": N, "pause_storm_error": N, "rx_pfc_prio3_pause_us": µs…},
    whatever the driver calls them; a NIC without such counters (virtio) gives {}."""
    found = {}
    for line in text.splitlines():
        name, colon, value = line.strip().partition(":")
        if not colon or not value.strip().isdigit():
            continue
        if (m := _PFC_NAME.fullmatch(name)) is not None:
            priority = next(group for group in m.groups()[1:] if group is not None)
            found[f"{m[1]}_pfc_prio{priority}"] = int(value)
        elif (m := _LINK_NAME.fullmatch(name)) is not None:
            found[f"{m[1] or m[2]}_link_pause"] = int(value)
        elif (m := _STORM_NAME.fullmatch(name)) is not None:
            found[f"pause_storm_{m[1]}"] = int(value)
        elif (m := _PFC_DURATION.fullmatch(name)) is not None:
            found[f"{m[1] or m[4]}_pfc_prio{m[2] or m[3]}_pause_us"] = int(value)
    return found


def dscp_value(word: str) -> int | None:
    """A DSCP as dcb prints it: a number, or a name (AF31 → 26, CS6 → 48, EF → 46); None for a
    name this table does not know (the entry is then not read, rather than the whole report)."""
    return int(word) if word.isdigit() else _DSCP_NAMES.get(word.upper())


def parse_mlnx_qos(netdev: str, text: str) -> NicQos:
    """`mlnx_qos -i NETDEV`: the trust state, the PFC row and the dscp2prio table (TABs or spaces)."""
    trust = pfc = None
    mapping: dict[int, int] = {}
    for line in text.splitlines():
        words = line.split()
        if line.startswith("Priority trust state:"):
            trust = words[-1]
        elif words[:1] == ["enabled"] and len(words) == 9:
            pfc = tuple(w == "1" for w in words[1:])
        elif (m := re.fullmatch(r"prio:(\d) dscp:([\d,]*)", line.strip())) is not None:
            mapping |= {int(d): int(m.group(1)) for d in m.group(2).split(",") if d}
    if trust is None and pfc is None:
        # the last line says why (a Python traceback's first line would not)
        said = next((line.strip() for line in reversed(text.splitlines()) if line.strip()), "no output")
        return NicQos(netdev, "mlnx_qos", unsupported=said)
    return NicQos(netdev, "mlnx_qos", trust, pfc, mapping)


def parse_dcb(netdev: str, pfc_text: str, app_text: str) -> NicQos:
    """`dcb pfc show dev NETDEV` and `dcb app show dev NETDEV dscp-prio`. dcb 6.1 has no apptrust:
    mlx5 trusts DSCP exactly while its app table has DSCP entries (the driver switches on the
    first and back on the last), so trust is read from the table."""
    for text in (pfc_text, app_text):
        if "not supported" in text.lower():
            return NicQos(netdev, "dcb", unsupported=text.strip().splitlines()[0])
    pfc = None
    if (m := re.search(r"prio-pfc((?:\s+\d:(?:on|off))+)", pfc_text)) is not None:
        states = dict(word.split(":") for word in m.group(1).split())
        pfc = tuple(states.get(str(p)) == "on" for p in range(8))
    mapping = {}
    if (m := re.search(r"dscp-prio((?:\s+\w+:\d)+)", app_text)) is not None:
        for word in m.group(1).split():
            name, prio = word.split(":")
            if (dscp := dscp_value(name)) is not None:
                mapping[dscp] = int(prio)
    return NicQos(netdev, "dcb", "dscp" if mapping else "pcp", pfc, mapping)


def _number(text: str) -> int | None:
    """The last number in a sysfs value ("106", "Global tclass=160"); None for "-" or nothing."""
    found = re.findall(r"-?\d+", text)
    return int(found[-1]) if found else None


def parse_qos_state(text: str) -> QosState:
    """The roce_qos section's lines: `tos DEV PORT VALUE|-`, `tclass DEV TEXT`, `netdev DEV NETDEV`,
    `mlnx_qos NETDEV LINE`, `dcb_pfc NETDEV LINE`, `dcb_app NETDEV LINE`, `ecn NETDEV FILE:VALUE`,
    `ethtool NETDEV LINE`, `fwtool DEV TOOL|- PCI`, `fw DEV LINE`, `lag DEV BOND` and `configfs missing`."""
    tos: dict[str, dict[int, int | None]] = {}
    tclass: dict[str, int | None] = {}
    netdevs: dict[str, tuple[str, ...]] = {}
    lines: dict[tuple[str, str], list[str]] = {}
    ecn: dict[str, dict[str, int]] = {}
    tools: dict[str, tuple[str, str]] = {}
    lags: dict[str, str] = {}
    for line in text.splitlines():
        kind, _, rest = line.partition(" ")
        name, _, value = rest.partition(" ")
        if kind == "tos" and (m := re.fullmatch(r"(\d+) (\S+)", value)) is not None:
            tos.setdefault(name, {})[int(m.group(1))] = _number(m.group(2))
        elif kind == "tclass":
            tclass[name] = _number(value)
        elif kind == "lag":
            lags[name] = value.strip()
        elif kind == "netdev":
            netdevs[name] = (*netdevs.get(name, ()), value.strip())
        elif kind == "fwtool" and len(words := value.split()) == 2:
            tools[name] = ("" if words[0] == "-" else words[0].rpartition("/")[2], words[1])
        elif kind in ("mlnx_qos", "dcb_pfc", "dcb_app", "ethtool", "fw"):
            lines.setdefault((kind, name), []).append(value)
        elif kind == "ecn" and ":" in value:
            path, _, number = value.rpartition(":")
            if number.strip().isdigit():
                ecn.setdefault(name, {})[path] = int(number)
    nics = {}
    for netdev in sorted({n for devs in netdevs.values() for n in devs}):
        if (text_of := lines.get(("mlnx_qos", netdev))) is not None:
            nic = parse_mlnx_qos(netdev, "\n".join(text_of))
        elif ("dcb_pfc", netdev) in lines or ("dcb_app", netdev) in lines:
            pfc, app = ("\n".join(lines.get((k, netdev), [])) for k in ("dcb_pfc", "dcb_app"))
            nic = parse_dcb(netdev, pfc, app)
        else:
            nic = NicQos(netdev)
        nics[netdev] = replace(nic, ecn=ecn.get(netdev, {}))
    pause = {
        netdev: pause_counters("\n".join(text_of)) for (kind, netdev), text_of in lines.items() if kind == "ethtool"
    }
    configfs = "configfs missing" not in text.splitlines()
    firmware = {
        device: FirmwareNic(pci, tool, parse_mlxconfig_query("\n".join(lines.get(("fw", device), []))))
        for device, (tool, pci) in tools.items()
    }
    found = {netdev: counters for netdev, counters in pause.items() if counters}
    return QosState(tos, tclass, netdevs, nics, configfs, found, firmware, lags)
