"""NCCL's own account of its transport (NCCL_DEBUG=INFO, subsystems INIT,NET): which network each
process used and which HCAs NET/IB opened.

The bandwidth number alone cannot tell RDMA from TCP: NCCL falls back to sockets when it finds no
usable HCA (`NET/IB : No device found`, then `Using network Socket`), and a fast enough Ethernet
can still clear a threshold. Lines look like
`gpu-pod0:52047:52056 [0] NCCL INFO NET/IB : Using [0]irdma0:1/RoCE [RO]; OOB net1:10.100.100.1<0>`
and `gpu-pod0:52047:52056 [0] NCCL INFO Using network IBext`; the host is NCCL's (the node's
hostname), not necessarily the inventory's name.

A net plugin (AIACC on eRDMA, HPC-X's RDMA/SHARP plugin) that NCCL could not load is only a line
at INFO level, and NCCL carries on with its internal transports: `NET/Plugin : No plugin found
(libnccl-net.so), using internal implementation` (2.4 ends at the closing parenthesis),
`NET/Plugin : Plugin load (libnccl-net.so) returned 2 : …`, `NET/Plugin: Could not find:
libnccl-net.so` (2.2x); one that loaded says `NET/Plugin: Loaded net plugin NAME (vN)`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TypeVar

_Reading = TypeVar("_Reading")

_PREFIX = r"^\s*(?P<host>[^\s:]+):\d+:\d+\s+\[\d+\]\s+NCCL INFO\s+"
_NETWORK = re.compile(_PREFIX + r"Using network (?P<network>\S+)")
_IB_USING = re.compile(_PREFIX + r"NET/IB\s*:\s*Using\s+(?P<devices>.*)")
_IB_NONE = re.compile(_PREFIX + r"NET/IB\s*:\s*No device found")
_DEVICE = re.compile(r"\[\d+\]([\w.-]+):\d+/\w+")
# "comm 0x55f6bc9e0030 rank 0 nranks 2 cudaDev 0 … - Init START" (2.18; 2.2x put
# "ncclCommInitRankConfig " before it, and "nRanks" in a later line): the ranks a host's process holds
_RANK = re.compile(_PREFIX + r"(?:\w+ )?comm \S+ rank (?P<rank>\d+) n[Rr]anks (?P<nranks>\d+)")
_PLUGIN_LOADED = re.compile(_PREFIX + r"NET/Plugin\s*:\s*Loaded net plugin (?P<name>.*?)\s*$")
_PLUGIN_NONE = re.compile(
    _PREFIX
    + r"NET/Plugin\s*:\s*(?P<why>.*(?:No plugin found|Could not find: libnccl-net|Plugin load \(.*\) returned).*?)\s*$"
)


@dataclass(frozen=True)
class NcclTransport:
    """By host (NCCL's name for it as parsed; the inventory's after `renamed`): the networks its
    communicators used, the HCAs NET/IB opened, and whether NET/IB found no device at all."""

    networks: dict[str, set[str]] = field(default_factory=dict)
    devices: dict[str, set[str]] = field(default_factory=dict)
    no_ib_device: set[str] = field(default_factory=set)
    plugin_loaded: dict[str, str] = field(default_factory=dict)  # host → the net plugin NCCL loaded
    plugin_missing: dict[str, str] = field(default_factory=dict)  # host → NCCL's words for why not
    # host → its processes' ranks in the job's largest communicator (the world; a framework's
    # subgroups number their ranks from 0 again)
    ranks: dict[str, set[int]] = field(default_factory=dict)

    @property
    def reported(self) -> bool:
        """Whether NCCL said which network it used at all (it prints nothing below NCCL_DEBUG=INFO,
        and nothing when the program never created a communicator)."""
        return bool(self.networks) or bool(self.no_ib_device)

    def socket_hosts(self) -> list[str]:
        """Hosts where NCCL carried traffic over TCP sockets."""
        return sorted(host for host, networks in self.networks.items() if "Socket" in networks)

    def named(self, hosts: list[str]) -> str:
        """`hosts` with the ranks each held, as a failure names them: "gpu-pod1 [ranks 2, 3]"."""
        return ", ".join(f"{host}{self._ranks_of(host)}" for host in hosts)

    def renamed(self, names: Mapping[str, str]) -> NcclTransport:
        """The same readings with NCCL's host names replaced by `names` (NCCL's → the inventory's
        names), so that a failure names the host a user acts on; unmapped names stay as NCCL wrote them."""

        def keyed(by_host: Mapping[str, _Reading]) -> dict[str, _Reading]:
            return {names.get(host, host): value for host, value in by_host.items()}

        return NcclTransport(
            keyed(self.networks),
            keyed(self.devices),
            {names.get(host, host) for host in self.no_ib_device},
            keyed(self.plugin_loaded),
            keyed(self.plugin_missing),
            keyed(self.ranks),
        )

    def _ranks_of(self, host: str) -> str:
        ranks = sorted(self.ranks.get(host, ()))
        return f" [rank{'s' if len(ranks) > 1 else ''} {', '.join(map(str, ranks))}]" if ranks else ""


def parse_nccl_transport(text: str) -> NcclTransport:
    found = NcclTransport()
    comms: list[tuple[str, int, int]] = []  # (host, rank, nranks) of every communicator
    for line in text.splitlines():
        if match := _NETWORK.match(line):
            found.networks.setdefault(match["host"], set()).add(match["network"])
        elif (match := _IB_USING.match(line)) and (devices := _DEVICE.findall(match["devices"])):
            found.devices.setdefault(match["host"], set()).update(devices)  # "Using [RO]; OOB…": none
        elif match := _IB_NONE.match(line):
            found.no_ib_device.add(match["host"])
        elif match := _RANK.match(line):
            comms.append((match["host"], int(match["rank"]), int(match["nranks"])))
        elif match := _PLUGIN_LOADED.match(line):
            found.plugin_loaded[match["host"]] = match["name"]
        elif match := _PLUGIN_NONE.match(line):
            found.plugin_missing.setdefault(match["host"], match["why"])
    world = max((nranks for _, _, nranks in comms), default=0)
    for host, rank, nranks in comms:
        if nranks == world:
            found.ranks.setdefault(host, set()).add(rank)
    return found
