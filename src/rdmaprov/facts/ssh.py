"""Facts about SSH on a node: the trust user's key pair and the host keys, in one round trip."""

from __future__ import annotations

import shlex

from pyinfra.api import FactBase

from rdmaprov.parsers.ssh import SshIdentity, parse_ssh_identity


class SshIdentityFact(FactBase[SshIdentity]):
    """The node's hostname, the user's home, its `id_<type>.pub` and `/etc/ssh/ssh_host_*_key.pub`."""

    def command(self, user: str, key_type: str) -> str:
        return (
            f'home=$(getent passwd {shlex.quote(user)} | cut -d: -f6); echo "hostname $(hostname)"; echo "home $home"; '
            f'f="$home/.ssh/id_{key_type}.pub"; if [ -n "$home" ] && [ -r "$f" ]; then echo "user $(cat "$f")"; fi; '
            'for f in /etc/ssh/ssh_host_*_key.pub; do [ -r "$f" ] && echo "host $(cat "$f")"; done; true'
        )

    def process(self, output: list[str]) -> SshIdentity:
        return parse_ssh_identity("\n".join(output))

    @staticmethod
    def default() -> SshIdentity:
        return SshIdentity()
