"""Parsers for the rdma tool (iproute2) and rdma-core utilities."""

from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class RdmaLink:
    """One line of `rdma link show`: an RDMA port and the netdev under it."""

    device: str
    port: int
    state: str
    physical_state: str
    netdev: str | None


def parse_rdma_link(text: str) -> list[RdmaLink]:
    """`link rxe0/1 state ACTIVE physical_state LINK_UP netdev eth0` → RdmaLink; also the older
    iproute2 form `1/1: mlx5_0/1: state ACTIVE …`. A line cut off before its port is skipped."""
    links = []
    for line in text.splitlines():
        tokens = line.split()
        old_form = bool(tokens) and re.fullmatch(r"\d+/\d+:", tokens[0]) is not None
        if len(tokens) < 2 or not (tokens[0] == "link" or old_form):
            continue
        device, _, port = tokens[1].rstrip(":").partition("/")
        if not device or not port.isdigit():
            continue
        fields = dict(zip(tokens[2::2], tokens[3::2], strict=False))
        links.append(
            RdmaLink(device, int(port), fields.get("state", ""), fields.get("physical_state", ""), fields.get("netdev"))
        )
    return links


def parse_rdma_system(text: str) -> dict[str, str]:
    """`rdma system show` → {'netns': 'exclusive', 'copy-on-fork': 'on'}."""
    for line in text.splitlines():
        tokens = line.split()
        if tokens and tokens[0] == "netns":
            return dict(zip(tokens[0::2], tokens[1::2], strict=False))
    return {}
