"""`vagrant ssh-config` and what the inventory import reads inside each VM."""

from __future__ import annotations

import shlex
from dataclasses import dataclass


@dataclass(frozen=True)
class VagrantSsh:
    """How Vagrant reaches one machine."""

    name: str
    hostname: str
    user: str
    port: int
    identity: str


def parse_ssh_config(text: str) -> list[VagrantSsh]:
    """Each `Host NAME` block's HostName, User, Port and IdentityFile (the first one, the machine's
    own key; quoted when its path has spaces). Options Vagrant adds for itself
    (StrictHostKeyChecking no, UserKnownHostsFile /dev/null) are not carried over."""
    blocks: list[dict[str, str]] = []
    for number, line in enumerate(text.splitlines(), 1):
        try:
            words = shlex.split(line.strip(), comments=True) if line.strip() else []
        except ValueError as exc:
            raise ValueError(f"line {number}: {exc}: {line.strip()}") from None
        if len(words) < 2:
            continue
        key, value = words[0].lower(), words[1]
        if key == "host":
            blocks.append({"host": value})
        elif blocks and key not in blocks[-1]:
            blocks[-1][key] = value
    return [
        VagrantSsh(
            b["host"],
            b.get("hostname", b["host"]),
            b.get("user", "vagrant"),
            int(b.get("port", "22")),
            b.get("identityfile", ""),
        )
        for b in blocks
    ]


def parse_host_keys(text: str) -> list[tuple[str, str]]:
    """(type, base64) of each `ssh-… AAAA… comment` line of `cat /etc/ssh/ssh_host_*_key.pub`."""
    keys = []
    for line in text.splitlines():
        words = line.split()
        if len(words) >= 2 and (words[0].startswith(("ssh-", "ecdsa-", "sk-"))) and words[1].startswith("AAAA"):
            keys.append((words[0], words[1]))
    return keys


def parse_ipv4_addresses(text: str) -> dict[str, list[str]]:
    """{interface: [address/prefix, …]} from `ip -4 -o addr show`."""
    found: dict[str, list[str]] = {}
    for line in text.splitlines():
        words = line.split()
        if len(words) >= 4 and words[2] == "inet":
            found.setdefault(words[1], []).append(words[3])
    return found
