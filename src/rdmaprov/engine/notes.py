"""What operations report besides their commands: diffs, warnings, reboots still owed.

Operation generators run inside pyinfra (at plan time for check, at execute time for apply) where
no NodeContext exists; they leave notes in the run's context (engine/run_context.py), keyed by
host, for the runner to read.
"""

from __future__ import annotations

from collections.abc import Callable

from pyinfra import host
from pyinfra.api.state import BaseStateCallback, State
from pyinfra.context import ctx_state

from rdmaprov.engine.run_context import RunNotes, context_of


def current_notes() -> RunNotes | None:
    return context_of(ctx_state.get()).notes if ctx_state.isset() else None


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


class NotesPrinter(BaseStateCallback):
    """For plain pyinfra (deploy/site.py): print each host's new warnings and owed reboots as its
    operations finish, as `rdmaprov apply` shows them in its results."""

    def __init__(self, write: Callable[[str], None] = print) -> None:
        self.write = write
        self.shown: set[tuple[str, str, str]] = set()

    def operation_host_success(self, state: State, host, op_hash, retry_count: int = 0) -> None:  # type: ignore[override]
        self.show(state, host.name)

    def operation_host_error(  # type: ignore[override]
        self,
        state: State,
        host,
        op_hash,
        retry_count: int = 0,
        max_retries: int = 0,
    ) -> None:
        self.show(state, host.name)

    def show(self, state: State, name: str) -> None:
        notes = context_of(state).notes
        for kind, table in (("warning", notes.warnings), ("reboot required", notes.reboots)):
            for message in table.get(name, []):
                if (name, kind, message) not in self.shown:
                    self.shown.add((name, kind, message))
                    self.write(f"{name}: {kind}: {message}")
