"""SSH identities of a node: its user key pair's public half and its host keys."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

# What a public key line starts with: its type and base64 body (options such as command="…" are
# not a key: a node that offers them is not trusted with them).
_KEY_TYPE = re.compile(r"(ssh-[a-z0-9-]+|ecdsa-sha2-[a-z0-9-]+|sk-[a-z0-9@.-]+)\Z")
_KEY_BODY = re.compile(r"[A-Za-z0-9+/]+={0,3}\Z")
# A name in a known_hosts line: no whitespace, no comma (the separator), no pattern characters.
_HOST_NAME = re.compile(r"[A-Za-z0-9_.:%-]+\Z")


@dataclass(frozen=True)
class SshIdentity:
    """What other nodes need to trust this node (user key) and to recognise it (host keys)."""

    hostname: str = ""
    home: str = ""
    user_key: str | None = None
    host_keys: tuple[str, ...] = field(default_factory=tuple)


def _key_part(line: str) -> str | None:
    """'type base64 [comment]' → 'type base64' (comments differ between nodes and are dropped)."""
    parts = line.split()
    if len(parts) < 2 or not _KEY_TYPE.match(parts[0]) or not _KEY_BODY.match(parts[1]):
        return None
    return f"{parts[0]} {parts[1]}"


def parse_ssh_identity(text: str) -> SshIdentity:
    """Lines tagged by the fact command: `hostname H`, `home D`, `user KEY`, `host KEY`."""
    hostname = home = ""
    user_key: str | None = None
    host_keys: list[str] = []
    for line in text.splitlines():
        tag, _, value = line.strip().partition(" ")
        if tag == "hostname":
            hostname = value.strip()
        elif tag == "home":
            home = value.strip()
        elif tag == "user":
            user_key = _key_part(value)
        elif tag == "host":
            key = _key_part(value)
            if key and key not in host_keys:
                host_keys.append(key)
    return SshIdentity(hostname, home, user_key, tuple(sorted(host_keys)))


def authorized_key_line(name: str, key: str) -> str:
    """The authorized_keys line trusting node `name`: its key, tagged with its inventory name."""
    return f"{key} rdmaprov:{name}"


def known_hosts_line(names: list[str], key: str) -> str:
    """`name,alias,… type base64`; a name that could change the line's meaning is left out."""
    return f"{','.join(n for n in names if _HOST_NAME.match(n))} {key}"


def entry_owner(line: str) -> str | None:
    """The inventory name a managed line belongs to (authorized_keys tag or first known_hosts name)."""
    parts = line.split()
    if not parts:
        return None
    if parts[-1].startswith("rdmaprov:"):
        return parts[-1].split(":", 1)[1]
    return parts[0].split(",", 1)[0]
