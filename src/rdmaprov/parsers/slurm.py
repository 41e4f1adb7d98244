"""Slurm-side outputs: a node's hardware as slurm.conf describes it (from lscpu and /proc/meminfo),
the node lines of an existing slurm.conf, and `scontrol -o show node` (node states, partitions,
drain reasons with the time they were set)."""

from __future__ import annotations

import re
from dataclasses import dataclass

from rdmaprov.slurm.drain import SlurmNode

# The hardware section's command (facts/slurm.py runs it): slurmd -C's figures without slurmd,
# which is not installed yet when slurm.conf is first rendered.
_LSCPU_KEYS = "CPU\\(s\\)|Thread\\(s\\) per core|Core\\(s\\) per socket|Socket\\(s\\)"
HARDWARE_COMMAND = f"hostname -s; LC_ALL=C lscpu | grep -E '^({_LSCPU_KEYS}):'; grep '^MemTotal:' /proc/meminfo"


@dataclass(frozen=True)
class NodeHardware:
    """What slurm.conf's NodeName line declares, as `slurmd -C` would print it."""

    hostname: str
    cpus: int
    sockets: int
    cores_per_socket: int
    threads_per_core: int
    memory_mib: int  # RealMemory: MemTotal in MiB, rounded down (slurmd -C's figure)

    def slurm_words(self) -> list[str]:
        return [
            f"CPUs={self.cpus}",
            "Boards=1",
            f"SocketsPerBoard={self.sockets}",
            f"CoresPerSocket={self.cores_per_socket}",
            f"ThreadsPerCore={self.threads_per_core}",
            f"RealMemory={self.memory_mib}",
        ]


def parse_hardware(lines: list[str]) -> NodeHardware | None:
    """HARDWARE_COMMAND's output → NodeHardware; None when a figure is missing (no lscpu)."""
    if not lines or not lines[0].strip():
        return None
    values: dict[str, str] = {}
    for line in lines[1:]:
        key, sep, value = line.partition(":")
        if sep:
            values[key.strip()] = value.strip()
    try:
        memory_kib = int(values["MemTotal"].split()[0])
        return NodeHardware(
            hostname=lines[0].strip(),
            cpus=int(values["CPU(s)"]),
            sockets=int(values["Socket(s)"]),
            cores_per_socket=int(values["Core(s) per socket"]),
            threads_per_core=int(values["Thread(s) per core"]),
            memory_mib=memory_kib // 1024,
        )
    except (KeyError, ValueError, IndexError):
        return None


def conf_node_lines(text: str) -> dict[str, str]:
    """`NodeName=NAME …` lines of a slurm.conf, by node name (one name per line, as rdmaprov writes
    them): kept for nodes a run did not reach."""
    lines = {}
    for line in text.splitlines():
        match = re.match(r"NodeName=([A-Za-z0-9_-]+)\s", line)
        if match:
            lines[match.group(1)] = line.strip()
    return lines


def conf_value(text: str, key: str) -> str | None:
    """The value of a `Key=value` line of a slurm.conf (the last one, as Slurm reads it)."""
    found = None
    for line in text.splitlines():
        name, sep, value = line.strip().partition("=")
        if sep and name == key:
            found = value.strip()
    return found


# scontrol prints each node on one line as Key=Value words; OS= has spaces in its value, and
# Reason= (free text, the last field) may have anything: the field names are what splits it.
_FIELD = re.compile(r"(?:^|\s)([A-Za-z][A-Za-z_]*)=")
_REASON = re.compile(r"^(.*?)\s*\[([^\]@]*)@([0-9T:-]+)\]\s*$")


def _fields(line: str) -> dict[str, str]:
    """The Key=Value fields of one `scontrol -o show node` line; Reason= takes the rest of it."""
    marks = list(_FIELD.finditer(line))
    fields: dict[str, str] = {}
    for index, mark in enumerate(marks):
        key = mark.group(1)
        if key in fields:
            continue  # a later "Key=" inside a value (an OS string, a reason) is not a field
        if key == "Reason":
            fields[key] = line[mark.end() :].strip()
            break
        end = marks[index + 1].start() if index + 1 < len(marks) else len(line)
        fields[key] = line[mark.end() : end].strip()
    return fields


def parse_scontrol_nodes(text: str) -> list[SlurmNode]:
    """`scontrol -o show node [NAME]` → nodes: state words (IDLE+DRAIN → {IDLE, DRAIN}; a trailing
    `*` means not responding), partitions, and the reason without Slurm's `[user@time]` stamp."""
    nodes = []
    for line in text.splitlines():
        if not line.startswith("NodeName="):
            continue
        fields = _fields(line)
        raw_state = fields.get("State", "UNKNOWN")
        states = set(re.split(r"[+]", raw_state.rstrip("*~#!%$@^-")))
        if raw_state.endswith("*"):
            states.add("NOT_RESPONDING")
        reason, when = fields.get("Reason", ""), ""
        stamped = _REASON.match(reason)
        if stamped:
            reason, when = stamped.group(1), stamped.group(3)
        partitions = fields.get("Partitions", "")
        nodes.append(
            SlurmNode(
                fields["NodeName"],
                frozenset(s for s in states if s),
                tuple(p for p in partitions.split(",") if p and p != "(null)"),
                reason if reason != "(null)" else "",
                when,
            )
        )
    return nodes
