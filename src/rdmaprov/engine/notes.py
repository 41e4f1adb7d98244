"""What operations report besides their commands: diffs, warnings, reboots still owed.

Operation generators run inside pyinfra (at plan time for check, at execute time for apply) where
no NodeContext exists; they leave notes on the run's state, keyed by host, for the runner to read.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from pyinfra import host
from pyinfra.context import ctx_state


@dataclass
class RunNotes:
    """Per-run notes: diffs and desired-state fingerprints by (host, op hash), warnings and
    reboot reasons by host."""

    diffs: dict[tuple[str, str], str] = field(default_factory=dict)
    desired: dict[tuple[str, str], str] = field(default_factory=dict)
    warnings: dict[str, list[str]] = field(default_factory=dict)
    reboots: dict[str, list[str]] = field(default_factory=dict)

    def clear(self) -> None:
        """Forget what fact discovery's trial evaluations noted: the real evaluation notes it again."""
        for table in (self.diffs, self.desired, self.warnings, self.reboots):
            table.clear()


def current_notes() -> RunNotes | None:
    return getattr(ctx_state.get(), "rdmaprov_notes", None)


def _add(table: dict[str, list[str]], message: str) -> None:
    """Append `message` to the current host's list once."""
    items = table.setdefault(host.name, [])
    if message not in items:
        items.append(message)


def record_diff(diff: str) -> None:
    """The unified diff of the operation being planned on the current host."""
    notes = current_notes()
    if notes is not None and host.current_op_hash:
        notes.diffs[(host.name, host.current_op_hash)] = diff


def warn(message: str) -> None:
    """A warning about the current host, shown in its result."""
    notes = current_notes()
    if notes is not None:
        _add(notes.warnings, message)


def reboot_required(reason: str) -> None:
    """The current host needs a reboot for a setting to take effect."""
    notes = current_notes()
    if notes is not None:
        _add(notes.reboots, reason)
