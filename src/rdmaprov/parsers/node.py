"""One report per node, read in one round trip: RDMA ports from sysfs and ibv_devinfo, netns mode,
netdev MTUs, memlock, NCCL config, GPUs and the installed NCCL — the inputs of `facts` and `verify`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace

from rdmaprov.parsers.counters import parse_port_counters
from rdmaprov.parsers.dcgm import DiagResult, parse_diag
from rdmaprov.parsers.enroot import EnrootState, parse_enroot
from rdmaprov.parsers.fabric import FabricManagerState, parse_fabric_manager, parse_nvswitches
from rdmaprov.parsers.framework import FrameworkNccl, parse_frameworks
from rdmaprov.parsers.ibv_devinfo import Device, parse_ibv_devinfo
from rdmaprov.parsers.ldd import Linkage, parse_ldd
from rdmaprov.parsers.limits import SettingLine, parse_setting_lines
from rdmaprov.parsers.lspci import AcsReport, parse_lspci
from rdmaprov.parsers.nvidia_smi import GpuHealth, parse_nvidia_smi_q
from rdmaprov.parsers.nvidia_topo import GpuTopology, parse_topo_matrix
from rdmaprov.parsers.nvlink import GpuLinks, parse_nvlink_status
from rdmaprov.parsers.pci_places import PciPlace, parse_pci_places
from rdmaprov.parsers.pcie import PciLink, parse_pci_links
from rdmaprov.parsers.rdma import parse_rdma_system
from rdmaprov.parsers.roce_qos import QosState, parse_qos_state
from rdmaprov.parsers.xid import Xid, parse_xids

SECTION = "@@ "
DCGM_NOTE = "rdmaprov: "  # starts the report's own line on why DCGM's diagnostic gave no answer
ZERO_GID = "0000:0000:0000:0000:0000:0000:0000:0000"


@dataclass
class SysfsGid:
    index: int
    gid: str
    type: str  # "RoCE v2", "IB/RoCE v1"
    netdev: str


@dataclass
class SysfsPort:
    """A port as /sys/class/infiniband shows it (what the kernel believes right now)."""

    device: str
    port: int
    state: str = ""  # ACTIVE, DOWN, INIT...
    phys_state: str = ""  # LinkUp, Disabled, Polling...
    rate_gbps: float = 0.0
    rate_text: str = ""
    link_layer: str = ""
    gids: dict[int, SysfsGid] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return f"{self.device}/{self.port}"


@dataclass
class Gpu:
    name: str
    compute_cap: str
    driver_version: str


@dataclass
class NodeReport:
    ports: list[SysfsPort] = field(default_factory=list)
    devices: list[Device] = field(default_factory=list)
    netns: str | None = None
    mtus: dict[str, int] = field(default_factory=dict)
    memlock_login: str = ""
    memlock_services: str = ""
    memlock_lines: list[SettingLine] = field(default_factory=list)  # the files' lines that set it
    nccl_conf: dict[str, str] | None = None
    gpus: list[Gpu] = field(default_factory=list)
    gpu_health: list[GpuHealth] = field(default_factory=list)
    xids: list[Xid] = field(default_factory=list)  # since boot, as far as the kernel log goes back
    counters: dict[str, dict[str, int]] = field(default_factory=dict)  # port → error counter → total
    boot_id: str = ""  # the kernel's id of this boot: counters are only compared within one
    hostname: str = ""  # the node's own name, which NCCL's log lines use instead of the inventory's
    kernel: str = ""  # uname -r
    rdma_core: str = ""  # the rdma-core package's version
    release: str = ""  # distro and release from /etc/os-release, e.g. "debian 12"
    cuda_toolkits: list[str] = field(default_factory=list)  # versions under /usr/local/cuda-X.Y
    pci_links: dict[str, PciLink] = field(default_factory=dict)  # RDMA device → its PCIe link
    nvlinks: list[GpuLinks] = field(default_factory=list)
    # ldd of the NCCL net plugins found and of the programs asked for: file → what it resolves
    linkage: dict[str, Linkage] = field(default_factory=dict)
    nccl_libraries: list[str] = field(default_factory=list)
    nccl_plugins: list[str] = field(default_factory=list)
    # libnccl.so.2 as the dynamic linker's cache lists it, first (the one programs get) first:
    # (the path in the cache, the file it resolves to)
    nccl_linked: list[tuple[str, str]] = field(default_factory=list)
    gpu_topology: GpuTopology | None = None  # nvidia-smi topo -m: how far each GPU is from each NIC
    peer_memory: list[str] = field(default_factory=list)  # GPUDirect peer-memory modules loaded
    perftest_cuda: bool = False  # this perftest can write from GPU memory (--use_cuda)
    nvswitches: tuple[str, ...] = ()  # PCI addresses of the NVSwitches the node's bus shows
    # the fabric manager's version and service state; None where the report has no GPU section
    fabric_manager: FabricManagerState | None = None
    pci_places: list[PciPlace] = field(default_factory=list)  # GPUs' and RDMA devices' places on the PCI tree
    acs: AcsReport | None = None  # the PCI bridges' ACS state (lspci); None where not read (no GPUs)
    dcgm: DiagResult | None = None  # DCGM's diagnostic; None where it was not asked for
    roce_qos: QosState = field(default_factory=QosState)  # RoCE's QoS chain as the node has it
    frameworks: dict[str, FrameworkNccl] = field(default_factory=dict)  # by interpreter path
    enroot: EnrootState | None = None  # what enroot gives its containers; None where not read

    def port(self, device: str, number: int) -> SysfsPort | None:
        return next((p for p in self.ports if p.device == device and p.port == number), None)

    @property
    def nccl_version(self) -> str | None:
        """Highest libnccl.so.X.Y.Z version found."""
        versions = [v for v in map(nccl_library_version, self.nccl_libraries) if v]
        return max(versions, key=lambda v: tuple(map(int, v.split(".")))) if versions else None


def nccl_library_version(path: str) -> str | None:
    """The version NCCL's file name carries: …/libnccl.so.2.28.9 → 2.28.9."""
    match = re.search(r"/libnccl\.so\.(\d+\.\d+\.\d+)$", path)
    return match.group(1) if match else None


