"""Which private networks a test process may take for the hosts and labs it creates."""

from __future__ import annotations

import os


def octets(low: int, high: int) -> list[int]:
    """The third octets in [low, high) this process may use, the first it tries set by its pid.
    With RDMAPROV_TEST_NET_SHARE=k/n (tools/test.sh runs two pytest processes at once) only the
    k-th of n equal bands: a network is chosen minutes before its bridge exists (a lab's images
    and mirror come first), so two processes reading `ip addr` could otherwise pick the same one."""
    share = os.environ.get("RDMAPROV_TEST_NET_SHARE")
    if share:
        k, n = (int(part) for part in share.split("/"))
        width = (high - low) // n
        low, high = low + k * width, low + (k + 1) * width
    span = list(range(low, high))
    start = os.getpid() % len(span)
    return span[start:] + span[:start]
