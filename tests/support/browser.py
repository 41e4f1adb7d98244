"""Debian's chromium, headless, on a page: its screenshot, its DOM and what its console said, as
the readiness report's tests look at a page the way a person's browser shows it."""

from __future__ import annotations

import shutil
import struct
import subprocess
import zlib
from pathlib import Path

CHROMIUM = shutil.which("chromium")
MISSING = "chromium is not installed: tools/setup.sh installs it (apt-get install chromium)"
WINDOW = (1400, 2000)


def chromium(page: Path, profile: Path, *action: str) -> subprocess.CompletedProcess:
    """Chromium headless on `page`, with the page's console written to stderr (one
    `INFO:CONSOLE:<line>] "<message>", source: …` line per message, errors included)."""
    assert CHROMIUM is not None
    command = [
        CHROMIUM,
        "--headless",
        "--disable-gpu",
        "--no-sandbox",
        "--disable-dev-shm-usage",  # containers' /dev/shm is small
        f"--user-data-dir={profile}",
        "--enable-logging=stderr",
        "--v=0",
        f"--window-size={WINDOW[0]},{WINDOW[1]}",
        *action,
        page.as_uri(),
    ]
    return subprocess.run(command, capture_output=True, text=True, timeout=120, check=True)


def console(stderr: str) -> list[str]:
    """The console's messages (and uncaught errors) among chromium's own log lines."""
    return [line for line in stderr.splitlines() if ":CONSOLE" in line or "Uncaught" in line]


def png_pixels(data: bytes) -> tuple[int, int, bytes]:
    """(width, height, the image data inflated) of a PNG: its IHDR and IDAT chunks, no library."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    position, size, idat = 8, (0, 0), b""
    while position < len(data):
        (length,) = struct.unpack(">I", data[position : position + 4])
        kind, body = data[position + 4 : position + 8], data[position + 8 : position + 8 + length]
        if kind == b"IHDR":
            size = struct.unpack(">II", body[:8])
        elif kind == b"IDAT":
            idat += body
        position += 12 + length
    return size[0], size[1], zlib.decompress(idat)
