"""Every place rdmaprov keeps things on the control machine, and the PATH its programs on the
nodes run with: the environment variables and XDG rules that move them are read here and
nowhere else, so a module low in the house (builds, slurm) needs no import from one above it.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

# What node-side programs (node-check, its scontrol calls) look commands up in: slurmd starts its
# HealthCheckProgram with an almost empty environment.
SYSTEM_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
# The gates' CPU allreduce probe on the nodes (the gate_tools deploy builds and ships it there).
PROBE_PREFIX = "/opt/rdmaprov/probe"
PROBE_BINARY = f"{PROBE_PREFIX}/current/bin/allreduce_probe"


def cache_root() -> Path:
    """Images, packages, boxes and built artifacts shared by every run of this user (XDG cache)."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache")
    return Path(base) / "rdmaprov"


def artifacts_root() -> Path:
    """Built artifacts (NCCL, nccl-tests, probes) kept between runs; RDMAPROV_ARTIFACTS moves them."""
    return Path(os.environ.get("RDMAPROV_ARTIFACTS") or cache_root() / "artifacts")


def cluster_file(cluster: str, name: str) -> Path:
    """Where a cluster's `name` file is kept between runs (counter reads, baselines): XDG state;
    RDMAPROV_STATE moves it."""
    base = os.environ.get("RDMAPROV_STATE") or os.environ.get("XDG_STATE_HOME") or os.path.expanduser("~/.local/state")
    return Path(base) / "rdmaprov" / "clusters" / re.sub(r"[^A-Za-z0-9_.-]", "_", cluster) / name
