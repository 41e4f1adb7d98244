"""Slurm-side outputs: a node's hardware as slurm.conf describes it (from lscpu and /proc/meminfo),
the node lines of an existing slurm.conf, and `scontrol -o show node` (node states, partitions,
drain reasons with the time they were set)."""

from __future__ import annotations

import re
from dataclasses import dataclass

# The hardware section's command (facts/slurm.py runs it): slurmd -C's figures without slurmd,
# which is not installed yet when slurm.conf is first rendered.
# slurmd drains a node whose memory falls below RealMemory ("Low RealMemory"), and MemTotal shrinks
# by a few MiB with a new kernel or firmware: declared with 2 % to spare, an update drains nothing.
MEMORY_HEADROOM = 0.02
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
    memory_mib: int  # RealMemory: MemTotal in MiB less MEMORY_HEADROOM (slurmd -C says all of it)

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
            memory_mib=int(memory_kib // 1024 * (1 - MEMORY_HEADROOM)),
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
# Reason= is free text, stamped `[user@time]` at its end. Slurm 22.05 prints it last; later
# releases print Comment=, Extra=, ReservationName=... after it: the stamp ends the reason.
_FIELD = re.compile(r"(?:^|\s)([A-Za-z][A-Za-z_]*)=")
_STAMP = re.compile(r"\s*\[([^\]@]*)@(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)\](?=\s+[A-Za-z][A-Za-z_]*=|\s*$)")


def _fields(line: str) -> dict[str, str]:
    """The Key=Value fields of one `scontrol -o show node` line. Reason= runs to its stamp (kept
    in "ReasonTime"), or to the end of the line when it has none."""
    fields: dict[str, str] = {}
    marks = list(_FIELD.finditer(line))
    for index, mark in enumerate(marks):
        key = mark.group(1)
        if key in fields:
            continue  # a later "Key=" inside a value (an OS string) is not a field
        if key == "Reason":
            rest = line[mark.end() :]
            stamp = _STAMP.search(rest)
            if stamp is None:
                fields[key] = rest.strip()
                break
            fields[key], fields["ReasonTime"] = rest[: stamp.start()].strip(), stamp.group(2)
            fields.update((k, v) for k, v in _fields(rest[stamp.end() :]).items() if k not in fields)
            break
        end = marks[index + 1].start() if index + 1 < len(marks) else len(line)
        fields[key] = line[mark.end() : end].strip()
    return fields


# What a node is in Slurm, in Slurm's words: the state words, whose drain is rdmaprov's, which
# states are Slurm's to manage. slurm/drain.py decides on these.
PREFIX = "rdmaprov:"
# States in which Slurm itself manages the node: rdmaprov neither drains nor resumes it.
HANDS_OFF = frozenset(
    {
        "DOWN",
        "FAIL",
        "FAILING",
        "NOT_RESPONDING",
        "FUTURE",
        "UNKNOWN",
        "POWERED_DOWN",
        "POWERING_DOWN",
        "POWER_DOWN",
        "POWERING_UP",
        "REBOOT_ISSUED",
        "REBOOT_REQUESTED",
        "INVALID_REG",
        "INVAL",
    }
)


# A node whose slurmd has not registered yet: UNKNOWN at its first start, +NOT_RESPONDING after
# any slurmd restart. slurmd runs the health check before it registers, so that check is the one
# that must drain a node that booted broken, before it takes jobs (Slurm keeps the drain through
# the registration: IDLE+DRAIN on 24.11). A passing check never resumes a node from here: Slurm
# has not taken it back yet, and the next periodic check does.
STARTING = frozenset({"UNKNOWN", "NOT_RESPONDING"})


@dataclass(frozen=True)
class SlurmNode:
    """A node as `scontrol show node` shows it: base state and flags (IDLE, DRAIN…), its partitions
    and its reason with when it was set (ISO time, as Slurm writes it: sortable)."""

    name: str
    states: frozenset[str]
    partitions: tuple[str, ...] = ()
    reason: str = ""
    reason_time: str = ""

    @property
    def drained(self) -> bool:
        return "DRAIN" in self.states

    @property
    def by_rdmaprov(self) -> bool:
        return self.drained and self.reason.startswith(PREFIX)

    @property
    def hands_off(self) -> str | None:
        """The state that makes Slurm, not rdmaprov, responsible for the node (None: none)."""
        found = sorted(self.states & HANDS_OFF)
        return found[0] if found else None

    @property
    def starting(self) -> bool:
        """Hands off only because slurmd has not registered (STARTING): a failing check drains it."""
        managed = self.states & HANDS_OFF
        return bool(managed) and managed <= STARTING


def parse_scontrol_nodes(text: str) -> list[SlurmNode]:
    """`scontrol -o show node [NAME]` → nodes: state words (IDLE+DRAIN+NOT_RESPONDING → a set),
    partitions, and the reason without Slurm's `[user@time]` stamp (its time kept apart)."""
    nodes = []
    for line in text.splitlines():
        if not line.startswith("NodeName="):
            continue
        fields = _fields(line)
        states = set(fields.get("State", "UNKNOWN").split("+"))
        reason, when = fields.get("Reason", ""), fields.get("ReasonTime", "")
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
