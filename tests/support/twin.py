"""A DGX-shaped twin: SSH test hosts whose GPU and HCA tools answer from real captured outputs.

No machine here has GPUs, HCAs or NVSwitches. A twin host is an SSH farm host
(tests/support/sshhosts.py) whose private root gets, before its sshd starts:

- a /sys of its own (tmpfs) composed here: 8 compute HCAs and a storage HCA (mlx5, InfiniBand
  NDR ports), their PCI devices and links, 8 GPUs and 4 NVSwitches on the PCI bus, the nvidia
  and nvidia_peermem modules, eth0 and lo;
- /usr/local/bin (ahead of /usr/bin in root's PATH) `nvidia-smi`, `nv-fabricmanager`, `dmesg`,
  `lspci`, `dcgmi` and `systemctl` that print files under /etc/twin/ (systemctl answers only for the fabric
  manager's service and hands everything else to the real one), and `ib_write_bw`
  (twin_tools/perftest.c), whose two sides meet over TCP and print the captured run's figures.

Every output is composed from real captures in tests/fixtures (tests/fixtures/twin/README.md
says which from which); the kernel's sysfs files are written in the kernel's own formats. A
fault changes one host's composed files, as the fault changes a real node's outputs. The twin
is a test bed for rdmaprov's reading of a GPU node, never proof that a real one works.
"""

from __future__ import annotations

import functools
import io
import os
import re
import subprocess
import tarfile
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from rdmaprov.parsers.counters import ERROR_COUNTERS
from tests.conftest import FIXTURES

H100_Q = FIXTURES / "gpu-h100" / "nvidia-smi_q.txt"  # one H100 80GB HBM3, driver 580.159.04
TOPOLOGY = FIXTURES / "public" / "nvidia-smi_topo_m_8xH100_8nic_nic_legend_pix_gpu_numa_id_spaces.txt"
NVLINKS = FIXTURES / "public" / "nvidia-smi_nvlink_status_i0_H100-80GB-HBM3_healthy_18links.txt"
XID_79 = FIXTURES / "public" / "journal_xid_79_fallen_off_bus_2xK80_same_board_kernel_ts.txt"
LSPCI = FIXTURES / "public" / "lspci_vvxxx_D_N1SDP_plx_pex8749_downstream_acsctl_reqredir_on.txt"
ACS_OFF = FIXTURES / "public" / "lspci_vvnn_sunrise_point_lp_root_port_acsctl_all_off_iwlwifi.txt"
DCGM_DIAG = FIXTURES / "public" / "nvvs_json_dcgm_3.1.0_8gpu_pass_warning_line_before_json_nulls_in_tests.txt"
FM_VERSION = FIXTURES / "public" / "nv-fabricmanager_version_610.57.04_build_info_line_no_trailing_newline_B300.txt"

DRIVER = "580.159.04"  # the captured H100's
OTHER_DRIVER = "580.126.09"  # the version a host that differs from the fleet runs
GPU_BUSES = ("18", "2a", "3a", "5d", "9a", "ab", "ba", "db")
HCA_BUSES = ("19", "2b", "3b", "5e", "9b", "ac", "bb", "dc", "c0")  # mlx5_0..7 compute, mlx5_8 storage
NVSWITCH_BUSES = ("05", "06", "07", "08")
COMPUTE_HCAS = tuple(f"mlx5_{n}" for n in range(8))
STORAGE_HCA = "mlx5_8"

# The node settings of a healthy twin, as an inventory's `defaults:` (the e2e tests, bench/).
TWIN_DEFAULTS = f"""defaults:
  fabric: infiniband
  limits: {{memlock: unlimited}}
  rdma:
    devices: [{", ".join(COMPUTE_HCAS)}]
    storage_hcas: [{STORAGE_HCA}]
    rate_gbps: 400
  gpu:
    count: 8
    model: H100-SXM5-80GB
    driver_version: "{DRIVER}"
  nccl: {{source: {{kind: packages}}}}  # the twins carry no NCCL: its checks are the lab's
"""

