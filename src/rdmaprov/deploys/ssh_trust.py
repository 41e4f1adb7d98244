"""Passwordless SSH between the nodes (mpirun needs it), with every host key pinned.

No StrictHostKeyChecking=no: every node knows every other node's real host keys by inventory
name, address and hostname. A node removed from the inventory is dropped from both blocks on
the next apply, which revokes its access.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType

from pyinfra.api import deploy

from rdmaprov.engine.context import NodeContext
from rdmaprov.engine.run_context import once_per_run
from rdmaprov.inventory.model import Inventory
from rdmaprov.operations.files import managed_block
from rdmaprov.operations.ssh import key_pair, known_hosts, trusted_keys
from rdmaprov.quoting import config_word


def hosts_file_lines(cluster: Sequence[str], addresses: Mapping[str, str]) -> list[str]:
    """/etc/hosts lines `ADDRESS NAME` for the nodes the inventory reaches by IP address (a DNS
    name is no hosts-file address: such nodes already resolve by DNS)."""
    lines = []
    for name in cluster:
        try:
            address = str(ipaddress.ip_address(addresses[name]))
        except ValueError:
            continue
        lines.append(f"{config_word(address, 'address')} {config_word(name, 'host name')}")
    return lines


@dataclass(frozen=True)
class _Cluster:
    """What every node's trust is made of, the same for each: worked out once per run (per node,
    each is a pass over every host, n² for the cluster)."""

    names: tuple[str, ...]
    addresses: Mapping[str, str]
    hosts_lines: tuple[str, ...]


def _cluster(inventory: Inventory) -> _Cluster:
    """The cluster's trust, once per run; read-only, so each operation's fingerprint encodes it
    once for all nodes (engine/desired.fingerprint)."""

    def work_out() -> _Cluster:
        names = inventory.host_names() if inventory.ssh_trust.enabled else []
        addresses = {name: spec.address for name, spec in inventory.hosts.items()}
        lines = hosts_file_lines(names, addresses) if inventory.ssh_trust.hosts_file else []
        return _Cluster(tuple(names), MappingProxyType(addresses), tuple(lines))

    return once_per_run("ssh_trust", inventory, work_out)


@deploy("ssh_trust")
def ssh_trust(ctx: NodeContext) -> None:
    trust = ctx.inventory.ssh_trust
    enabled, user, key_type = trust.enabled, trust.user, trust.key_type
    cluster = _cluster(ctx.inventory)
    marker = f"rdmaprov cluster {ctx.inventory.name}"
    if enabled:
        key_pair(name="SSH key pair", user=user, key_type=key_type)
    trusted_keys(name="SSH trust: authorized_keys", user=user, key_type=key_type, cluster=cluster.names, marker=marker)
    known_hosts(
        name="SSH trust: known hosts",
        user=user,
        key_type=key_type,
        cluster=cluster.names,
        addresses=cluster.addresses,
        marker=marker,
    )
    managed_block(name="node names in /etc/hosts", path="/etc/hosts", marker=marker, lines=cluster.hosts_lines)
