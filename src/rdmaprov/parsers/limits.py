"""Which line of which config file sets memlock: so a check that finds the wrong limit can name
the file that set it, when that file is not rdmaprov's and apply therefore cannot fix it.

Input is `grep -Hn` over pam_limits' files (limits.conf, limits.d/*.conf) and systemd's manager
config (system.conf and its drop-ins).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# rdmaprov's own files (the limits deploy writes them): verify names any other file that sets
# memlock, as apply leaves those alone.
LOGIN_LIMITS = "/etc/security/limits.d/90-rdmaprov-memlock.conf"
SERVICE_LIMITS = "/etc/systemd/system.conf.d/90-rdmaprov-memlock.conf"

# pam_limits reads these as "no limit".
_PAM_UNLIMITED = {"unlimited", "infinity", "-1"}


@dataclass(frozen=True)
class SettingLine:
    path: str
    number: int
    text: str  # the line as written, trimmed

    def __str__(self) -> str:
        return f"{self.path}:{self.number} `{self.text}`"


def parse_setting_lines(lines: list[str]) -> list[SettingLine]:
    """`path:number:text` lines → the settings they show; comments and blank lines dropped."""
    found = []
    for line in lines:
        match = re.match(r"([^:]+):(\d+):(.*)$", line)
        if not match:
            continue
        text = match.group(3).split("#", 1)[0].strip()
        if text:
            found.append(SettingLine(match.group(1), int(match.group(2)), text))
    return found


def pam_memlock(line: SettingLine) -> str | None:
    """`<domain> <type> memlock <value>` → the value ("unlimited" for any of its spellings)."""
    parts = line.text.split()
    if len(parts) != 4 or parts[2] != "memlock" or parts[1] not in ("soft", "hard", "-"):
        return None
    return "unlimited" if parts[3] in _PAM_UNLIMITED else parts[3]


def systemd_memlock(line: SettingLine) -> str | None:
    """`DefaultLimitMEMLOCK=<value>` → the value."""
    key, sep, value = line.text.partition("=")
    return value.strip() if sep and key.strip() == "DefaultLimitMEMLOCK" else None


def memlock_value(memlock: str | int) -> tuple[str, str]:
    """(limits.conf value, systemd value) for the node's memlock setting (KiB in limits.conf, bytes for systemd)."""
    if memlock == "unlimited":
        return "unlimited", "infinity"
    return str(memlock), str(int(memlock) * 1024)
