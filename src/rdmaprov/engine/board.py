"""What each host holds, as a run learns it: a node that received a build archive says so, and
the nodes waiting to receive it from that node go on (builds/fanout.py). Hosts of other shards
(engine/shards.py) learn it through the coordinator.
"""

from __future__ import annotations

from collections.abc import Callable

from gevent.event import Event


class Board:
    """`mark(item, host, holds)` once per host and item; `wait` for another host's mark."""

    def __init__(self) -> None:
        self.marks: dict[tuple[str, str], bool] = {}
        self.events: dict[tuple[str, str], Event] = {}
        # Set in a shard: tells the other shards (engine/shards.py).
        self.publish: Callable[[str, str, bool], None] | None = None

    def _event(self, item: str, host: str) -> Event:
        return self.events.setdefault((item, host), Event())

    def mark(self, item: str, host: str, holds: bool) -> None:
        """`host` now holds `item` (True), or will not this run (False)."""
        self.receive(item, host, holds)
        if self.publish is not None:
            self.publish(item, host, holds)

    def receive(self, item: str, host: str, holds: bool) -> None:
        self.marks[(item, host)] = holds
        self._event(item, host).set()

    def wait(self, item: str, host: str, timeout: float) -> bool | None:
        """Whether `host` holds `item`: True, False, or None when it did not say within `timeout` s."""
        if not self._event(item, host).wait(timeout):
            return None
        return self.marks[(item, host)]
