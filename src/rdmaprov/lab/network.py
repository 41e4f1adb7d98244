"""The lab's private network: one bridge with the host's address, and a tap per VM."""

from __future__ import annotations

import ipaddress
import subprocess

from rdmaprov.errors import UserError
from rdmaprov.lab.proc import run


def _ip(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["ip", *args], capture_output=True, text=True)


def link_exists(name: str) -> bool:
    return _ip("link", "show", "dev", name).returncode == 0


ANOTHER_SUBNET = "pick another with `rdmaprov lab up --subnet 10.78.0.0/24`"


def check_subnet_free(subnet: ipaddress.IPv4Network, bridge: str, fix: str = ANOTHER_SUBNET) -> None:
    """Refuse a subnet that any other interface or route on this machine already uses, saying `fix`."""
    for line in _ip("-o", "-4", "addr", "show").stdout.splitlines():
        parts = line.split()
        dev, cidr = parts[1], parts[3]
        if dev != bridge and ipaddress.ip_interface(cidr).network.overlaps(subnet):
            raise UserError(f"lab subnet {subnet} is already in use on {dev} ({cidr}): {fix}")
    for line in _ip("-4", "route", "show").stdout.splitlines():
        dest = line.split()[0]
        if dest == "default":
            continue
        try:
            network = ipaddress.ip_network(dest, strict=False)
        except ValueError:
            continue
        if network.overlaps(subnet) and f"dev {bridge}" not in line:
            raise UserError(f"lab subnet {subnet} overlaps the route `{line.strip()}`: {fix}")


def create_bridge(bridge: str, host_cidr: str) -> None:
    if link_exists(bridge):
        raise UserError(
            f"network interface {bridge} already exists and is not this lab's: run `rdmaprov lab down`, or pick "
            "another lab with --dir"
        )
    run(["ip", "link", "add", bridge, "type", "bridge"], "creating the lab bridge")
    run(["ip", "addr", "add", host_cidr, "dev", bridge], "addressing the lab bridge")
    run(["ip", "link", "set", bridge, "up"], "bringing the lab bridge up")


def create_tap(tap: str, bridge: str) -> None:
    run(["ip", "tuntap", "add", "dev", tap, "mode", "tap"], f"creating tap {tap}")
    run(["ip", "link", "set", tap, "master", bridge, "up"], f"attaching tap {tap}")


def delete_link(name: str) -> None:
    if link_exists(name):
        _ip("link", "del", name)