def split_sections(text: str) -> dict[str, list[str]]:
    sections: dict[str, list[str]] = {}
    current: list[str] | None = None
    for line in text.splitlines():
        if line.startswith(SECTION):
            current = sections.setdefault(line[len(SECTION) :].strip(), [])
        elif current is not None:
            current.append(line)
    return sections


def _state_word(value: str) -> str:
    """sysfs '4: ACTIVE' → 'ACTIVE'; '5: LinkUp' → 'LinkUp'."""
    return value.split(":", 1)[1].strip() if ":" in value else value.strip()


def parse_sysfs_ports(lines: list[str]) -> list[SysfsPort]:
    """`port DEV N KEY VALUE…` lines (see NodeFacts' command) → ports.

    GIDs come as three lines per index (`gid`, `gid_type`, `gid_ndev`), joined here.
    """
    ports: dict[tuple[str, int], SysfsPort] = {}
    attrs: dict[tuple[str, int, int], dict[str, str]] = {}
    for line in lines:
        parts = line.split(" ", 4)
        if len(parts) < 5 or parts[0] != "port" or not parts[2].isdigit():
            continue
        _, device, number, key, value = parts
        port = ports.setdefault((device, int(number)), SysfsPort(device, int(number)))
        if key == "state":
            port.state = _state_word(value)
        elif key == "phys_state":
            port.phys_state = _state_word(value)
        elif key == "rate":
            port.rate_text = value.strip()
            match = re.match(r"([\d.]+)\s*Gb/sec", value.strip())
            port.rate_gbps = float(match.group(1)) if match else 0.0
        elif key == "link_layer":
            port.link_layer = value.strip()
        elif key in ("gid", "gid_type", "gid_ndev"):
            index, _, rest = value.partition(" ")
            if index.isdigit():
                attrs.setdefault((device, int(number), int(index)), {})[key] = rest.strip()
    for (device, port_number, gid_index), found in attrs.items():
        gid = found.get("gid", "")
        if gid and gid != ZERO_GID:
            ports[(device, port_number)].gids[gid_index] = SysfsGid(
                gid_index, gid, found.get("gid_type", ""), found.get("gid_ndev", "")
            )
    return list(ports.values())


def parse_key_values(lines: list[str]) -> dict[str, str]:
    """KEY=value lines (nccl.conf), comments and blanks ignored."""
    values = {}
    for line in lines:
        line = line.strip()
        if line and not line.startswith("#") and "=" in line:
            key, _, value = line.partition("=")
            values[key.strip()] = value.strip().strip("'\"")
    return values


