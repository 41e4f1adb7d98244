"""Quoting for each consumer of the files and commands rdmaprov writes on the nodes.

Validation already refuses inventory values that have no business in these places (newlines,
control characters, shell syntax in names); quoting here is the second wall: every value that
reaches a shell, a systemd unit or a line-oriented config file goes through the helper for that
consumer, so a value is read back by its consumer exactly as written, or refused.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterable

_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_WHITESPACE = re.compile(r"\s")
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
# systemd's unit-name escaping keeps these; everything else becomes \xNN (systemd-escape --path).
_UNIT_SAFE = re.compile(r"[A-Za-z0-9:_.]")
_SYSTEMD_PLAIN = re.compile(r"[A-Za-z0-9_.:/@+=,-]+\Z")


def sh(value: object) -> str:
    """One shell word (POSIX sh, bash): the shell passes on exactly `value`."""
    return shlex.quote(str(value))


def sh_join(words: Iterable[object]) -> str:
    """A shell command line from words, each quoted."""
    return " ".join(sh(word) for word in words)


def sh_single(value: object) -> str:
    """Always single-quoted, even when plain: profile.d lines keep one stable shape ('…')."""
    return "'" + str(value).replace("'", "'\"'\"'") + "'"


def sh_double(value: object) -> str:
    """Always double-quoted, with `$`, backquote, `"` and backslash escaped: the form build
    scripts have always used for NVCC_GENCODE (a build's identity hashes its script text)."""
    escaped = re.sub(r'([$`"\\])', r"\\\1", str(value))
    return f'"{escaped}"'


def sh_export(name: str, value: object) -> str:
    """`export NAME='value'` for a profile.d snippet that login shells source."""
    if not _NAME.match(name):
        raise ValueError(f"{name!r} is not a shell variable name")
    return f"export {name}={sh_single(config_value(str(value), name))}"


# A line a node-side script prints while it works, for the operator to see at once (the run shows
# it live, engine/connection.py) and never as a failure's reason.
NOTE_PREFIX = "rdmaprov note: "


def fail_command(what: str, fix: str) -> str:
    """A shell block that reports `rdmaprov: WHAT on HOSTNAME: FIX` on stderr and exits 1.

    WHAT and FIX are data (they may name a URL from the inventory): passed to printf as
    arguments, never expanded by the shell.
    """
    return f"{{ printf 'rdmaprov: %s on %s: %s\\n' {sh(what)} \"$(hostname)\" {sh(fix)} >&2; exit 1; }}"


def config_value(value: str, what: str) -> str:
    """A value for a line-oriented file with no quoting (nccl.conf, ld.so.conf.d, yum .repo,
    apt .list, /etc/hosts): one line, no control characters, or refused."""
    if _CONTROL.search(value):
        raise ValueError(
            f"{what} {value!r} contains a control character (a newline?): it cannot be written to a config file"
        )
    return value


def config_word(value: str, what: str) -> str:
    """One whitespace-separated field of such a file (an apt source's URL, a hosts-file name)."""
    if not value or _WHITESPACE.search(value) or _CONTROL.search(value):
        raise ValueError(f"{what} {value!r} is empty or contains whitespace: it must be one field of a config line")
    return value


def toml_string(value: str, what: str) -> str:
    """A TOML basic string ("…", backslash and quote escaped) on one line, as containers.conf reads it."""
    config_value(value, what)
    escaped = value.replace("\\", "\\\\").replace('"', '\\"')
    return f'"{escaped}"'


def toml_list(values: Iterable[str], what: str) -> str:
    """A TOML array of basic strings on one line."""
    return "[" + ", ".join(toml_string(value, what) for value in values) + "]"


def systemd_arg(value: str) -> str:
    """One argument of a systemd ExecStart= line: quoted, with `%` specifiers and `$` expansion
    escaped, so systemd passes exactly `value` (systemd.service(5), "Command lines")."""
    config_value(value, "systemd argument")
    if _SYSTEMD_PLAIN.match(value):
        return value
    escaped = value.replace("\\", "\\\\").replace('"', '\\"').replace("%", "%%").replace("$", "$$")
    return f'"{escaped}"'


def systemd_escape_path(path: str) -> str:
    """The unit-name form of a path, as `systemd-escape --path` writes it: /sys/x/eth-1 →
    sys-x-eth\\x2d1 (a '-' in a name would otherwise read as a '/')."""
    trimmed = path.strip("/")
    if not trimmed:
        return "-"
    out = []
    for index, char in enumerate(trimmed):
        if char == "/":
            out.append("-")
        elif _UNIT_SAFE.match(char) and not (index == 0 and char == "."):
            out.append(char)
        else:
            out.extend(f"\\x{byte:02x}" for byte in char.encode("utf-8"))
    return "".join(out)


def device_unit(netdev: str) -> str:
    """The systemd device unit that appears when a network interface does."""
    return systemd_escape_path(f"/sys/subsystem/net/devices/{netdev}") + ".device"


# One value in slurm.conf, gres.conf or cgroup.conf: Slurm's parser splits words on whitespace,
# reads `#` as a comment and `"` as a quote, and takes `Key=Value` pairs: none of those may appear.
_SLURM_WORD = re.compile(r"[A-Za-z0-9_.:/@+,\[\]()-]+\Z")


def slurm_word(value: object, what: str) -> str:
    """A value for a Slurm config file (a node name, an address, a path, a count), or refused."""
    text = str(value)
    if not _SLURM_WORD.match(text):
        raise ValueError(
            f"{what} {text!r} cannot be written to slurm.conf: only letters, digits and _ . : / @ + , [ ] ( ) -"
        )
    return text
