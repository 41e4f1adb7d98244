"""System accounts: present or absent as declared."""

from __future__ import annotations

from pyinfra import host
from pyinfra.api import StringCommand

from rdmaprov.engine.desired import operation
from rdmaprov.engine.factcache import fact
from rdmaprov.facts.system import UserExists
from rdmaprov.quoting import sh


@operation()
def system_user(user: str, present: bool):
    """A system account with no login and no home, for a service to run as."""
    exists = fact(UserExists, user=user)
    if present and not exists:
        yield StringCommand(
            "useradd --system --user-group --no-create-home --home-dir /nonexistent --shell /usr/sbin/nologin "
            f"{sh(user)}"
        )
    elif not present and exists:
        yield StringCommand(f"userdel {sh(user)}")
    else:
        host.noop(f"user {user} {'exists' if exists else 'absent'}")
