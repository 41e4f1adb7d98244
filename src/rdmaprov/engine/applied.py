"""What rdmaprov last applied on a node, kept on the node itself, and drift classified against it.

Each apply writes /etc/rdmaprov/applied.json on every host it reached: per operation (keyed by
its name, "deploy | operation") the fingerprint of what was asked (engine/desired.py), plus the rdmaprov
version and the inventory's hash. `check` reads it back: an operation that would change while
its fingerprint is the recorded one means the node moved away from what was applied
(corrective); a different fingerprint means the inventory changed since (intentional); no
record at all means rdmaprov never applied it on this node (new).
"""

from __future__ import annotations

import contextlib
import json
import shlex
from dataclasses import dataclass, field
from datetime import datetime, timezone
from io import BytesIO
from typing import Literal

from pyinfra.api import FactBase, StringCommand

from rdmaprov.engine.pyinfra_state import privileges

RECORD_DIR = "/etc/rdmaprov"
RECORD_PATH = f"{RECORD_DIR}/applied.json"

Drift = Literal["corrective", "intentional", "new", "manual"]


@dataclass(frozen=True)
class AppliedRecord:
    """The record as read from a node (empty when there is none or it is unreadable)."""

    ops: dict[str, str] = field(default_factory=dict)
    applied_at: str | None = None
    rdmaprov_version: str | None = None
    inventory_sha256: str | None = None


def parse_record(text: str) -> AppliedRecord:
    """The record in `text`; a missing or damaged file reads as no record (everything is new)."""
    try:
        doc = json.loads(text or "{}")
    except json.JSONDecodeError:
        return AppliedRecord()
    if not isinstance(doc, dict) or not isinstance(doc.get("ops"), dict):
        return AppliedRecord()
    ops = {str(k): str(v) for k, v in doc["ops"].items()}
    return AppliedRecord(ops, doc.get("applied_at"), doc.get("rdmaprov_version"), doc.get("inventory_sha256"))


class AppliedRecordFact(FactBase[AppliedRecord]):
    """The applied-state record of this node."""

    def command(self) -> str:
        return f"cat {RECORD_PATH} 2>/dev/null || true"

    def process(self, output: list[str]) -> AppliedRecord:
        return parse_record("\n".join(output))

    @staticmethod
    def default() -> AppliedRecord:
        return AppliedRecord()


def classify(recorded: str | None, desired: str | None) -> Drift:
    """Why an operation would change: see the module docstring."""
    if recorded is None:
        return "new"
    return "corrective" if recorded == desired else "intentional"


def merged_record(previous: AppliedRecord, applied: dict[str, str], inventory_sha256: str, version: str) -> str:
    """The new record: this run's operations over the previous ones (a --tags run keeps the rest)."""
    ops = {**previous.ops, **applied}
    doc = {
        "rdmaprov_version": version,
        "applied_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "inventory_sha256": inventory_sha256,
        "ops": dict(sorted(ops.items())),
    }
    return json.dumps(doc, indent=2) + "\n"


def write_record(host, content: str) -> bool:
    """Write the record on `host` (connected, inside its pyinfra context): temp file, then rename.
    A write that fails (a full disk) removes its temp file, which would otherwise stay, empty,
    until the next apply."""
    temp = shlex.quote(f"{RECORD_PATH}.rdmaprov-tmp")
    sudo = privileges(host)
    if not host.run_shell_command(StringCommand(f"mkdir -p {RECORD_DIR} && chmod 755 {RECORD_DIR}"), **sudo)[0]:
        return False
    written = False
    try:
        written = bool(
            host.put_file(BytesIO(content.encode("utf-8")), f"{RECORD_PATH}.rdmaprov-tmp", **sudo)
            and host.run_shell_command(StringCommand(f"chmod 644 {temp} && mv -f {temp} {RECORD_PATH}"), **sudo)[0]
        )
    finally:
        if not written:
            with contextlib.suppress(Exception):  # best effort: the connection may be gone too
                host.run_shell_command(StringCommand(f"rm -f {temp}"), **sudo)
    return written


def classify_fact(deploy: str | None, has_record: bool, inputs_changed: list[str]) -> Drift:
    """A fact that no longer holds, established by `deploy`: manual when no deploy establishes
    it (the hardware's own state, a file rdmaprov did not write: apply cannot put it back, so
    calling it corrective would promise what apply does not do), intentional when that deploy's
    inventory settings changed since the last apply, new when rdmaprov never applied this node,
    corrective otherwise."""
    if deploy is None:
        return "manual"
    if not has_record:
        return "new"
    return "intentional" if deploy is not None and deploy in inputs_changed else "corrective"
