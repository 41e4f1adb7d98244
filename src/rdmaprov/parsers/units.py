"""Sizes as the inventory and nccl-tests write them: a count with an optional binary suffix."""

from __future__ import annotations

import re

_SIZE = re.compile(r"^(\d+)([KMG]?)$")


def parse_size(text: str) -> int:
    """'4M' → 4194304 (binary multiples, as nccl-tests' -b/-e)."""
    match = _SIZE.match(text.strip())
    if not match:
        raise ValueError(f"size {text!r} is not a number with an optional K, M or G suffix")
    return int(match.group(1)) * {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}[match.group(2)]
