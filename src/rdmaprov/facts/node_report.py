"""The node report's command: everything `facts`, `verify` and `node-check` read about a node, in
one shell command (one round trip over SSH; one `sh -c` on the node).

Kept apart from the pyinfra fact (facts/node.py) and free of anything but the standard library:
`rdmaprov node-check` runs this very command on the node, so both judge the same text.
"""

from __future__ import annotations

import shlex

from rdmaprov.parsers.counters import COUNTER_FILES
from rdmaprov.parsers.enroot import SETTINGS as ENROOT_SETTINGS
from rdmaprov.parsers.framework import MARK
from rdmaprov.parsers.ldd import HEADER
from rdmaprov.parsers.node import DCGM_NOTE, SECTION
from rdmaprov.parsers.pcie import PCI_LINK_FILES
from rdmaprov.parsers.roce_qos import PAUSE_WORDS
from rdmaprov.quoting import sh

# One grep per attribute directory: a per-GID loop forks 1000+ times on rxe (gid_tbl_len 1024).
# Unset GIDs read as zeros and their types fail to read (EINVAL), so grep prints only set ones.
_PORTS = r"""for p in /sys/class/infiniband/*/ports/*; do [ -d "$p" ] || continue
d=${p#/sys/class/infiniband/}; d=${d%%/*}; n=${p##*/}
for k in state phys_state rate link_layer; do echo "port $d $n $k $(cat $p/$k 2>/dev/null)"; done
grep -H . $p/gids/* 2>/dev/null | grep -v ':0000:0000:0000:0000:0000:0000:0000:0000$' \
  | sed "s|^[^:]*/\([0-9]*\):|port $d $n gid \1 |"
grep -H . $p/gid_attrs/types/* 2>/dev/null | sed "s|^[^:]*/\([0-9]*\):|port $d $n gid_type \1 |"
grep -H . $p/gid_attrs/ndevs/* 2>/dev/null | sed "s|^[^:]*/\([0-9]*\):|port $d $n gid_ndev \1 |"; done"""

# Where distro packages, source builds (rdmaprov's versioned prefix) and the AIACC plugin put NCCL.
_NCCL_DIRS = (
    "/usr/lib/x86_64-linux-gnu",
    "/usr/lib64",
    "/usr/local/lib",
    "/usr/local/nccl*/lib",
    "/opt/nccl*/current/lib",
    "/usr/local/lib/aiacc*",
)

# From `ldconfig -p`: the libnccl.so.2 a program without its own RUNPATH gets (the first entry)
# and the others, each with the file it resolves to ("PATH REALPATH").
LINKED_NCCL = 'awk \'$1 == "libnccl.so.2" {print $NF}\' | while read -r f; do echo "$f $(readlink -f "$f")"; done'

# GPUDirect RDMA needs a peer-memory module (nvidia_peermem; nv_peer_mem before driver 470) and a
# perftest built with CUDA. Read on GPU nodes only.
GPUDIRECT = (
    "command -v nvidia-smi >/dev/null && { for m in nvidia_peermem nv_peer_mem; do "
    '[ -d /sys/module/$m ] && echo "module $m"; done; '
    "ib_write_bw --help 2>&1 | grep -q -- --use_cuda && echo perftest_cuda; }"
)

# NVSwitches show on the PCI bus as NVIDIA (0x10de) bridges of class 0x0680 (A100 and H100 boards).
NVSWITCHES = (
    'for d in /sys/bus/pci/devices/*; do [ "$(cat $d/vendor 2>/dev/null)" = 0x10de ] && '
    'case "$(cat $d/class 2>/dev/null)" in 0x0680*) echo "${d##*/}";; esac; done; true'
)

