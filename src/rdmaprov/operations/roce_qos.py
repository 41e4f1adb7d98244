"""RoCE's QoS chain set now: the links of the chain that differ from roce_qos, and nothing else.

A link the node cannot take (a NIC without DCB, the declared tool missing) or that its driver does
not expose (ECN files outside MLNX_OFED) is a warning naming the NIC and the setting, and the rest
of the chain is still set; verify then fails the NIC's links (a RoCE fabric that only looks
lossless is worse than one that says it is not). Raising here would also end `check` at this
operation and hide the drift of every later deploy.
"""

from __future__ import annotations

from pyinfra import host
from pyinfra.api import StringCommand

from rdmaprov.engine.desired import operation
from rdmaprov.engine.factcache import fact
from rdmaprov.engine.notes import reboot_required, warn
from rdmaprov.facts.rdma import RoceQosState
from rdmaprov.inventory.roce_qos import QosLink, RoceQos, chain_links


def link_commands(links: list[QosLink]) -> list[str]:
    """The links' shell lines in order, each once (several ports share `modprobe rdma_cm`)."""
    return list(dict.fromkeys(line for link in links for line in link.commands))


@operation()
def chain_now(qos: RoceQos | None, fabric: str | None, named: list[str], storage: list[str]):
    """Set each link of the chain that differs; warn about those the node cannot take."""
    if qos is None:
        host.noop("no RoCE QoS declared")
        return
    # the same read as the deploy's where the firmware is not asked (one fact, read once)
    state = fact(RoceQosState, firmware=True) if qos.reads_firmware(fabric) else fact(RoceQosState)
    links = chain_links(qos, fabric, state, named, tuple(storage))
    for why in dict.fromkeys(link.unknown for link in links if link.unknown is not None):
        what = ", ".join(link.check.removeprefix("roce.") for link in links if link.unknown == why)
        warn(f"RoCE QoS {what} left as it is: {why}")
    todo = [link for link in links if not link.ok and link.unknown is None]
    if later := [link.subject for link in todo if link.next_boot]:
        reboot_required(f"RoCE QoS firmware settings take effect at the next boot: {', '.join(later)}")
    commands = link_commands(todo)
    if not commands:
        host.noop("RoCE QoS as declared" if not todo else "RoCE QoS firmware set; in force from the next boot")
        return
    for line in commands:
        yield StringCommand(line)
