"""SSH identities of a node: its user key pair's public half and its host keys."""

from __future__ import annotations

from dataclasses import dataclass, field


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
    return f"{parts[0]} {parts[1]}" if len(parts) >= 2 else None


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
    return f"{','.join(names)} {key}"


def entry_owner(line: str) -> str | None:
    """The inventory name a managed line belongs to (authorized_keys tag or first known_hosts name)."""
    parts = line.split()
    if not parts:
        return None
    if parts[-1].startswith("rdmaprov:"):
        return parts[-1].split(":", 1)[1]
    return parts[0].split(",", 1)[0]