# Each GPU's and RDMA device's place on the PCI tree (parsers/pci_places.py), and the ACS state
# of the PCI bridges (class 0604; lspci before 3.6 has no class filter: then every device).
_PCI_PLACE = (
    'echo "$1 $2 $(readlink -f $3) $(cat $3/numa_node 2>/dev/null || echo -) '
    '$(cat $3/iommu_group/type 2>/dev/null || echo -)"'
)
PCI_PLACES = (
    f"place() {{ {_PCI_PLACE}; }}; for d in /sys/bus/pci/devices/*; do "
    'case "$(cat $d/vendor 2>/dev/null) $(cat $d/class 2>/dev/null)" in "0x10de 0x03"*) place gpu ${d##*/} $d;; '
    "esac; done; for h in /sys/class/infiniband/*; do [ -e $h/device ] && place hca ${h##*/} $h/device; done; true"
)
BRIDGES_ACS = "lspci -D -vvv -d ::0604 2>/dev/null || lspci -D -vvv 2>/dev/null"

# The fabric manager's own version and its service's state (parsers/fabric.py reads both).
FABRIC_MANAGER = (
    "command -v nv-fabricmanager >/dev/null && nv-fabricmanager --version 2>&1 | head -n 3; "
    'echo "service $(systemctl is-active nvidia-fabricmanager 2>/dev/null)"'
)

# RoCE's QoS chain (parsers/roce_qos.py): each RoCE port's RDMA-CM ToS, the verbs traffic class
# where the driver has one, and per NIC netdev of a device with a RoCE port (its PCI function's, or
# rxe's parent) what mlnx_qos (preferred: it shows the trust) or dcb shows, with mlx5's ECN files
# and the NIC's pause counters (`ethtool -S`). Reads only; nothing loads or mounts. Run only where
# roce_qos is declared (mlnx_qos is a Python program: a second per NIC).
# RoCE LAG: while both PF netdevs of a ConnectX are enslaved to one bond, mlx5 shows one RDMA
# device for both ports (mlx5_bond_0), its `device` the first PF, its default GID on the bond
# (which any bonded RoCE port has: LAG or not). DCB stays each PF's own, so the bond's other
# lower netdevs that are PFs of the same NIC (its PCI slot) and have no RDMA device of their own
# are read (and set) too, and `lag DEV BOND` says so. rxe (its `parent` file) is never a LAG.
_ECN_FILES = "roce_np/enable/* roce_rp/enable/* roce_np/cnp_802p_prio roce_np/cnp_dscp"
_QOS_LAG = (
    'lowers=; if [ -e "$d/device" ] && [ ! -e "$d/parent" ]; then '
    'slot=$(readlink -f "$d/device"); slot=${slot##*/}; slot=${slot%.*}; '
    'for gid in $d/ports/*/gid_attrs/ndevs/0; do bond=$(cat "$gid" 2>/dev/null) || continue; '
    '[ -n "$bond" ] && [ -d "/sys/class/net/$bond/bonding" ] || continue; found=; '
    'for pf in /sys/class/net/$bond/lower_*; do [ -e "$pf" ] || continue; pf=${pf##*/lower_}; '
    '[ -e "$d/device/net/$pf" ] && continue; '
    'pci=$(readlink -f "/sys/class/net/$pf/device"); pci=${pci##*/}; [ "${pci%.*}" = "$slot" ] || continue; '
    "for own in /sys/class/net/$pf/device/infiniband/*; do "
    '[ -e "$own" ] && [ "${own##*/}" != "$n" ] && continue 2; done; found="$found /sys/class/net/$pf"; done; '
    '[ -n "$found" ] && echo "lag $n $bond" && lowers="$lowers$found"; done; fi; '
)
_QOS_NETDEVS = (
    f"r=$(cat $d/parent 2>/dev/null); {_QOS_LAG}s=' '; "
    'for e in $d/device/net/* ${r:+/sys/class/net/$r} $lowers; do [ -e "$e" ] || continue; e=${e##*/}; '
    'case "$s" in *" $e "*) continue ;; esac; s="$s$e "; '
    'echo "netdev $n $e"; '
    'if command -v mlnx_qos >/dev/null; then mlnx_qos -i "$e" 2>&1 | qos_tag mlnx_qos "$e"; '
    'elif command -v dcb >/dev/null; then dcb pfc show dev "$e" 2>&1 | qos_tag dcb_pfc "$e"; '
    'dcb -N app show dev "$e" dscp-prio 2>&1 | qos_tag dcb_app "$e"; fi; '
    f'(cd "/sys/class/net/$e/ecn" 2>/dev/null && grep -H . {_ECN_FILES} 2>/dev/null) | qos_tag ecn "$e"; '
    f'command -v ethtool >/dev/null && ethtool -S "$e" 2>/dev/null | grep -E "{PAUSE_WORDS}" | qos_tag ethtool "$e"; '
    "done"
)
# With roce_qos.firmware, each RoCE device's persistent firmware settings too (parsers/mlxconfig.py):
# mstflint's mstconfig (Debian's package) or NVIDIA MFT's mlxconfig, by PCI address, with the
# running values where the firmware shows them (-e). A second or two per device. Only a physical
# function has them: a VF (physfn) or a sub-function (not a PCI address) is not asked.
_QOS_FIRMWARE = (
    'a=$(readlink -f "$d/device"); a=${a##*/}; [ -L "$d/device/physfn" ] && a=; '
    "case $a in *:*:*.[0-7]) ;; *) a= ;; esac; t=$(command -v mstconfig || command -v mlxconfig); "
    'if [ -n "$a" ]; then printf "fwtool %s %s %s\\n" "$n" "${t:--}" "$a"; [ -n "$t" ] && '
    '"$t" -e -d "$a" q 2>&1 | qos_tag fw "$n"; fi; '
)
# Each line a tool prints (a last one without its newline too), tagged by printf with its kind and
# device or netdev (`ecn eth4 …`), so that no name becomes part of a sed program.
_QOS_TAG = 'qos_tag() { while IFS= read -r q || [ -n "$q" ]; do printf "%s %s %s\\n" "$1" "$2" "$q"; done; }; '


