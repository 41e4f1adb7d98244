"""Ctrl-C while an apply changes nodes: stop starting work at once, let what runs end, report.

Why not Python's KeyboardInterrupt: under gevent it lands in whichever greenlet runs, the others
go on installing for minutes, and the run ends with a traceback and no word of where each host
stood. Here the first Ctrl-C takes every host out of pyinfra's active set, so no host starts
another operation; the commands already running may finish for GRACE_S seconds, after which (or
at a second Ctrl-C) their connections are closed, which ends them on the nodes. The runner then
reports each host as done, or interrupted before the operation it had not finished.
"""

from __future__ import annotations

import signal
from collections.abc import Callable
from typing import Any

import gevent
from pyinfra.api import State

from rdmaprov.engine.connection import CommandEnd
from rdmaprov.engine.run_context import context_of

GRACE_S = 60


def stop_watching(watcher: Any) -> None:
    """Cancel a gevent SIGINT watcher and give Ctrl-C back to Python: a cancelled watcher leaves
    the signal at the system default, so a later Ctrl-C (during verify, in a shard waiting for
    the others) killed the process on the spot, with no report and nothing cleaned up."""
    watcher.cancel()
    signal.signal(signal.SIGINT, signal.default_int_handler)


class Interrupt:
    """`with Interrupt(state, say) as interrupt:` around the execution of operations."""

    def __init__(self, state: State, say: Callable[[str], None], grace_s: float = GRACE_S) -> None:
        self.state = state
        self.say = say
        self.grace_s = grace_s
        self.requested = False
        self.running: set = set()  # the hosts that were active when Ctrl-C came
        self._watcher: Any = None  # gevent's signal watcher while inside the `with`
        self._timer: Any = None  # the greenlet that ends the grace

    def __enter__(self) -> Interrupt:
        self._watcher = gevent.signal_handler(signal.SIGINT, self._on_sigint)
        return self

    def __exit__(self, *exc: object) -> None:
        if self._watcher is not None:
            stop_watching(self._watcher)
        if self._timer is not None:
            self._timer.kill(block=False)

    def _on_sigint(self) -> None:
        if not self.requested:
            self.requested = True
            self.running = set(self.state.active_hosts)
            self.state.active_hosts.clear()  # pyinfra starts the next operation on no host
            self.say(
                f"interrupted: no new operations start; running commands may finish for {self.grace_s:.0f} s "
                "(Ctrl-C again to stop them now)"
            )
            self._timer = gevent.spawn_later(self.grace_s, self._stop, f"stopped after {self.grace_s:.0f} s")
        else:
            self._stop("stopped by a second Ctrl-C")

    def _stop(self, how: str) -> None:
        """Close the connections of hosts still running a command: the command ends on the node."""
        context = context_of(self.state)
        for host in self.running:
            if host.name in context.busy:
                context.command_ends[host.name] = CommandEnd(None, f"interrupted: {how}")
                host.connector.client.close()
