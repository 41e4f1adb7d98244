"""Keep each SSH connection honest about the host behind it.

Why: paramiko waits as long as TCP does on a peer that went silent (a cut link: about 15 minutes),
and pyinfra runs each operation on all hosts before the next, so one silent host stalls every
host. pyinfra also keeps only a failed command's output and logs its cause (timeout, dropped
connection) to its logger, so the reason users saw was whatever stderr said first. Here every
connection gets keepalives with a TCP deadline (a host silent for `ssh.connect_timeout` is
lost), every command gets a deadline (`ssh.command_timeout`), the way each failed command ended is kept
for the run's results, and the notes node-side scripts print while they wait are shown live.
"""

from __future__ import annotations

import hmac
import socket
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass

import gevent
import paramiko.util
from paramiko import SSHException
from pyinfra.api import State, StringCommand

from rdmaprov.engine.run_context import context_of
from rdmaprov.inventory.model import SSHSettings
from rdmaprov.parsers.failure import failure_reason
from rdmaprov.quoting import NOTE_PREFIX


@dataclass(frozen=True)
class CommandEnd:
    """How a failed command ended, as far as the connection tells."""

    exit_status: int | None  # None: no status came back
    cause: str = ""  # set when the connection or a deadline ended it, not the command itself

    @property
    def lost(self) -> bool:
        return self.cause.startswith("connection lost")

    @property
    def interrupted(self) -> bool:
        return self.cause.startswith("interrupted")


def explain(end: CommandEnd | None, output: list[str]) -> str:
    """The one-line reason a failed command shows: how it ended when the connection or a deadline
    ended it, else what its output says (parsers/failure.py) and its exit status; "" if nothing."""
    if end is not None and end.lost:
        return end.cause
    said = failure_reason(output)
    if end is not None and end.cause:
        return end.cause + (f"; its last words: {said}" if said else "")
    status = f"exit status {end.exit_status}" if end is not None and end.exit_status is not None else ""
    if said and status:
        return f"{said} ({status})"
    return said or status  # "" when nothing is known


def keepalive_interval(settings: SSHSettings) -> int:
    """Seconds between keepalives: a quarter of the silence after which a host counts as lost."""
    return max(1, settings.connect_timeout // 4)


def _keep_alive(transport, settings: SSHSettings) -> None:
    """Keepalives make traffic that must be acknowledged; TCP_USER_TIMEOUT fails the socket when
    nothing is acknowledged for connect_timeout seconds, which ends the transport and its
    commands instead of waiting on TCP's retransmissions."""
    interval = keepalive_interval(settings)
    transport.set_keepalive(interval)
    sock = transport.sock
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
    if hasattr(socket, "TCP_USER_TIMEOUT"):  # Linux; elsewhere only the keepalives
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_USER_TIMEOUT, settings.connect_timeout * 1000)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE, interval)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPINTVL, interval)


# A host that answers on its old boot must keep answering this long before it counts as not
# rebooting: a shutdown closes SSH sessions some seconds before sshd itself stops.
STEADY_S = 15


def _uptime_now(host) -> float | None:
    """Seconds since the host booted, over a fresh connection; None if it does not answer."""
    try:
        host.connector.connect()
        ok, output = host.connector.run_shell_command(StringCommand("cat /proc/uptime"))
    except Exception:  # ConnectError, or paramiko's own on a half-up or going-down host
        return None
    finally:
        client = getattr(host.connector, "client", None)
        if client is not None:
            client.close()  # pyinfra's disconnect() leaves the client open
    return parse_uptime(output.stdout) if ok else None


def answered_again(host, settings: SSHSettings, run_started: float) -> tuple[bool, str]:
    """After a host's connection was lost: whether it answers again (tried for connect_timeout
    seconds), and what that tells: it rebooted (booted after the run started, `run_started`
    being time.monotonic() then) or, once it has answered on its old boot for STEADY_S, not."""
    deadline = time.monotonic() + settings.connect_timeout
    steady_since: float | None = None
    while True:
        uptime = _uptime_now(host)
        now = time.monotonic()
        if uptime is not None and uptime < now - run_started:
            return True, f"it answered again, up {uptime:.0f} s: it rebooted during the run"
        if uptime is None:
            steady_since = None
            if now >= deadline:
                return False, f"it has not answered since (tried for {settings.connect_timeout} s)"
        else:
            steady_since = steady_since if steady_since is not None else now
            if now - steady_since >= STEADY_S:
                return True, "it answered again without a reboot (the network or sshd dropped the connection)"
        gevent.sleep(3 if uptime is not None else 1)