# The twins' ib_write_bw moves what the captured run did, 92.6 % of the line rate: the rail
# gate's default 95 % would fail every healthy rail.
TWIN_GATES = """cluster:
  gates:
    ib_write_bw: {duration_s: 1}
    rail: {duration_s: 1, fraction: 0.9}
"""


def with_twin_gates(inventory: Path) -> Path:
    """Put the twins' gate settings under the `cluster:` section of a farm's inventory."""
    inventory.write_text(inventory.read_text().replace("cluster:\n", TWIN_GATES, 1))
    return inventory


# What each fault changes, and where verify is expected to name it: (check id, subject prefix),
# None for a fault only the gates can see.
FAULTS: dict[str, tuple[str, str] | None] = {
    "xid79": ("gpu.xid", "kernel log"),
    "row_remap_failed": ("gpu.row_remap", "gpu5 "),
    "gpu_pcie_x8": ("gpu.pcie_width", "gpu2 "),
    "hca_port_down": ("rdma.port_state", "mlx5_3/1"),
    "hca_pcie_x8": ("rdma.pcie_link", "mlx5_6"),
    "fabric_manager_stopped": ("gpu.fabric_manager", "fabric"),
    "driver_differs": ("gpu.driver_version", "gpus"),
    "slow_rail": None,  # mlx5_4 moves data at half its rate: verify sees nothing, diagnose must find it
    "acs_enabled": ("gpu.acs", "bridge 0000:99:00.0"),  # the switch port above GPU 4
    "iommu_translated": ("gpu.iommu", "IOMMU"),
}


def _address(bus: str) -> str:
    return f"0000:{bus}:00.0"


def _switch(gpu_bus: str) -> tuple[str, str, str, str]:
    """The sysfs names of the root complex, its root port, the switch's upstream port and its two
    downstream ports (to the GPU on `gpu_bus`, to the HCA on the next bus) above a GPU."""
    root = int(gpu_bus, 16) - 3
    return (
        f"pci0000:{root:02x}/0000:{root:02x}:01.0",
        f"0000:{root + 1:02x}:00.0",
        f"0000:{root + 2:02x}:00.0",
        f"0000:{root + 2:02x}:01.0",
    )


