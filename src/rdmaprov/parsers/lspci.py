"""PCIe Access Control Services (ACS) state of every device in `lspci -vvv` (with or without `-D`,
`-nn`, `-PP` or `-xxx`): GPUDirect RDMA breaks silently when a PCIe bridge or switch port between a
GPU and an HCA has ACS redirection on, because peer-to-peer traffic is then sent up through the root
complex, where it crawls or is dropped, instead of across the switch.

Which `ACSCtl` bits count (`REDIRECT_FLAGS`):

- NVIDIA's NCCL troubleshooting page, "PCI Access Control Services (ACS)"
  (https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/troubleshooting.html#pci-access-control-services-acs):
  "IO virtualization (also known as, VT-d or IOMMU) can interfere with GPU Direct by redirecting all
  PCI point-to-point traffic to the CPU root complex, causing a significant performance reduction or
  even a hang" ... "If lines show "SrcValid+", then ACS might be enabled". Its fix for PLX switches
  (`setpci -s <bridge> f2a.w=0000`) clears the whole control register, so NVIDIA treats `SrcValid+`
  itself as the tell.
- The kernel's own P2P check, `pci_bridge_has_acs_redir()` in drivers/pci/p2pdma.c, refuses
  peer-to-peer DMA through a bridge whose control has `PCI_ACS_RR | PCI_ACS_CR | PCI_ACS_EC` set:
  `ReqRedir`, `CmpltRedir` and `EgressCtrl` are the bits that actually reroute or block P2P.

`UpstreamFwd`, `TransBlk` and `DirectTrans` are left out: upstream forwarding only applies to
upstream-bound requests, translation blocking only to pre-translated addresses, and direct translated
P2P is the bit that lets ATS traffic bypass the redirect (it helps, not hurts).

Only bridges (`PCI bridge` class, root ports and switch ports) are judged: ACS on a multi-function
endpoint only governs traffic between that endpoint's own functions.

What cannot be judged is said rather than guessed: `lspci` run without root prints
`Capabilities: <access denied>` and hides every ACS line, and a cut-off output hides whatever came
after the cut. Both give `AcsReport.unknown`, never a clean bill.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

ACS_FLAGS = ("SrcValid", "TransBlk", "ReqRedir", "CmpltRedir", "UpstreamFwd", "EgressCtrl", "DirectTrans")
REDIRECT_FLAGS = ("SrcValid", "ReqRedir", "CmpltRedir", "EgressCtrl")

# `0000:05:00.0 PCI bridge: ...`, `05:00.0 ...`, and the -P/-PP path form `00:1c.4/07:00.0/08:01.0 ...`.
_HEADER = re.compile(
    r"^(?P<path>(?:(?P<domain>[0-9a-fA-F]{4,8}):)?[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]"
    r"(?:/(?:[0-9a-fA-F]{2}:)?[0-9a-fA-F]{2}\.[0-7])*) (?P<desc>\S.*)$"
)
_HEX_DUMP = re.compile(r"^[0-9a-fA-F]{2,3}: [0-9a-fA-F]{2}( [0-9a-fA-F]{2})*\s*$")
_ACS_CAP = re.compile(r"^Capabilities: \[[0-9a-fA-F]+ v\d+\] Access Control Services\s*$")
_FLAG = re.compile(r"^(\w+)([+-])$")
_LAST_LINES = ("Kernel driver in use:", "Kernel modules:")


@dataclass(frozen=True)
class PciDevice:
    """One device block of `lspci -vvv`, reduced to what ACS judging needs."""

    address: str  # always with the domain: "0000:05:00.0"
    description: str  # "PCI bridge: PLX Technology, Inc. PEX 8747 ..." (class and name, as printed)
    is_bridge: bool
    acs_control: dict[str, bool] | None  # ACSCtl flags; None where no (complete) ACSCtl line was printed
    access_denied: bool  # "Capabilities: <access denied>": lspci ran without root
    has_acs: bool = False  # an "Access Control Services" capability header was printed

    @property
    def redirect_flags(self) -> tuple[str, ...]:
        """The REDIRECT_FLAGS this device has on, in lspci's order."""
        if self.acs_control is None:
            return ()
        return tuple(flag for flag in REDIRECT_FLAGS if self.acs_control.get(flag))

    @property
    def acs_unreadable(self) -> bool:
        """ACS is there (or may be) but its control register could not be read from the text."""
        return self.access_denied or (self.has_acs and self.acs_control is None)


@dataclass(frozen=True)
class AcsReport:
    """Every device lspci listed, and why the ACS state cannot be judged when it cannot."""

    devices: list[PciDevice] = field(default_factory=list)
    unknown: str | None = None  # why the ACS state cannot be judged; None when it can

    def bridges(self) -> list[PciDevice]:
        return [device for device in self.devices if device.is_bridge]

    def redirecting(self) -> list[PciDevice]:
        """Bridges whose ACSCtl has any of REDIRECT_FLAGS on: peer traffic through them leaves the switch."""
        return [device for device in self.bridges() if device.redirect_flags]

    def unjudged(self) -> list[PciDevice]:
        """Bridges whose ACS control could not be read (access denied, or a capability without ACSCtl)."""
        return [device for device in self.bridges() if device.acs_unreadable]


