"""PCIe link state of RDMA devices from sysfs (`grep -H .` over each device's
current/max_link_speed and current/max_link_width): an HCA whose link trained slower or narrower
than it can run cannot reach its line rate, however healthy its port looks.

Kernels write the speed as `16.0 GT/s PCIe` (5.x and later) or `8 GT/s` (older), and `Unknown`
when the slot does not say; a device without these files (SoftRoCE, a virtual function on some
hypervisors) has no PCIe link of its own to judge.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

PCI_LINK_FILES = " ".join(
    f"/sys/class/infiniband/*/device/{kind}_link_{what}" for kind in ("current", "max") for what in ("speed", "width")
)

_LINE = re.compile(r"^/sys/class/infiniband/([^/]+)/device/(current|max)_link_(speed|width):(.*)$")
_GTS = re.compile(r"^([\d.]+)\s*GT/s")


@dataclass(frozen=True)
class PciLink:
    """One device's link as sysfs words it: speed like `16.0 GT/s PCIe`, width like `16`."""

    speed: str = ""
    max_speed: str = ""
    width: str = ""
    max_width: str = ""

    @property
    def known(self) -> bool:
        """Whether all four values are numbers that can be compared."""
        return None not in (gts(self.speed), gts(self.max_speed), lanes(self.width), lanes(self.max_width))

    @property
    def full(self) -> bool:
        """Trained at the speed and width the device supports (only meaningful when known)."""
        return gts(self.speed) == gts(self.max_speed) and lanes(self.width) == lanes(self.max_width)

    @property
    def trained(self) -> str:
        """The width and speed the link trained at, '?' for what sysfs does not say."""
        return _width_at_speed(self.width, self.speed)

    @property
    def capable(self) -> str:
        """The width and speed the card and slot support."""
        return _width_at_speed(self.max_width, self.max_speed)

    def describe(self) -> str:
        return f"{self.trained} (max {self.capable})"


def _width_at_speed(width: str, speed: str) -> str:
    return f"x{width or '?'} at {speed or '?'}"


def gts(value: str) -> float | None:
    """`16.0 GT/s PCIe` → 16.0; `Unknown` or empty → None."""
    match = _GTS.match(value.strip())
    return float(match.group(1)) if match else None


def lanes(value: str) -> int | None:
    """`16` → 16; `0` (no link trained) and anything else → None."""
    value = value.strip()
    return int(value) if value.isdigit() and int(value) > 0 else None


def parse_pci_links(lines: list[str]) -> dict[str, PciLink]:
    """{device: PciLink}; devices that have none of the files are absent."""
    found: dict[str, dict[str, str]] = {}
    for line in lines:
        match = _LINE.match(line.rstrip())
        if match:
            device, kind, what, value = match.groups()
            key = ("max_" if kind == "max" else "") + what
            found.setdefault(device, {})[key] = value.strip()
    return {device: PciLink(**values) for device, values in found.items()}
