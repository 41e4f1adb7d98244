"""node-check's command-line options: one definition for `rdmaprov node-check` and the shipped
zipapp (light imports: the rdmaprov CLI builds every parser on each start)."""

from __future__ import annotations

import argparse

EXPECTATIONS = "/etc/rdmaprov/node-check.json"
STATE_DIR = "/var/lib/rdmaprov/node-check"
DESCRIPTION = (
    "verify's per-node checks, run on this node against the expectations the node_check deploy wrote. "
    "Exit codes: 0 healthy, 4 a check failed (one line each), 1 the expectations file is missing or wrong."
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--expectations",
        default=EXPECTATIONS,
        metavar="PATH",
        help=f"what this node must be, as the node_check deploy wrote it (default {EXPECTATIONS})",
    )
    parser.add_argument(
        "--state-dir",
        default=STATE_DIR,
        metavar="DIR",
        help=f"where port error counters are kept between checks (default {STATE_DIR})",
    )
    parser.add_argument(
        "--report-file",
        metavar="PATH",
        help="judge a node report captured earlier (the report command's output) instead of reading this node",
    )
    parser.add_argument(
        "--slurm",
        action="store_true",
        help="then drain this node in Slurm when it fails, resume it when rdmaprov drained it and it passes "
        "(Slurm's HealthCheckProgram: /usr/local/sbin/rdmaprov-slurm-health-check)",
    )
    parser.add_argument("--json", action="store_true", help="print the outcome as JSON")
