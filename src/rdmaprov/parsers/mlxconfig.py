"""A ConnectX NIC's persistent firmware settings as `mstconfig -e -d PCI q` (Debian's mstflint) or
NVIDIA MFT's `mlxconfig` prints them: a device header, then `Configurations:` and a row per
setting: its name and its value for the next boot, or with `-e` (where the firmware can say) its
default, current and next-boot values. A row starts with `*` where the next boot differs, `RO`
where the setting is read-only. A value is a number (`255`) or a word with its number
(`True(1)`, `ETH(2)`); arrays (`Array[0..7]`) have none.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

_VALUE = re.compile(r"-?\d+|\S*\((-?\d+)\)")


@dataclass(frozen=True)
class FirmwareConfig:
    """{setting: number} for the next boot and, where the firmware shows it, running now; None for
    a value with no number. `errors`: the tool's `-E-` lines (a setting this device lacks)."""

    next_boot: dict[str, int | None] = field(default_factory=dict)
    current: dict[str, int | None] = field(default_factory=dict)
    errors: tuple[str, ...] = ()


def _number(word: str) -> int | None:
    match = _VALUE.fullmatch(word)
    if match is None:
        return None
    return int(match.group(1) if match.group(1) is not None else match.group(0))


def parse_mlxconfig_query(text: str) -> FirmwareConfig:
    """The settings table of one device's query; a row whose values do not match the header's
    columns (a cut or garbled line) is skipped."""
    columns: list[str] = []
    next_boot: dict[str, int | None] = {}
    current: dict[str, int | None] = {}
    errors = []
    for line in text.splitlines():
        if line.startswith("-E-"):
            errors.append(line.removeprefix("-E-").strip())
            continue
        if line.startswith("Configurations:"):
            header = line.removeprefix("Configurations:")
            columns = re.findall(r"Default|Current|Next Boot|New", header)
            continue
        words = line.split()
        if not columns or not words or words[0].endswith(":") or line.startswith("The "):
            continue
        while words and words[0] in ("*", "RO"):
            words = words[1:]
        if len(words) != 1 + len(columns) or not re.fullmatch(r"[A-Za-z][A-Za-z0-9_]*", words[0]):
            continue
        values = dict(zip(columns, words[1:], strict=True))
        next_boot[words[0]] = _number(values["Next Boot"])
        if "Current" in values:
            current[words[0]] = _number(values["Current"])
    return FirmwareConfig(next_boot, current, tuple(errors))
