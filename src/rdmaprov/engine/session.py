"""Connected hosts for reads and commands outside the deploys: facts, verify, gates.

The same pyinfra connections (pinned host keys, sudo) as apply; every host is read at once.
"""

from __future__ import annotations

import shlex
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import gevent
from pyinfra.api import FactBase, StringCommand
from pyinfra.api.connect import disconnect_all
from pyinfra.api.facts import get_fact
from pyinfra.api.state import StateStage
from pyinfra.context import ctx_host, ctx_state

from rdmaprov.engine.pyinfra_state import build_state, connect, privileges
from rdmaprov.inventory.model import Inventory

# Printed to stderr when coreutils' timeout stopped the command: 124 when TERM ended it, 137 when
# KILL was needed (told from a KILL by anything else, e.g. the OOM killer, by the time it ran).
DEADLINE_MARK = "rdmaprov: stopped at its deadline of"


@dataclass(frozen=True)
class CommandResult:
    ok: bool
    stdout: str
    stderr: str

    @property
    def timed_out(self) -> bool:
        return DEADLINE_MARK in self.stderr


class Session:
    """`with Session(inventory, hosts) as s:` — s.unreachable names who could not be reached."""

    def __init__(self, inventory: Inventory, hosts: list[str]) -> None:
        self.inventory = inventory
        self.state = build_state(inventory, hosts)
        self.unreachable: dict[str, str] = {}

    def __enter__(self) -> Session:
        self.unreachable = connect(self.state)
        self.state.set_stage(StateStage.Prepare)
        return self

    def __exit__(self, *exc: object) -> None:
        try:
            self.state.set_stage(StateStage.Disconnect)
            disconnect_all(self.state)
        except Exception:
            pass  # a connection already gone changes no result

    @property
    def connected(self) -> list[str]:
        return [h.name for h in self.state.inventory if h in self.state.active_hosts]

    def _host(self, name: str):
        return self.state.inventory.get_host(name)

    def each(self, names: list[str], work: Callable[[str], Any]) -> dict[str, Any]:
        """work(name) for every name at once; an exception is that host's result. The results come
        in the order of `names`, not of who answered first, so what is built from them (a verdict's
        words, the JSON) is the same on every run."""
        results: dict[str, Any] = {}

        def one(name: str) -> None:
            try:
                results[name] = work(name)
            except Exception as exc:  # reported per host by the caller
                results[name] = exc

        with ctx_state.use(self.state):
            gevent.joinall([gevent.spawn(one, name) for name in names])
        return {name: results[name] for name in names}

    def fact(self, cls: type[FactBase], arguments: Callable[[str], dict[str, Any]] | None = None) -> dict[str, Any]:
        """The fact from every connected host, with `arguments(name)` as that host's fact
        arguments: {name: value or the exception that stopped it}."""

        def read(name: str) -> Any:
            host = self._host(name)
            with ctx_host.use(host):
                kwargs = arguments(name) if arguments else {}
                return get_fact(self.state, host, cls, kwargs=kwargs, apply_failed_hosts=False)

        return self.each(self.connected, read)

    def run(self, name: str, command: str, timeout_s: int | None = None) -> CommandResult:
        """Run a shell command on one host; `timeout_s` stops it there (coreutils timeout), and
        the result says so."""
        host = self._host(name)
        if timeout_s:
            seconds = int(timeout_s)
            command = (
                f"start=$(date +%s); timeout -k 5 {seconds} sh -c {shlex.quote(command)}; rc=$?; "
                f"if [ $rc = 124 ] || {{ [ $rc = 137 ] && [ $(( $(date +%s) - start )) -ge {seconds} ]; }}; "
                f"then echo '{DEADLINE_MARK} {seconds} s' >&2; fi; exit $rc"
            )
        with ctx_state.use(self.state), ctx_host.use(host):
            ok, output = host.run_shell_command(StringCommand(command), _success_exit_codes=[0], **privileges(host))
        return CommandResult(
            ok,
            "\n".join(output.stdout_lines),
            "\n".join(line.line for line in output.combined_lines if line.buffer_name == "stderr"),
        )
