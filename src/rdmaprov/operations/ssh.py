"""SSH trust between nodes: a key pair made on each node, every node trusting and knowing the others.

Private keys never leave the node that made them; only public keys and host keys travel, read as
facts from each node in the same run.
"""

from __future__ import annotations

import shlex
from collections.abc import Callable, Mapping, Sequence

from pyinfra import host
from pyinfra.api import StringCommand

from rdmaprov.engine.cluster import cluster_fact
from rdmaprov.engine.desired import operation
from rdmaprov.engine.factcache import fact
from rdmaprov.engine.notes import warn
from rdmaprov.engine.run_context import once_per_run
from rdmaprov.facts.files import BlockFile, ManagedFile
from rdmaprov.facts.ssh import SshIdentityFact
from rdmaprov.operations.files import block_commands
from rdmaprov.parsers.blocks import block_lines
from rdmaprov.parsers.ssh import SshIdentity, authorized_key_line, entry_owner, known_hosts_line

KNOWN_HOSTS = "/etc/ssh/ssh_known_hosts"


@operation()
def key_pair(user: str, key_type: str):
    """Generate the user's key pair on the node when it has none (an existing one is kept)."""
    identity = fact(SshIdentityFact, user=user, key_type=key_type)
    if not identity.home:
        raise ValueError(f"user {user} does not exist on {host.name}; create it or fix cluster.ssh_trust.user")
    if identity.user_key:
        host.noop(f"{user} has an {key_type} key")
        return
    ssh_dir = shlex.quote(f"{identity.home}/.ssh")
    path = shlex.quote(f"{identity.home}/.ssh/id_{key_type}")
    owner = shlex.quote(user)
    yield StringCommand(
        f"install -d -m 700 -o {owner} -g $(id -g {owner}) {ssh_dir} && "
        f"ssh-keygen -q -t {key_type} -N '' -C rdmaprov@{shlex.quote(host.name)} -f {path} && chown {owner}: {path} "
        f"{path}.pub"
    )


def wanted_lines(cluster: Sequence[str], identities: dict[str, SshIdentity], current: list[str], render) -> list[str]:
    """Managed lines for every inventory host: from this run's facts, else kept from the file.

    A host that could not be read this run (down, or outside --limit) keeps the lines it has; a
    host no longer in the inventory loses them (that is how trust is revoked).
    """
    kept: dict[str, list[str]] = {}
    for line in current:
        owner = entry_owner(line)
        if owner:
            kept.setdefault(owner, []).append(line)
    lines: list[str] = []
    for name in cluster:
        identity = identities.get(name)
        if identity is not None:
            lines.extend(render(name, identity))
        elif kept.get(name):
            lines.extend(kept[name])
            warn(f"SSH trust: {name} was not reached this run; kept its current entries")
    return lines


def block_for_every_node(
    kind: str,
    cluster: Sequence[str],
    identities: dict[str, SshIdentity],
    current: Callable[[], list[str]],
    render: Callable[[str, SshIdentity], list[str]],
    usable: Callable[[SshIdentity], bool] = lambda identity: True,
) -> list[str]:
    """wanted_lines, worked out once per run when every node's identity was read: the block is
    then the same on every node, and working it out on each node again cost n² lines (~60% of
    the CPU of a 2,000-node check, extrapolated). Otherwise the lines of nodes not read are kept
    from the node's own block, `current()`, read only then (whole: n² bytes again, while a node
    is down or outside --limit)."""

    def work_out() -> tuple[dict[str, SshIdentity], list[str] | None]:
        ready = {name: identity for name, identity in identities.items() if usable(identity)}
        complete = all(name in ready for name in cluster)
        return ready, wanted_lines(cluster, ready, [], render) if complete else None

    ready, lines = once_per_run(kind, identities, work_out)
    return lines if lines is not None else wanted_lines(cluster, ready, current(), render)


def _block_now(path: str, marker: str) -> Callable[[], list[str]]:
    """The lines of rdmaprov's block in `path` as the node has them, read when asked for."""
    return lambda: block_lines(fact(ManagedFile, path=path).text, marker)


@operation()
def trusted_keys(user: str, key_type: str, cluster: Sequence[str], marker: str):
    """Every cluster node's public key in the user's authorized_keys, inside rdmaprov's block."""
    identities = cluster_fact(SshIdentityFact, user=user, key_type=key_type)
    mine = identities.get(host.name) or fact(SshIdentityFact, user=user, key_type=key_type)
    if not mine.home:
        if cluster:
            raise ValueError(f"user {user} does not exist on {host.name}; create it or fix cluster.ssh_trust.user")
        host.noop(f"SSH trust is off and {user} does not exist")
        return
    path = f"{mine.home}/.ssh/authorized_keys"
    current = fact(BlockFile, path=path, marker=marker)
    lines = block_for_every_node(
        "authorized_keys",
        cluster,
        identities,
        _block_now(path, marker),
        lambda name, identity: [authorized_key_line(name, identity.user_key or "")],
        usable=lambda identity: bool(identity.user_key),
    )
    keyless = _keyless(cluster, identities)
    if keyless:
        warn(f"SSH trust: {', '.join(keyless)} has no {key_type} key yet (apply generates it)")
    group = "root" if user == "root" else user
    yield from block_commands(path, marker, lines, current, "600", user, group)


def _keyless(cluster: Sequence[str], identities: dict[str, SshIdentity]) -> list[str]:
    """The nodes read this run that have no key pair yet, worked out once per run."""
    return once_per_run(
        "keyless", identities, lambda: [n for n in cluster if n in identities and not identities[n].user_key]
    )


@operation()
def known_hosts(user: str, key_type: str, cluster: Sequence[str], addresses: Mapping[str, str], marker: str):
    """Every cluster node's real host keys, by inventory name, address and hostname, system-wide.

    `user`/`key_type` only select the shared cluster fact (the same read as trusted_keys).
    """
    identities = cluster_fact(SshIdentityFact, user=user, key_type=key_type)
    current = fact(BlockFile, path=KNOWN_HOSTS, marker=marker)

    def render(name: str, identity: SshIdentity) -> list[str]:
        names = [name]
        for alias in (addresses.get(name, ""), identity.hostname, identity.hostname.split(".")[0]):
            if alias and alias not in names:
                names.append(alias)
        return [known_hosts_line(names, key) for key in identity.host_keys]

    lines = block_for_every_node("known_hosts", cluster, identities, _block_now(KNOWN_HOSTS, marker), render)
    yield from block_commands(KNOWN_HOSTS, marker, lines, current, "644", "root", "root")


@operation()
def login_key(user: str, public_key: str, marker: str):
    """The operator's public key in the login user's authorized_keys (bootstrap by password:
    later runs log in with the key). Lines outside rdmaprov's block stay."""
    identity = fact(SshIdentityFact, user=user, key_type="ed25519")
    if not identity.home:
        raise ValueError(f"login user {user} does not exist on {host.name}; fix ssh.user in the inventory")
    path = f"{identity.home}/.ssh/authorized_keys"
    current = fact(BlockFile, path=path, marker=marker)
    group = "root" if user == "root" else user
    changes = list(block_commands(path, marker, [public_key.strip()], current, "600", user, group))
    if changes:
        yield StringCommand(
            f"install -d -m 700 -o {shlex.quote(user)} -g $(id -g {shlex.quote(user)}) "
            f"{shlex.quote(identity.home + '/.ssh')}"
        )
        yield from changes