@dataclass
class TwinNode:
    """One twin host's composed files: {path under its root: text}; symlinks separately."""

    faults: frozenset[str] = frozenset()
    files: dict[str, str] = field(default_factory=dict)
    links: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        unknown = self.faults - set(FAULTS)
        if unknown:
            raise ValueError(f"unknown twin faults: {', '.join(sorted(unknown))}")
        self.driver = OTHER_DRIVER if "driver_differs" in self.faults else DRIVER
        self._sysfs()
        self._gpu_tools()

    # --- /sys ----------------------------------------------------------------------------------

    def _pci(self, path: str, vendor: str, klass: str, numa: int, width: str = "16") -> str:
        """A device at `path` under sys/devices (its bridges, then itself), listed in
        sys/bus/pci/devices as the kernel does; returns its sysfs directory."""
        base = f"sys/devices/{path}"
        address = path.rsplit("/", 1)[-1]
        self.files |= {
            f"{base}/vendor": vendor,
            f"{base}/class": klass,
            f"{base}/numa_node": str(numa),
            f"{base}/current_link_speed": "32.0 GT/s PCIe",
            f"{base}/max_link_speed": "32.0 GT/s PCIe",
            f"{base}/current_link_width": width,
            f"{base}/max_link_width": "16",
        }
        if "iommu_translated" in self.faults and klass.startswith(("0x03", "0x02")):
            self.files[f"{base}/iommu_group/type"] = "DMA"
        self.links[f"sys/bus/pci/devices/{address}"] = f"../../../devices/{path}"
        return base

    def _sysfs(self) -> None:
        """Each GPU with its HCA under one PCIe switch (topo -m's PIX), the switch under a root port
        of its own; GPUs 0-3 and their HCAs on NUMA node 0, 4-7 on 1 (topo -m's NUMA Affinity)."""
        for index, (gpu_bus, hca_bus) in enumerate(zip(GPU_BUSES, HCA_BUSES, strict=False)):
            numa = index // 4
            root, upstream, to_gpu, to_hca = _switch(gpu_bus)
            for bridge in (root, f"{root}/{upstream}", f"{root}/{upstream}/{to_gpu}", f"{root}/{upstream}/{to_hca}"):
                self._pci(bridge, "0x10b5", "0x060400", numa)  # PLX/Broadcom switch ports, class PCI bridge
            narrow = index == 2 and "gpu_pcie_x8" in self.faults
            gpu = f"{root}/{upstream}/{to_gpu}/{_address(gpu_bus)}"
            self._pci(gpu, "0x10de", "0x030200", numa, "8" if narrow else "16")  # NVIDIA 3D controller
            self._hca(index, f"{root}/{upstream}/{to_hca}/{_address(hca_bus)}", numa)
        self._pci("pci0000:bf/0000:bf:01.0", "0x8086", "0x060400", 1)  # the storage HCA's root port
        self._hca(8, f"pci0000:bf/0000:bf:01.0/{_address(HCA_BUSES[8])}", 1)
        for bus in NVSWITCH_BUSES:
            self._pci(f"pci0000:00/0000:00:01.0/{_address(bus)}", "0x10de", "0x068000", 0)  # an NVSwitch
        self.files |= {
            "sys/class/net/eth0/mtu": "1500",
            "sys/class/net/lo/mtu": "65536",
            "sys/module/nvidia/version": self.driver,
            "sys/module/nvidia_peermem/refcnt": "0",
        }

    def _hca(self, index: int, path: str, numa: int) -> None:
        """A ConnectX port on InfiniBand NDR (Mellanox, class InfiniBand controller)."""
        name = f"mlx5_{index}"
        down = name == "mlx5_3" and "hca_port_down" in self.faults
        narrow = name == "mlx5_6" and "hca_pcie_x8" in self.faults
        self._pci(path, "0x15b3", "0x020700", numa, "8" if narrow else "16")
        self.links[f"sys/class/infiniband/{name}/device"] = f"../../../devices/{path}"
        port = f"sys/class/infiniband/{name}/ports/1"
        self.files |= {
            f"{port}/state": "1: DOWN" if down else "4: ACTIVE",
            f"{port}/phys_state": "3: Disabled" if down else "5: LinkUp",
            f"{port}/rate": "400 Gb/sec (4X NDR)",
            f"{port}/link_layer": "InfiniBand",
            **{f"{port}/counters/{counter}": "0" for counter in ERROR_COUNTERS},
        }

    # --- the GPU tools' answers ----------------------------------------------------------------

    def _gpu_tools(self) -> None:
        self.files |= {
            "etc/twin/nvidia-smi-q.txt": self._nvidia_smi_q(),
            "etc/twin/query-gpu.csv": "".join(f"NVIDIA H100 80GB HBM3, 9.0, {self.driver}\n" for _ in GPU_BUSES),
            "etc/twin/topo-m.txt": TOPOLOGY.read_text(),
            "etc/twin/nvlink-status.txt": self._nvlinks(),
            "etc/twin/dmesg.txt": self._dmesg(),
            "etc/twin/fabricmanager-version.txt": self._fabric_manager_version(),
            "etc/twin/lspci.txt": self._lspci(),
            "etc/twin/dcgmi-diag.json": DCGM_DIAG.read_text(),
            "etc/twin/ib_write_bw_client.txt": (FIXTURES / "seed" / "ib_write_bw_client_roce_25g.txt").read_text(),
            "etc/twin/ib_write_bw_server.txt": (FIXTURES / "seed" / "ib_write_bw_server_roce_25g.txt").read_text(),
            "etc/twin/rail-gbps": "mlx5_4 200\n" if "slow_rail" in self.faults else "",
            "etc/twin/fabricmanager-state.txt": "inactive" if "fabric_manager_stopped" in self.faults else "active",
        }

    def _nvidia_smi_q(self) -> str:
        text = H100_Q.read_text()
        start = text.index("GPU 00000000:00:06.0")
        header = text[:start].replace(DRIVER, self.driver)
        header = re.sub(r"(Attached GPUs\s+: )1", r"\g<1>8", header)
        stopped = "fabric_manager_stopped" in self.faults
        blocks = []
        for index, bus in enumerate(GPU_BUSES):
            block = text[start:].replace("00000000:00:06.0", f"00000000:{bus}:00.0")
            block = re.sub(r"(Minor Number\s+: )0", rf"\g<1>{index}", block)
            # on an NVSwitch board: set up, as the H800 capture reports it; without the fabric
            # manager, waiting, as the 8 x H100 capture whose fabric manager had not started
            state, status = ("In Progress", "N/A") if stopped else ("Completed", "Success")
            block = re.sub(
                r"(    Fabric\n        State\s+: )N/A\n(        Status\s+: )N/A", rf"\g<1>{state}\n\g<2>{status}", block
            )
            if index == 2 and "gpu_pcie_x8" in self.faults:
                block = re.sub(r"(Link Width\n\s+Max\s+: 16x\n\s+Current\s+: )16x", r"\g<1>8x", block)
            if index == 5 and "row_remap_failed" in self.faults:
                block = re.sub(r"(Remapping Failure Occurred\s+: )No", r"\g<1>Yes", block)
            blocks.append(block.rstrip("\n") + "\n\n")
        return header + "".join(blocks)

    def _fabric_manager_version(self) -> str:
        """The capture's version line (a B300 node's 610.57.04), with this twin's driver version."""
        line = next(line for line in FM_VERSION.read_text().splitlines() if "version is" in line)
        return line.replace("610.57.04", self.driver) + "\n"

    def _lspci(self) -> str:
        """`lspci -D -vvv` of the bridges: per GPU its root port (the capture's root port), switch
        upstream port and two downstream ports (the capture's PEX 8749 ports, ACS off in the
        words of the all-off capture, or on as captured above GPU 4 with `acs_enabled`)."""
        blocks = _lspci_blocks(LSPCI.read_text())
        root_port, upstream_port, downstream_port = (
            blocks[a] for a in ("0000:00:00.0", "0000:01:00.0", "0000:02:08.0")
        )
        acs_off = next(line.strip() for line in ACS_OFF.read_text().splitlines() if "ACSCtl:" in line)
        acs_on_above = "0000:99:00.0" if "acs_enabled" in self.faults else None
        out = [_readdress(root_port, "0000:00:01.0"), _readdress(root_port, "0000:bf:01.0")]
        for gpu_bus in GPU_BUSES:
            root, upstream, to_gpu, to_hca = _switch(gpu_bus)
            out += [_readdress(root_port, root.rsplit("/", 1)[-1]), _readdress(upstream_port, upstream)]
            for port in (to_gpu, to_hca):
                block = _readdress(downstream_port, port)
                if port != acs_on_above:
                    block = re.sub(r"(?m)^(\s*)ACSCtl:.*$", lambda m: m.group(1) + acs_off, block)
                out.append(block)
        return "\n\n".join(out) + "\n\n"

    def _nvlinks(self) -> str:
        one = NVLINKS.read_text().rstrip("\n") + "\n"
        return "".join(one.replace("GPU 0:", f"GPU {index}:", 1) for index in range(len(GPU_BUSES)))

    def _dmesg(self) -> str:
        if "xid79" not in self.faults:
            return ""
        # the kernel's lines of the capture without the journal's prefix, on this board's GPU 3
        lines = [line.split(" kernel: ", 1)[1] for line in XID_79.read_text().splitlines() if " kernel: " in line]
        return "\n".join(lines[:5]).replace("0000:05:00", f"0000:{GPU_BUSES[3]}:00") + "\n"

    # --- onto a farm host ----------------------------------------------------------------------

    def write(self, workdir: Path) -> None:
        """Lay the twin out where the farm's start script copies it into the host's root."""
        twin = workdir / "twin"
        for path, text in {**self.files, **_TOOLS}.items():
            where = twin / ("sys" if path.startswith("sys/") else "root") / path.removeprefix("sys/")
            where.parent.mkdir(parents=True, exist_ok=True)
            where.write_text(_as_file(text))
            if path.startswith("usr/local/bin/"):
                where.chmod(0o755)
        perftest = twin / "root" / "usr" / "local" / "bin" / "ib_write_bw"
        perftest.write_bytes(_perftest())
        perftest.chmod(0o755)
        for path, target in self.links.items():
            where = twin / "sys" / path.removeprefix("sys/")
            where.parent.mkdir(parents=True, exist_ok=True)
            os.symlink(target, where)

    def changes_from(self, before: TwinNode) -> tuple[list[str], bytes]:
        """What turns a host laid out as `before` into this twin while it runs (a fault repaired):
        the files to remove (under its root) and a tar, to unpack at its root, of those that differ."""
        gone = sorted(set(before.files) - set(self.files))
        changed = {path: text for path, text in self.files.items() if before.files.get(path) != text}
        archive = io.BytesIO()
        with tarfile.open(fileobj=archive, mode="w") as tar:
            for path, text in changed.items():
                data = _as_file(text).encode()
                member = tarfile.TarInfo(path)
                member.size, member.mode = len(data), 0o755 if path.startswith("usr/local/bin/") else 0o644
                tar.addfile(member, io.BytesIO(data))
        return [f"/{path}" for path in gone], archive.getvalue()


