"""A command's output compressed on the node for the trip over SSH, and unpacked here.

A GPU node's report is about 270 KB of text in about 5,000 lines (`nvidia-smi -q` alone is 14 KB
per GPU), and nearly all of it repeats itself. Sent as it is, the control machine decrypts,
checks and splits every one of those bytes and lines per node: at 1,000 nodes that was most of
verify's CPU there, and the part that grew per node as the nodes' output arrived in smaller
pieces (bench/RESULTS.md). gzip makes it about 14 KB in a few hundred base64 lines. A node
without gzip or base64 sends the plain output, which reads the same.
"""

from __future__ import annotations

import base64
import binascii
import zlib

# The first line of a packed output; plain output never starts with it.
MARK = "rdmaprov-packed: gzip base64"


def packed(command: str) -> str:
    """`command`, its standard output gzipped and in base64 where the node has both tools."""
    return (
        f"rdmaprov_packed() {{ {command}\n}}; "
        "if command -v gzip >/dev/null 2>&1 && command -v base64 >/dev/null 2>&1; "
        f"then echo '{MARK}'; rdmaprov_packed | gzip -c | base64; else rdmaprov_packed; fi"
    )


def unpacked(lines: list[str]) -> str:
    """The command's output as the node printed it, from the lines `packed(command)` sent.

    A stream cut short (the command stopped part way) gives what arrived whole; one that is not
    gzip in base64 at all is refused, naming what is wrong."""
    if not lines or lines[0].strip() != MARK:
        return "\n".join(lines)
    encoded = "".join(line.strip() for line in lines[1:])
    try:
        data = base64.b64decode(encoded[: len(encoded) - len(encoded) % 4], validate=True)
        return zlib.decompressobj(wbits=31).decompress(data).decode("utf-8", "replace")
    except (binascii.Error, zlib.error) as exc:
        raise ValueError(f"the node's packed output is damaged ({exc})") from exc
