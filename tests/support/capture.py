"""What travels on a test's own bridge: RoCE v2 packets (UDP 4791) and the ToS byte of their IP
header, read with a packet socket (no tcpdump needed). The bridge is put in promiscuous mode
through the socket's membership, so frames it forwards between VMs are seen too; the membership
ends with the socket, leaving the bridge as it was."""

from __future__ import annotations

import socket
import struct
import threading
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager

ETH_P_IP = 0x0800
SOL_PACKET = 263
PACKET_ADD_MEMBERSHIP = 1
PACKET_MR_PROMISC = 1
ROCE_V2_PORT = 4791


def roce_tos(frame: bytes) -> int | None:
    """The IP ToS of an Ethernet frame carrying RoCE v2 (IPv4, UDP to port 4791), else None."""
    if len(frame) < 14 + 20 + 8 or struct.unpack("!H", frame[12:14])[0] != ETH_P_IP:
        return None
    ip = frame[14:]
    header = (ip[0] & 0x0F) * 4
    if ip[9] != socket.IPPROTO_UDP or len(ip) < header + 8:
        return None
    return ip[1] if struct.unpack("!H", ip[header + 2 : header + 4])[0] == ROCE_V2_PORT else None


@contextmanager
def roce_classes(interface: str) -> Iterator[Counter[int]]:
    """Count the ToS of every RoCE v2 packet on `interface` while the block runs."""
    found: Counter[int] = Counter()
    sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_IP))
    sock.bind((interface, 0))
    index = socket.if_nametoindex(interface)
    sock.setsockopt(SOL_PACKET, PACKET_ADD_MEMBERSHIP, struct.pack("iHH8s", index, PACKET_MR_PROMISC, 0, b""))
    sock.settimeout(0.2)
    stop = threading.Event()

    def read() -> None:
        while not stop.is_set():
            try:
                tos = roce_tos(sock.recv(2048))
            except TimeoutError:
                continue
            if tos is not None:
                found[tos] += 1

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        yield found
    finally:
        time.sleep(0.5)  # the last packets in flight
        stop.set()
        reader.join(timeout=5)
        sock.close()