def roce_qos_command(firmware: bool = False) -> str:
    """The roce_qos section's command; `firmware`: with each device's firmware settings."""
    return (
        f"{_QOS_TAG}"
        'for d in /sys/class/infiniband/*; do [ -d "$d" ] || continue; n=${d##*/}; roce=; '
        'for p in $d/ports/*; do [ "$(cat $p/link_layer 2>/dev/null)" = Ethernet ] || continue; i=${p##*/}; roce=1; '
        "f=/sys/kernel/config/rdma_cm/$n/ports/$i/default_roce_tos; "
        'echo "tos $n $i $(cat $f 2>/dev/null || echo -)"; done; [ -n "$roce" ] || continue; '
        '[ -e $d/tc/1/traffic_class ] && echo "tclass $n $(cat $d/tc/1/traffic_class)"; '
        f"{_QOS_FIRMWARE if firmware else ''}{_QOS_NETDEVS}; done; "
        "[ -e /sys/kernel/config/rdma_cm ] || echo 'configfs missing'; true"
    )


# What each declared framework interpreter loads (parsers/framework.py): PyTorch's NCCL version,
# the libnccl file the process mapped (none: linked into libtorch), and whether NCCL's net plugin
# (NCCL_NET_PLUGIN's name, else libnccl-net.so) loads from there. Imports torch: seconds each.
FRAMEWORK_PROBE = f"""
MARK = {MARK!r}
import ctypes, json, os
out = {{}}
def mapped(word):
    with open("/proc/self/maps") as maps:
        return sorted({{line.split()[-1] for line in maps if word in line.rsplit("/", 1)[-1]}})
try:
    import torch
    out["torch"] = str(torch.__version__)
    out["nccl"] = torch.cuda.nccl.version()
    out["libraries"] = mapped("libnccl.so")
    name = os.environ.get("NCCL_NET_PLUGIN") or "libnccl-net.so"
    name = name if "/" in name or name.endswith(".so") else "libnccl-net-" + name + ".so"
    try:
        ctypes.CDLL(name)
        out["plugin"] = (mapped("libnccl-net") or [name])[0]
    except OSError as error:
        out["plugin_error"] = str(error)
except Exception as error:
    out["error"] = type(error).__name__ + ": " + str(error)
print(MARK + json.dumps(out))
"""


