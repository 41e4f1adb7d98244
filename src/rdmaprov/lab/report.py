"""What `rdmaprov lab up|down|status` print, and the exit code of status: the lab's own report,
apart from the command line so that its texts can be checked without booting a lab."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from rich.console import RenderableType
from rich.table import Table

from rdmaprov.engine.results import EXIT_FAILURES, EXIT_OK
from rdmaprov.lab.lab import Lab, node_rss_kib
from rdmaprov.lab.releases import DEFAULT_RELEASE, find_release


def up_summary(lab: Lab, state: dict) -> list[str]:
    """The lines after `lab up`: how long each step took, what the nodes hold in memory, and what to run next."""
    timings = state["timings"]
    rss_mib = sum(node_rss_kib(node) for node in lab.nodes()) // 1024
    return [
        f"lab up: {len(state['nodes'])} {state['kind']} nodes ({_releases(state)}) in {timings['total_s']:.0f}s "
        f"(image {timings['image_s']:.0f}s, mirror {timings['mirror_s']:.0f}s, "
        f"boot to SSH {timings['boot_to_ssh_s']:.0f}s), nodes' memory {rss_mib} MiB",
        f"inventory: {lab.inventory}  (next: rdmaprov apply {lab.inventory})",
    ]


def _releases(state: dict) -> str:
    """`Debian 12 ×2, Debian 13 ×1`: how many nodes run each release."""
    versions = Counter(find_release(node.get("release", DEFAULT_RELEASE.codename)).version for node in state["nodes"])
    return ", ".join(f"Debian {version} ×{count}" for version, count in versions.items())


def down_summary(removed: list[str]) -> str:
    """The line after `lab down`: what it removed, or that there was nothing to remove."""
    return f"lab down: removed {', '.join(removed) if removed else 'nothing (no lab running)'}"


def status_table(lab_dir: Path, rows: list[dict]) -> RenderableType:
    """`lab status`'s rows as a table (columns in the rows' order), or a line saying no lab runs there."""
    if not rows:
        return f"no lab running from {lab_dir}"
    table = Table(title=f"lab {lab_dir}")
    columns = list(rows[0])
    for column in columns:
        table.add_column(column)
    for row in rows:
        table.add_row(*("" if row[c] is None else str(row[c]) for c in columns))
    return table


def status_exit_code(rows: list[dict]) -> int:
    """4 unless every node runs and answers SSH, so that scripts can wait on `lab status`."""
    return EXIT_OK if all(r["running"] and r["ssh"] for r in rows) else EXIT_FAILURES
