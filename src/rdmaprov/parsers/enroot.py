"""What enroot will give its containers, from the lines facts/node_report.py's `enroot` section
prints: `missing`, or `version V`, `conf PATH` (the enroot.conf its script reads: its build's
sysconfdir), then `file PATH` for each config file that exists, in the order enroot reads them,
each followed by its lines that set one of SETTINGS.

enroot reads enroot.conf, then enroot.conf.d/*.conf; a setting keeps the first value it is given
(the environment's before any file's), and a value such as `no`, `n` or `false` turns it off.
Each of SETTINGS, on, takes from every container what an RDMA job needs: RESTRICT_DEV and
UNSHARE_IPC give it a /dev of its own with a few devices and no /dev/infiniband; UNSHARE_NET a
network namespace of its own, without the node's interfaces (NCCL's bootstrap) or, in exclusive
netns mode, its RDMA devices.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

SETTINGS = ("ENROOT_RESTRICT_DEV", "ENROOT_UNSHARE_IPC", "ENROOT_UNSHARE_NET")
_OFF = re.compile(r"^(no?|N[oO]?|[fF](alse)?|FALSE)$")  # enroot.in's config::fini


@dataclass(frozen=True)
class EnrootSetting:
    value: str
    file: str


@dataclass(frozen=True)
class EnrootState:
    installed: bool
    version: str | None = None
    conf: str | None = None  # the enroot.conf it reads
    settings: dict[str, EnrootSetting] = field(default_factory=dict)  # of SETTINGS, as enroot takes them

    @property
    def taking(self) -> dict[str, EnrootSetting]:
        """Those of SETTINGS that are on."""
        return {key: s for key, s in self.settings.items() if s.value and not _OFF.match(s.value)}


def parse_enroot(lines: list[str]) -> EnrootState | None:
    """None when the section was not read (not asked for, or an older node-check's report)."""
    if not lines:
        return None
    if lines[0].strip() == "missing":
        return EnrootState(installed=False)
    version = conf = None
    settings: dict[str, EnrootSetting] = {}
    current = ""
    for line in lines:
        word, _, rest = line.strip().partition(" ")
        if word == "version":
            version = rest.strip() or None
        elif word == "conf":
            conf = rest.strip() or None
        elif word == "file":
            current = rest.strip()
        else:
            key, value = _setting(line)
            if key in SETTINGS and not (key in settings and settings[key].value):
                settings[key] = EnrootSetting(value, current)
    return EnrootState(True, version, conf, settings)


def _setting(line: str) -> tuple[str, str]:
    """KEY and VALUE of a config line, as enroot splits it (on blanks and '=') and unquotes it."""
    parts = re.split(r"[ \t=]+", line.strip(), maxsplit=1)
    value = parts[1].split("#", 1)[0].strip() if len(parts) > 1 else ""
    return parts[0], value.strip("\"'")