def frameworks_command(pythons: tuple[str, ...]) -> str:
    """The `frameworks` section: each interpreter named, then its probe's answer (the last lines
    of whatever it printed), or `missing`."""
    probe = sh(FRAMEWORK_PROBE)
    return "; ".join(
        f"echo python {sh(python)}; if [ -x {sh(python)} ]; then "
        f"timeout -k 5 120 {sh(python)} -c {probe} 2>&1 | tail -n 5; else echo missing; fi"
        for python in pythons
    )


# Every file that can set memlock for logins (pam_limits) or services (systemd's manager).
_LIMIT_FILES = (
    "/etc/security/limits.conf",
    "/etc/security/limits.d/*.conf",
    "/etc/systemd/system.conf",
    "/etc/systemd/system.conf.d/*.conf",
    "/run/systemd/system.conf.d/*.conf",
    "/usr/lib/systemd/system.conf.d/*.conf",
)


# The distro and release (`debian 12`): read, never sourced (os-release is shell syntax).
_RELEASE = (
    'echo "$(sed -n s/^ID=//p /etc/os-release 2>/dev/null) $(sed -n s/^VERSION_ID=//p /etc/os-release 2>/dev/null)"'
    " | tr -d '\"'"
)


def _linkage(programs: tuple[str, ...]) -> str:
    """ldd of every NCCL net plugin found and of `programs`: the libnccl they resolve (symlinks
    followed, so the file name carries the version) and whatever they cannot resolve."""
    plugins = " ".join(f"{d}/libnccl-net*.so*" for d in _NCCL_DIRS)
    files = " ".join(shlex.quote(p) for p in programs)
    resolve = (
        'while read -r name arrow path rest; do if [ "$path" = not ]; then echo "$name => not found"; '
        'else echo "$name => $(readlink -f "$path")"; fi; done'
    )
    return (
        f'for f in $(ls -d {plugins} 2>/dev/null) {files}; do echo \'{HEADER}\'"$f"; if [ -e "$f" ]; '
        f"then ldd \"$f\" 2>/dev/null | grep -e libnccl -e 'not found' | {resolve}; else echo missing; fi; done"
    )


# DCGM's diagnostic by level: how long each may take before it is stopped (NVIDIA's figures for
# 8 GPUs: level 1 seconds, 2 about two minutes, 3 about a quarter of an hour, 4 over an hour).
DCGM_TIMEOUT_S = {1: 300, 2: 900, 3: 2700, 4: 7200}


def dcgm_diag(level: int) -> str:
    """`dcgmi diag -r LEVEL -j`, bounded; what kept it from answering on a line of its own."""
    seconds = DCGM_TIMEOUT_S[level]
    return (
        f"if command -v dcgmi >/dev/null; then timeout -k 10 {seconds} dcgmi diag -r {level} -j 2>&1; "
        f'[ $? = 124 ] && echo "{DCGM_NOTE}dcgmi diag -r {level} ran past {seconds} s and was stopped"; '
        f'else echo "{DCGM_NOTE}dcgmi is not installed (NVIDIA DCGM)"; fi; true'
    )


# The `enroot` section (parsers/enroot.py): its version and the enroot.conf it reads, both from
# its script (running enroot would make its directories in root's home), then the lines of its
# config files that set what would keep RDMA out of its containers.
ENROOT = (
    'if e=$(command -v enroot); then c=$(sed -n \'s/^config::init "\\(.*\\)"$/\\1/p\' "$e"); '
    '[ -n "$c" ] && echo "conf $c"; sed -n \'s/^export ENROOT_VERSION="\\(.*\\)"$/version \\1/p\' "$e"; '
    'if [ -n "$c" ]; then for f in "$c" "$c".d/*.conf; do [ -f "$f" ] && echo "file $f" && '
    f"grep -E '^[[:space:]]*({'|'.join(ENROOT_SETTINGS)})([[:space:]=]|$)' \"$f\"; "
    "done; fi; else echo missing; fi"
)


