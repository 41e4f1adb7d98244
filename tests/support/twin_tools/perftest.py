"""The twin's ib_write_bw (tests/support/twin.py): perftest's two sides, each answering with the
captured 25 Gb/s run (tests/fixtures/seed/ib_write_bw_{client,server}_roce_25g.txt), its device,
link type and figures made this twin's.

The two sides meet over TCP on the `-p` port, as perftest's own out-of-band exchange does, so that
the gate's wait for the server to listen, its client dialling the server's address and its
timeouts all run for real. The bandwidth is the capture's share of its line rate (23.14 of 25
Gb/s) of the slower of the two ports' rates: 400 Gb/s (NDR), or what /etc/twin/rail-gbps gives
a device (the `slow_rail` fault). Run with python3 from a bash wrapper that names the process
ib_write_bw, as the gate's stray-server kill expects.
"""

from __future__ import annotations

import re
import socket
import sys
import time
from pathlib import Path

CAPTURED_GBPS, CAPTURED_LINE_GBPS = 23.14, 25.0
LINE_GBPS = 400.0
_VALUED = {"-d", "-i", "-x", "-p", "-s", "-D", "-n", "-q", "-m"}


def options(argv: list[str]) -> tuple[dict[str, str], str | None]:
    """perftest's options as given, and the server address when this is the client."""
    values: dict[str, str] = {}
    address = None
    words = iter(argv)
    for word in words:
        if word in _VALUED:
            values[word] = next(words, "")
        elif word.startswith("-"):
            values[word.split("=")[0]] = word.partition("=")[2]
        else:
            address = word
    return values, address


def port_gbps(device: str) -> float:
    rates = Path("/etc/twin/rail-gbps")
    for line in rates.read_text().splitlines() if rates.exists() else []:
        name, _, gbps = line.partition(" ")
        if name == device:
            return float(gbps)
    return LINE_GBPS


def output(side: str, device: str, size: int, seconds: float, gbps: float) -> str:
    """The captured side's output with this run's device, link type and figures."""
    text = Path(f"/etc/twin/ib_write_bw_{side}.txt").read_text()
    text = re.sub(r"Device         : \S+", f"Device         : {device}", text)
    text = text.replace("Link type       : Ethernet", "Link type       : IB")
    iterations = int(gbps * 1e9 / 8 * seconds / size)
    row = f" {size:<10} {iterations:<16} 0.00{gbps:>19.2f}{gbps * 1e9 / 8 / size / 1e6:>20.6f}"
    return re.sub(r"(?m)^ 65536 .*$", row, text)


def main() -> int:
    if "--help" in sys.argv[1:] or "-h" in sys.argv[1:]:
        return 0  # no help text was captured: read as a perftest built without CUDA
    values, address = options(sys.argv[1:])
    device, port = values.get("-d", "mlx5_0"), int(values.get("-p", "18515"))
    size, seconds = int(values.get("-s", "65536")), float(values.get("-D", "5"))
    mine = port_gbps(device)
    if address is None:
        with socket.create_server(("0.0.0.0", port)) as server:
            server.settimeout(120)  # no client: end as perftest's own server would, never hang a test
            peer, _ = server.accept()
            with peer:
                peer.sendall(f"{mine}\n".encode())
                theirs = float(peer.makefile().readline())
    else:
        deadline = time.monotonic() + 10
        while True:
            try:
                peer = socket.create_connection((address, port), timeout=5)
                break
            except OSError:
                if time.monotonic() > deadline:
                    print(f" Couldn't connect to {address}:{port}", file=sys.stderr)
                    return 1
                time.sleep(0.1)
        with peer:
            theirs = float(peer.makefile().readline())
            peer.sendall(f"{mine}\n".encode())
    time.sleep(seconds)
    gbps = CAPTURED_GBPS / CAPTURED_LINE_GBPS * min(mine, theirs)
    print(output("client" if address else "server", device, size, seconds, gbps), end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