@functools.cache
def _perftest() -> bytes:
    """The twins' ib_write_bw (twin_tools/perftest.c), compiled once per process with the gcc
    that tools/setup.sh installs: every twin runs the same program."""
    with tempfile.TemporaryDirectory() as folder:
        program = Path(folder) / "ib_write_bw"
        source = Path(__file__).parent / "twin_tools" / "perftest.c"
        subprocess.run(["gcc", "-O2", "-o", str(program), str(source)], check=True)
        return program.read_bytes()


def _as_file(text: str) -> str:
    """A composed output as its file holds it: ending in a newline, as tools print."""
    return text if text.endswith("\n") or not text else text + "\n"


def _lspci_blocks(text: str) -> dict[str, str]:
    """A captured `lspci -vvxxx` by device address, each block without its hex dump (what
    `lspci -vvv` prints)."""
    blocks: dict[str, list[str]] = {}
    for line in text.splitlines():
        if re.match(r"^[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7] ", line):
            blocks[line.split()[0]] = [line]
        elif blocks and line.strip() and not re.match(r"^[0-9a-f]{2}: ", line):
            blocks[list(blocks)[-1]].append(line)
    return {address: "\n".join(lines) for address, lines in blocks.items()}


def _readdress(block: str, address: str) -> str:
    """The block as another device's: its header's address replaced."""
    return address + block[block.index(" ") :]