def parse_uptime(text: str) -> float | None:
    """Seconds since boot from /proc/uptime ("354.12 700.3"); None if unreadable."""
    try:
        return float(text.split()[0])
    except (IndexError, ValueError):
        return None


def transport_active(host) -> bool:
    """Whether the host's SSH connection is still up."""
    client = getattr(host.connector, "client", None)
    transport = client.get_transport() if client is not None else None
    return bool(transport and transport.is_active())


def relay_notes(lines: Iterable, notify: Callable[[str], None]) -> Iterator:
    """A command's stderr, line by line as pyinfra reads it, passing on each rdmaprov note as it
    arrives (a wait for a lock would otherwise show only once the command ends)."""
    for line in lines:
        text = line if isinstance(line, str) else line.decode("utf-8", "replace")
        if text.startswith(NOTE_PREFIX):
            notify(text[len(NOTE_PREFIX) :].rstrip())
        yield line


def compare_macs_in_c() -> None:
    """Have paramiko check each packet's MAC with hmac.compare_digest. Its own check is a Python
    loop over the MAC's bytes (util.constant_time_bytes_eq), run for every packet received: the
    cost of verify per host that grew most from 32 to 256 DGX-shaped twins, 13 to 37 ms of 383
    (bench/RESULTS.md, 2026-12-02), as loaded nodes send their output in more, smaller packets.
    compare_digest is the same constant-time comparison, in C."""
    if callable(getattr(paramiko.util, "constant_time_bytes_eq", None)):
        paramiko.util.constant_time_bytes_eq = hmac.compare_digest  # type: ignore[assignment]  # bytes only here


def watch(state: State, host, settings: SSHSettings) -> None:
    """Harden a connected host's SSH connection and record every command on it: the round trip
    count (benchmarks report it) and, for a command that fails, how it ended."""
    context = context_of(state)
    connector = host.connector
    client = getattr(connector, "client", None)
    channels: list = []  # the channel of the command running now (its exit status, to close it)
    if client is not None:
        _keep_alive(client.get_transport(), settings)
        exec_command = client.exec_command

        def remembered(*args, **kwargs):
            stdin, stdout, stderr = exec_command(*args, **kwargs)
            channels[:] = [stdout.channel]
            return stdin, stdout, relay_notes(stderr, lambda note: context.notify(f"{host.name}: {note}"))

        client.exec_command = remembered

    def ended(kwargs: dict, exc: BaseException | None) -> CommandEnd:
        channel = channels[0] if channels else None
        status = channel.exit_status if channel is not None and channel.exit_status != -1 else None
        if isinstance(exc, TimeoutError):
            if channel is not None:
                channel.close()  # ends the command on the node (its pipes close) instead of leaving it
            return CommandEnd(status, f"timed out after {kwargs.get('_timeout')} s (ssh.command_timeout)")
        if exc is None and status is None:
            # A host going down (a reboot) closes the command's channel a moment before the
            # connection itself: give the connection 2 s to show it is gone.
            for _ in range(20):
                if not transport_active(host):
                    break
                gevent.sleep(0.1)
        if exc is not None or not transport_active(host):
            detail = f": {exc}" if exc is not None and str(exc) else ""
            return CommandEnd(status, f"connection lost{detail}")
        if status is None:
            return CommandEnd(None, "ended without an exit status (killed by a signal)")
        return CommandEnd(status)

    def record(end: CommandEnd) -> None:
        """Keep the host's last failed command's end; an interruption's stays (it caused the rest)."""
        previous = context.command_ends.get(host.name)
        if previous is None or not previous.interrupted:
            context.command_ends[host.name] = end

    def run_shell_command(*args, _original=connector.run_shell_command, **kwargs):
        context.round_trips[host.name] += 1
        channels.clear()
        context.busy.add(host.name)
        try:
            ok, output = _original(*args, **kwargs)
        except (TimeoutError, OSError, SSHException, EOFError) as exc:
            record(ended(kwargs, exc))
            raise
        finally:
            context.busy.discard(host.name)
        if not ok:
            record(ended(kwargs, None))
        return ok, output

    connector.run_shell_command = run_shell_command
    for method in ("put_file", "get_file"):
        original = getattr(connector, method)

        def counted(*args, _original=original, **kwargs):
            context.round_trips[host.name] += 1
            return _original(*args, **kwargs)

        setattr(connector, method, counted)