def parse_lspci(text: str) -> AcsReport:
    """Read `lspci -vvv` into devices; `unknown` says why the ACS state cannot be judged, if it cannot."""
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    if not text.strip():
        return AcsReport([], "empty lspci output")
    if _binary(text):
        return AcsReport([], "lspci output contains binary data (NUL or control bytes), not text")
    blocks = _blocks(text)
    if not blocks:
        return AcsReport([], "no lspci device block found (no line like '0000:05:00.0 PCI bridge: ...')")
    devices = [_device(header, body) for header, body in blocks]
    return AcsReport(devices, _why_unknown(devices, blocks[-1][1], _cut_mid_line(text)))


def _binary(text: str) -> bool:
    controls = sum(1 for char in text if ord(char) < 32 and char not in "\t\n")
    return "\x00" in text or controls > len(text) // 100


def _blocks(text: str) -> list[tuple[re.Match[str], list[str]]]:
    """(header match, the block's lines) per device; col-0 lines that are neither are skipped."""
    blocks: list[tuple[re.Match[str], list[str]]] = []
    lines = text.split("\n")
    if lines[-1] == "":
        lines.pop()  # the newline that ends the last line, not a blank line
    for line in lines:
        header = _HEADER.match(line)
        if header:
            blocks.append((header, []))
        elif blocks and (line[:1] in (" ", "\t") or line == "" or _HEX_DUMP.match(line)):
            blocks[-1][1].append(line)
    return blocks


def _device(header: re.Match[str], body: list[str]) -> PciDevice:
    lines = [line.strip() for line in body]
    has_acs = any(_ACS_CAP.match(line) for line in lines)
    controls = [_acs_control(line) for line in lines if line.startswith("ACSCtl:")]
    description = header.group("desc").strip()
    return PciDevice(
        address=_address(header),
        description=description,
        is_bridge=description.startswith("PCI bridge"),
        acs_control=controls[0] if controls else None,
        access_denied="Capabilities: <access denied>" in lines,
        has_acs=has_acs or bool(controls),
    )


def _address(header: re.Match[str]) -> str:
    """The device's own address with its domain: the last element of a -P/-PP path."""
    path = header.group("path")
    domain = header.group("domain") or "0000"
    if header.group("domain"):
        path = path[len(domain) + 1 :]
    last = path.rsplit("/", 1)[-1]
    return f"{domain}:{last}" if last.count(":") == 1 else f"{domain}:{path}"


def _acs_control(line: str) -> dict[str, bool] | None:
    """`ACSCtl: SrcValid+ TransBlk- ...` -> {flag: on}; None unless all seven flags are there."""
    flags: dict[str, bool] = {}
    for word in line.split(":", 1)[1].split():
        match = _FLAG.match(word)
        if match:
            flags[match.group(1)] = match.group(2) == "+"
    return flags if all(flag in flags for flag in ACS_FLAGS) else None


def _cut_mid_line(text: str) -> bool:
    """Output that stops without a final newline on a line that is no part of a block (a header cut
    before its class, say) was cut, even when the block before it looks whole."""
    if text.endswith("\n"):
        return False
    tail = text.rsplit("\n", 1)[-1]
    return bool(tail.strip()) and not (_HEADER.match(tail) or tail[:1] in (" ", "\t") or _HEX_DUMP.match(tail))


def _why_unknown(devices: list[PciDevice], last_body: list[str], cut_mid_line: bool) -> str | None:
    denied = [device.address for device in devices if device.is_bridge and device.access_denied]
    if denied:
        return (
            f"lspci ran without root: 'Capabilities: <access denied>' hides ACS on {len(denied)} bridge(s) "
            f"({', '.join(denied[:3])}{', ...' if len(denied) > 3 else ''}); run it as root"
        )
    if cut_mid_line or _cut_off(last_body):
        return f"lspci output ends inside the block of {devices[-1].address} (truncated): what followed is unknown"
    unreadable = [device.address for device in devices if device.is_bridge and device.acs_unreadable]
    if unreadable:
        return f"ACS capability printed without a complete ACSCtl line on bridge(s) {', '.join(unreadable)}"
    return None


def _cut_off(last_body: list[str]) -> bool:
    """lspci closes every block with a blank line. An output whose trailing blank line was stripped
    still ends with the block's usual last line (the kernel driver or module, or the last hex row of
    -xxx); anything else means the output stopped inside the block."""
    if last_body and last_body[-1] == "":
        return False
    lines = [line.strip() for line in last_body if line.strip()]
    return not lines or not (lines[-1].startswith(_LAST_LINES) or lines[-1].startswith(("f0: ", "ff0: ")))