_TOOLS = {
    "usr/local/bin/nvidia-smi": """#!/bin/sh
# twin: answers from /etc/twin (real captures, composed)
case "$*" in
  -q) cat /etc/twin/nvidia-smi-q.txt ;;
  --query-gpu=*) cat /etc/twin/query-gpu.csv ;;
  "topo -m") cat /etc/twin/topo-m.txt ;;
  "nvlink --status") cat /etc/twin/nvlink-status.txt ;;
  *) echo "twin nvidia-smi: $* is not captured" >&2; exit 2 ;;
esac
""",
    "usr/local/bin/nv-fabricmanager": "#!/bin/sh\ncat /etc/twin/fabricmanager-version.txt\n",
    "usr/local/bin/dmesg": "#!/bin/sh\ncat /etc/twin/dmesg.txt\n",
    "usr/local/bin/lspci": "#!/bin/sh\ncat /etc/twin/lspci.txt\n",
    "usr/local/bin/dcgmi": """#!/bin/sh
case "$*" in
  "diag -r "[1-4]" -j") cat /etc/twin/dcgmi-diag.json ;;
  *) echo "twin dcgmi: $* is not captured" >&2; exit 2 ;;
esac
""",
    "usr/local/bin/systemctl": """#!/bin/sh
if [ "$*" = "is-active nvidia-fabricmanager" ]; then
  state=$(cat /etc/twin/fabricmanager-state.txt); echo "$state"; [ "$state" = active ]; exit
fi
exec /usr/bin/systemctl "$@"
""",
}
