"""What a gate result is about, as values: the nodes, and the HCA of each end where one rail was
tested. The gates, the diagnosis and the baselines ask a result which nodes it names; the text
("node1 -> node2", "node1:mlx5_0 -> node2:mlx5_0", "node1,node2") is only how it is shown and
stored, and is read back (`Subject.parse`) only from saved JSON."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Kind = Literal["node", "pair", "job", "incast"]


@dataclass(frozen=True)
class End:
    """A node, and the HCA tested on it when the test was one rail's."""

    host: str
    hca: str | None = None

    def __str__(self) -> str:
        return f"{self.host}:{self.hca}" if self.hca else self.host


@dataclass(frozen=True)
class Subject:
    """One node (the node gate); a pair, server first (a perftest between two nodes, or two of
    their HCAs); a job's nodes (all_reduce, the workload); or an incast, its senders then the
    node they all send to. `rail` numbers a rail that only one end of a pair has, so that it was
    not tested."""

    kind: Kind
    ends: tuple[End, ...]
    rail: int | None = None

    @classmethod
    def node(cls, host: str) -> Subject:
        return cls("node", (End(host),))

    @classmethod
    def pair(cls, server: str | End, client: str | End, rail: int | None = None) -> Subject:
        ends = tuple(end if isinstance(end, End) else End(end) for end in (server, client))
        return cls("pair", ends, rail)

    @classmethod
    def job(cls, hosts: list[str]) -> Subject:
        return cls("job", tuple(End(host) for host in hosts))

    @classmethod
    def incast(cls, senders: list[str], receiver: str) -> Subject:
        return cls("incast", tuple(End(host) for host in (*senders, receiver)))

    @property
    def hosts(self) -> list[str]:
        return [end.host for end in self.ends]

    def __str__(self) -> str:
        if self.kind == "job":
            return ",".join(self.hosts)
        if self.kind == "incast":
            return f"{','.join(self.hosts[:-1])} -> {self.hosts[-1]}"
        text = " -> ".join(str(end) for end in self.ends)
        return text if self.rail is None else f"{text} rail {self.rail}"

    @classmethod
    def parse(cls, text: str) -> Subject:
        """The subject a result saved as JSON shows (host names hold no spaces, commas or
        colons): "a", "a -> b", "a:mlx5_0 -> b:mlx5_0", "a -> b rail 3", "a,b,c", "b,c -> a"."""
        shown, _, rail = text.partition(" rail ")
        senders, arrow, receiver = shown.partition(" -> ")
        if arrow and "," in senders:
            return cls.incast([host.strip() for host in senders.split(",")], receiver.strip())
        if "," in shown or not shown:  # a job (one of one host reads back as that node)
            return cls.job([host.strip() for host in shown.split(",") if host.strip()])
        ends = tuple(End(*part.strip().split(":", 1)) for part in shown.split(" -> "))
        if len(ends) == 1:
            return cls("node", ends)
        return cls("pair", ends, int(rail) if rail.isdigit() else None)