def parse_gpus(lines: list[str]) -> list[Gpu]:
    """`nvidia-smi --query-gpu=name,compute_cap,driver_version --format=csv,noheader`."""
    gpus = []
    for line in lines:
        parts = [p.strip() for p in line.split(",")]
        if len(parts) == 3 and parts[0] and not parts[0].startswith(("NVIDIA-SMI has failed", "No devices")):
            gpus.append(Gpu(*parts))
    return gpus


def parse_node_report(text: str) -> NodeReport:
    s = split_sections(text)
    qos = parse_qos_state("\n".join(s.get("roce_qos", [])))
    nccl_conf = s.get("nccl_conf")
    memlock = [line.strip() for line in s.get("memlock", [])]
    versions = [line.strip() for line in s.get("versions", [])] + ["", "", ""]
    return NodeReport(
        ports=parse_sysfs_ports(s.get("ports", [])),
        devices=parse_ibv_devinfo("\n".join(s.get("ibv_devinfo", []))),
        netns=parse_rdma_system("\n".join(s.get("rdma_system", []))).get("netns"),
        mtus={p[0]: int(p[1]) for p in (line.split() for line in s.get("mtu", [])) if len(p) == 2 and p[1].isdigit()},
        memlock_login=memlock[0] if memlock else "",
        memlock_services=memlock[1] if len(memlock) > 1 else "",
        memlock_lines=parse_setting_lines(s.get("memlock_lines", [])),
        nccl_conf=parse_key_values(nccl_conf) if nccl_conf is not None and nccl_conf != ["MISSING"] else None,
        gpus=parse_gpus(s.get("gpus", [])),
        gpu_health=parse_nvidia_smi_q("\n".join(s.get("nvidia_smi_q", []))),
        # RDMA ports by "device/port", the NICs' pause counters by netdev: judged alike, by growth
        counters=parse_port_counters(s.get("counters", [])) | qos.pause,
        boot_id="".join(s.get("boot_id", [])).strip(),
        hostname="".join(s.get("hostname", [])).strip(),
        xids=parse_xids(s.get("xid", [])),
        kernel=versions[0],
        rdma_core=versions[1],
        release=versions[2],
        cuda_toolkits=[line.strip().rsplit("cuda-", 1)[1] for line in s.get("cuda", []) if "/usr/local/cuda-" in line],
        pci_links=parse_pci_links(s.get("pci_links", [])),
        nvlinks=parse_nvlink_status("\n".join(s.get("nvlink", []))),
        linkage=parse_ldd(s.get("linkage", [])),
        nccl_libraries=sorted({line.strip() for line in s.get("nccl", []) if "libnccl.so" in line}),
        nccl_plugins=sorted({line.strip() for line in s.get("nccl", []) if "libnccl-net" in line}),
        nccl_linked=[(p[0], p[1]) for p in (line.split() for line in s.get("nccl_linker", [])) if len(p) == 2],
        gpu_topology=parse_topo_matrix("\n".join(s.get("gpu_topology", []))),
        peer_memory=[line.split()[1] for line in s.get("gpudirect", []) if line.startswith("module ")],
        perftest_cuda="perftest_cuda" in {line.strip() for line in s.get("gpudirect", [])},
        nvswitches=parse_nvswitches(s.get("nvswitches", [])),
        fabric_manager=parse_fabric_manager(s["fabric_manager"]) if s.get("fabric_manager") else None,
        pci_places=parse_pci_places(s.get("pci_places", [])),
        acs=parse_lspci("\n".join(s["acs"]) + "\n") if "acs" in s and s.get("pci_places") else None,
        dcgm=_dcgm(s["dcgm_diag"]) if "dcgm_diag" in s else None,
        roce_qos=qos,
        frameworks=parse_frameworks(s.get("frameworks", [])),
        enroot=parse_enroot(s.get("enroot", [])),
    )


def _dcgm(lines: list[str]) -> DiagResult:
    """The diagnostic's JSON; what kept it from answering (the report's own note) when it did not."""
    note = next((line[len(DCGM_NOTE) :] for line in lines if line.startswith(DCGM_NOTE)), None)
    result = parse_diag("\n".join(line for line in lines if not line.startswith(DCGM_NOTE)))
    return replace(result, tests=[], unknown=note) if note else result