def node_report_command(
    programs: tuple[str, ...] = (),
    dcgm_level: int = 0,
    roce_qos: bool = False,
    frameworks: tuple[str, ...] = (),
    qos_firmware: bool = False,
    enroot: bool = False,
) -> str:
    """The shell command whose output parse_node_report reads (sections marked by SECTION);
    `programs`: files whose linkage the checks judge (the nccl-tests binary the gates run);
    `dcgm_level`: run DCGM's diagnostic at that level too (0: not; it takes seconds to hours);
    `roce_qos`: read RoCE's QoS chain (where the inventory declares one), `qos_firmware`: with
    the NICs' firmware settings; `frameworks`: the Python interpreters whose PyTorch's NCCL is read;
    `enroot`: what enroot gives its containers (where containers.enroot is on)."""
    sections = {
        "ports": _PORTS,
        "ibv_devinfo": "ibv_devinfo -v 2>/dev/null",
        "rdma_system": "rdma system show 2>/dev/null",
        "mtu": 'for d in /sys/class/net/*; do echo "${d##*/} $(cat $d/mtu)"; done',
        "memlock": "ulimit -l; systemctl show -p DefaultLimitMEMLOCK --value 2>/dev/null",
        "memlock_lines": "grep -Hn -e memlock -e DefaultLimitMEMLOCK " + " ".join(_LIMIT_FILES) + " 2>/dev/null",
        "nccl_conf": "cat /etc/nccl.conf 2>/dev/null || echo MISSING",
        "gpus": "nvidia-smi --query-gpu=name,compute_cap,driver_version --format=csv,noheader 2>/dev/null",
        "nvidia_smi_q": "nvidia-smi -q 2>/dev/null",
        "gpu_topology": "nvidia-smi topo -m 2>/dev/null",
        "gpudirect": GPUDIRECT,
        "nvswitches": NVSWITCHES,
        "pci_places": f"command -v nvidia-smi >/dev/null && {{ {PCI_PLACES}; }}",
        "acs": f"command -v nvidia-smi >/dev/null && {{ {BRIDGES_ACS}; }}",
        "fabric_manager": f"command -v nvidia-smi >/dev/null && {{ {FABRIC_MANAGER}; }}",
        "xid": "dmesg 2>/dev/null | grep -a 'NVRM: ' | tail -n 300",
        "counters": f"grep -H . {COUNTER_FILES} 2>/dev/null",
        "boot_id": "cat /proc/sys/kernel/random/boot_id 2>/dev/null",
        "hostname": "cat /proc/sys/kernel/hostname 2>/dev/null",
        "versions": "uname -r; dpkg-query -W -f '${Version}\\n' rdma-core 2>/dev/null "
        f"|| rpm -q --qf '%{{VERSION}}-%{{RELEASE}}\\n' rdma-core 2>/dev/null || echo; {_RELEASE}",
        "nccl": "ls -d " + " ".join(f"{d}/libnccl*" for d in _NCCL_DIRS) + " 2>/dev/null",
        "nccl_linker": f"ldconfig -p 2>/dev/null | {LINKED_NCCL}",
        "linkage": _linkage(programs),
        "pci_links": f"grep -H . {PCI_LINK_FILES} 2>/dev/null",
        "nvlink": "nvidia-smi nvlink --status 2>/dev/null",
        "cuda": "ls -d /usr/local/cuda-[0-9]* 2>/dev/null",
    }
    if roce_qos:
        sections["roce_qos"] = roce_qos_command(qos_firmware)
    if dcgm_level:
        sections["dcgm_diag"] = dcgm_diag(dcgm_level)
    if frameworks:
        sections["frameworks"] = frameworks_command(frameworks)
    if enroot:
        sections["enroot"] = ENROOT
    return "; ".join(f"echo '{SECTION}{name}'; {{ {cmd}\n}}" for name, cmd in sections.items()) + "; true"
