"""One runner for perftest between two nodes, shared by the ib_write_bw pair gate, the rail gate
and the latency gate: several lanes (one HCA on each side, its own TCP port) at once, and the
lanes of a pair (pair_lanes: the rails both nodes have, the memory each side writes from).

All servers of a pair start in one command on the server node and all clients in one command on
the client node, each process in the background with its output in a file of its own, so that
eight rails cost two SSH channels, not sixteen (sshd allows ten sessions per connection by
default). Every process is bounded by `timeout`; the command then prints each lane's output
behind a marker line with its exit status. The clients dial only once every server listens, and
servers still running when the clients are done are killed by their command line: the program's
name first (so neither the shell that runs them nor the one that kills them matches) and the
lane's TCP port.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

import gevent

from rdmaprov.engine.session import CommandResult, HostLost, Session, returned
from rdmaprov.health.checks import expected_devices
from rdmaprov.health.gates.bandwidth import Reference, Verdict
from rdmaprov.health.gates.gpudirect import MemoryChoice, memory_plan
from rdmaprov.health.gates.launch import launcher
from rdmaprov.health.gates.result import GateResult
from rdmaprov.health.gates.subject import End, Subject
from rdmaprov.inventory.config import NodeConfig
from rdmaprov.parsers.node import NodeReport
from rdmaprov.quoting import sh, sh_join

LANE_MARK = "@@ rdmaprov lane"
# A lane killed before it wrote its status prints an empty one
_LANE = re.compile(rf"^{LANE_MARK} (\d+) exit (\d*)$")
# How long servers get to listen, and how much longer than a process's own timeout the command
# that runs them all may take (the processes end first, so their output is still printed).
LISTEN_S = 30
GRACE_S = 15


@dataclass(frozen=True)
class Endpoint:
    """One side of a lane: the node, its HCA and port, the GID index, the port's rate, and the GPU
    whose memory perftest uses (GPUDirect RDMA), None for host memory."""

    host: str
    device: str
    port: int
    gid: int
    rate_gbps: float | None
    declared: bool = False  # the rate is rdma.rate_gbps, not the port's own sysfs figure
    gpu: int | None = None
    # The node's GPU count: a Slurm job that tests through a GPU holds them all, so that the index
    # means the same GPU inside the job (Slurm renumbers the GPUs it grants).
    node_gpus: int = 0
    # The GRH traffic class (the IP ToS of RoCE v2) roce_qos declares: the gates' traffic travels
    # in the class training traffic does. None: perftest's default (0).
    tclass: int | None = None
    # The node's container runtime (containers.runtime): what starts the side in the site's image.
    runtime: str = "none"

    @property
    def name(self) -> str:
        return f"{self.host}:{self.device}"


@dataclass(frozen=True)
class Lane:
    """One perftest run between two endpoints, on its own TCP port."""

    rail: int
    server: Endpoint
    client: Endpoint
    tcp_port: int

    @property
    def subject(self) -> Subject:
        return Subject.pair(End(self.server.host, self.server.device), End(self.client.host, self.client.device))

    def reference(self) -> Reference | None:
        """What the link can carry. Declared rates (rdma.rate_gbps) are the operator's word for
        each port, so the lower of the two is the link's. Rates read from sysfs come from the
        ports themselves: the higher one counts, so that a port trained slower than its peer
        (fewer lanes, a lower speed) fails the gate instead of lowering the bar."""
        sides = [e for e in (self.server, self.client) if e.rate_gbps]
        declared = [e for e in sides if e.declared]
        if declared:
            side = min(declared, key=lambda e: e.rate_gbps or 0)
        elif sides:
            side = max(sides, key=lambda e: e.rate_gbps or 0)
        else:
            return None
        rate = side.rate_gbps or 0
        return Reference(rate, f"{side.device} on {side.host} at {rate:g} Gb/s", "the port rate")


@dataclass(frozen=True)
class LaneOutput:
    lane: Lane
    client: str
    client_status: int | None  # None: the lane's output never came back
    server: str
    server_status: int | None
    via: str = "ssh"  # how the lane was launched (the launcher's name: ssh or slurm)
    timeout_s: int | None = None  # how long each process was given (`timeout`)
    timeout_setting: str = ""  # the inventory setting that gave it


@dataclass(frozen=True)
class Tool:
    """A perftest program and how a gate runs it: its arguments, how long one run may take, and
    the site's image it runs in (the container gate; None: on the host)."""

    program: str  # ib_write_bw, ib_write_lat
    args: tuple[str, ...]
    timeout_s: int
    timeout_setting: str  # where the inventory sets timeout_s, for a reason: gates.rail.timeout_s
    image: str | None = None

    def container(self, tcp_port: int) -> str:
        """The name of a lane's container: one per program and port on a node, as for processes."""
        return f"rdmaprov-{self.program}-{tcp_port}"

    def launched(self, words: list[str], tcp_port: int, runtime: str = "podman") -> list[str]:
        """The words as run: on the host, or in a container of the image started the way the
        node's jobs start theirs. The image is never pulled (air-gapped nodes).

        podman: the node's containers.conf gives the RDMA devices, memlock and the host's network;
        --timeout has conmon kill the container when the run is over time (the `timeout` around
        podman ends only podman: the program, PID 1 in there, ignores the SIGTERM podman passes
        on); --replace takes the name from one left behind.

        docker: rdmaprov-docker-run gives them; --init makes docker's tini PID 1, which hands
        the program the SIGTERM that `timeout` sends the client and the client passes on; a
        container left behind by name is removed first (docker has no --replace)."""
        if self.image is None:
            return words
        name = self.container(tcp_port)
        if runtime == "docker":
            docker = ["rdmaprov-docker-run", "--rm", "--init", "--pull=never", "--name", name, self.image, *words]
            return ["sh", "-c", 'docker rm -f "$0" >/dev/null 2>&1; exec "$@"', name, *docker]
        podman = ["podman", "run", "--rm", "--replace", "--pull=never", f"--timeout={self.timeout_s}"]
        return [*podman, "--name", name, self.image, *words]

    def stray_kill(self, ports: set[int], runtime: str = "podman") -> str:
        """Kill the servers of these ports still running. In a container the program is its PID 1
        (or tini's child), which the container's end takes with it: killed by name instead."""
        if self.image is None:
            return stray_server_kill(self.program, ports)
        names = sh_join(self.container(port) for port in sorted(ports))
        kill = "docker rm -f" if runtime == "docker" else "podman kill"
        return f"{kill} {names} >/dev/null 2>&1; true"


def rail_devices(node: NodeConfig, report: NodeReport) -> list[str]:
    """The node's compute HCAs in rail order: rdma.devices (or what the node has) without the
    storage HCAs, which never carry training traffic."""
    storage = set(node.rdma.storage_hcas)
    return [d for d in expected_devices(node, report) if d not in storage]


def endpoint(host: str, node: NodeConfig, report: NodeReport, device: str, gpu: int | None = None) -> Endpoint:
    """A device of a node as perftest addresses it. The declared rate wins over sysfs: some
    drivers (irdma) report a 4X width on a 1-lane 25G port, which would hold the link to a rate
    it can never reach."""
    rate = node.rdma.rate_gbps
    declared = rate is not None
    if rate is None:
        found = report.port(device, node.rdma.port)
        rate = found.rate_gbps if found and found.rate_gbps else None
    gid = node.gid_index
    gid = gid if gid is not None else 0
    tclass = node.qos.tos if node.qos else None
    runtime = node.containers.runtime
    return Endpoint(host, device, node.rdma.port, gid, rate, declared, gpu, len(report.gpus), tclass, runtime)


def perftest_words(tool: Tool, side: Endpoint, tcp_port: int, server_address: str | None = None) -> list[str]:
    """The command line of one side; with `server_address`, the client that dials it."""
    words = [tool.program, "-d", side.device, "-i", str(side.port), "-x", str(side.gid), "-p", str(tcp_port)]
    words += list(tool.args)
    if side.tclass is not None:
        words.append(f"--tclass={side.tclass}")
    if side.gpu is not None:
        # perftest's --use_cuda takes a CUDA device index; ordering CUDA by PCI bus makes it the
        # index nvidia-smi (and so its topology) shows.
        words = ["env", "CUDA_DEVICE_ORDER=PCI_BUS_ID", *words, f"--use_cuda={side.gpu}"]
    if server_address:
        words.append(server_address)
    return tool.launched(words, tcp_port, side.runtime)


def lanes_script(commands: Sequence[list[str]], timeout_s: int) -> str:
    """A shell script that runs every command at once, each bounded by `timeout`, waits for all,
    then prints each one's output behind `@@ rdmaprov lane N exit STATUS`."""
    parts = ["d=$(mktemp -d /tmp/rdmaprov-perftest.XXXXXX) || exit 1"]
    for i, words in enumerate(commands):
        parts.append(f'{{ timeout -k 5 {int(timeout_s)} {sh_join(words)} >"$d/{i}" 2>&1; echo $? >"$d/{i}.rc"; }} &')
    parts.append("wait")
    parts += [f'echo "{LANE_MARK} {i} exit $(cat "$d/{i}.rc")"; cat "$d/{i}"' for i in range(len(commands))]
    parts.append('rm -rf "$d"')
    return "\n".join(parts)


def split_lanes(text: str) -> dict[int, tuple[int | None, str]]:
    """{lane: (exit status or None when it left none, output)} from what lanes_script printed."""
    lanes: dict[int, tuple[int | None, list[str]]] = {}
    current: list[str] | None = None
    for line in text.splitlines():
        mark = _LANE.match(line)
        if mark:
            current = []
            status = mark.group(2)
            lanes[int(mark.group(1))] = (int(status) if status else None, current)
        elif current is not None:
            current.append(line)
    return {lane: (status, "\n".join(lines)) for lane, (status, lines) in lanes.items()}


def listening_ports(ss_output: str) -> set[int]:
    """The TCP ports `ss -tln` shows something listening on."""
    return {int(m.group(1)) for m in re.finditer(r"\S:(\d+)\s", ss_output)}


def _wait_listening(
    session: Session, host: str, ports: set[int], deadline: float, server: gevent.Greenlet[..., Any]
) -> bool:
    """Whether every port listens before the deadline; a server command that already ended
    (it could not bind, the program is missing) will never listen."""
    while time.monotonic() < deadline and not server.ready():
        if ports <= listening_ports(session.run(host, "ss -tln").stdout):
            return True
        gevent.sleep(0.5)
    return False


def stray_server_kill(program: str, ports: set[int]) -> str:
    """Kill the servers of these ports that are still running. The pattern is anchored at the
    program's name: unanchored, it matched the shell running this loop (its own command line
    holds the pattern), which killed itself at the first port and left the other rails' servers
    to be met by the next pair test on the same ports."""
    patterns = " ".join(sh(f"^{program} .*-p {port}( |$)") for port in sorted(ports))
    return f'for p in {patterns}; do pkill -f "$p"; done; true'


def last_lines(text: str, count: int = 3) -> list[str]:
    """The last non-blank lines of a perftest output (marker lines left out), for a reason."""
    lines = [line.strip() for line in text.splitlines()]
    return [line for line in lines if line and not line.startswith(LANE_MARK)][-count:]


# timeout(1)'s status when it stopped the program: 124, or 137 where it had to kill it (-k; also
# any other SIGKILL, such as the kernel's OOM killer: the reason then says what it had printed)
TIMED_OUT = (124, 137)


def no_result(program: str, output: LaneOutput, error: str = "") -> str:
    """Why a lane's client gave no figure: perftest's own error and its last lines. A client
    its timeout stopped is said to be so first, with the setting: its output then ends at the
    table's header, which alone reads like a broken perftest rather than a slow or stuck link."""
    host = output.lane.client.host
    tail = " | ".join(last_lines(output.client)) or "no output"
    said = f"{error}: {tail}" if error and error not in tail else error or tail
    if output.client_status in TIMED_OUT and output.timeout_s is not None:
        setting = output.timeout_setting or "timeout_s"
        return (
            f"{program} on {host} was stopped at its timeout ({output.timeout_s} s, {setting}) "
            f"before it printed a result: the link is stuck or slower than that allows; it had printed: {said}"
        )
    return f"{program} on {host} gave no result: {said}"


def failed_on_exit(verdict: Verdict, program: str, status: int | None) -> Verdict:
    """A passing figure from a run that exited non-zero fails: perftest printed a result, then
    broke (a completion error at teardown, a timeout)."""
    if verdict.passed and status not in (0, None):
        return replace(verdict, status="fail", reason=f"{program} exited {status}: {verdict.reason}")
    return verdict


def _server_said(server: gevent.Greenlet[..., Any]) -> str:
    """The last lines a server command that ended printed, for the reason it never listened."""
    if not (server.ready() and isinstance(server.value, CommandResult)):
        return ""
    said = last_lines(server.value.stdout + "\n" + server.value.stderr)
    return f": {' | '.join(said)}" if said else ""


def held_gpus(ends: list[Endpoint]) -> int:
    """The GPUs a side's Slurm job must hold: all of the node's when a lane writes from a GPU."""
    return next((e.node_gpus for e in ends if e.gpu is not None), 0)


def run_lanes(session: Session, tool: Tool, lanes: list[Lane]) -> list[LaneOutput] | str:
    """Every lane at once: all servers on one node, the clients on theirs (one node for the rails
    of a pair, one per sender for an incast); the outputs, or why none came back."""
    server = lanes[0].server.host
    address = session.inventory.hosts[server].address
    servers = lanes_script([perftest_words(tool, lane.server, lane.tcp_port) for lane in lanes], tool.timeout_s)
    by_client: dict[str, list[int]] = {}
    for i, lane in enumerate(lanes):
        by_client.setdefault(lane.client.host, []).append(i)
    ports = {lane.tcp_port for lane in lanes}
    launch = launcher(session)  # over SSH, or as Slurm jobs (whose start may wait for the node)

    def clients(host: str) -> CommandResult:
        mine = [lanes[i] for i in by_client[host]]
        script = lanes_script(
            [perftest_words(tool, lane.client, lane.tcp_port, address) for lane in mine], tool.timeout_s
        )
        return launch.run(host, script, tool.timeout_s + GRACE_S, held_gpus([lane.client for lane in mine]))

    # The server's command ends as a value, never as an error of its greenlet (gevent would print
    # that to stderr as a traceback): a lost server is raised here, as a lost client is.
    server_gpus = held_gpus([lane.server for lane in lanes])
    server_job = gevent.spawn(returned, launch.run, server, servers, tool.timeout_s + GRACE_S, server_gpus)
    try:
        deadline = time.monotonic() + min(tool.timeout_s, LISTEN_S) + launch.start_s
        if not _wait_listening(session, server, ports, deadline, server_job):
            listed = ", ".join(str(p) for p in sorted(ports))
            said = _server_said(server_job)
            return f"the {tool.program} server on {server} did not start listening on port {listed}{said}"
        client_results = session.each(list(by_client), clients)
        if not any(isinstance(ran, Exception) for ran in client_results.values()):
            server_job.join(timeout=10)  # a client that broke: its server is killed at once, below
    finally:
        if not server_job.ready() and server not in session.lost:
            session.run(server, tool.stray_kill(ports, lanes[0].server.runtime))
            launch.stop(server)
            server_job.join(timeout=10)
    done: dict[str, CommandResult] = {}
    for host, ran in client_results.items():  # a client's failure first, as when it ran alone
        if isinstance(ran, Exception):
            raise ran
        done[host] = ran
    if isinstance(server_job.value, HostLost):
        raise server_job.value
    ended = server_job.value if isinstance(server_job.value, CommandResult) else None
    server_out = split_lanes(ended.stdout) if ended else {}
    outputs: dict[int, LaneOutput] = {}
    for host, indices in by_client.items():
        ran = done[host]
        client_out = split_lanes(ran.stdout)
        for mine, i in enumerate(indices):
            c_status, c_text = client_out.get(mine, (None, ran.stderr))
            s_status, s_text = server_out.get(i, (None, ""))
            outputs[i] = LaneOutput(
                lanes[i], c_text, c_status, s_text, s_status, launch.via, tool.timeout_s, tool.timeout_setting
            )
    return [outputs[i] for i in range(len(lanes))]


def judged_lanes(
    session: Session,
    tool: Tool,
    lanes: list[Lane],
    judge: Callable[[LaneOutput], GateResult],
    unheard: Callable[[Lane, str], GateResult],
) -> list[GateResult]:
    """Every lane run at once and each output judged; where the server never listened (`why`),
    each lane's `unheard(lane, why)` failure instead."""
    outputs = run_lanes(session, tool, lanes)
    if isinstance(outputs, str):
        return [unheard(lane, outputs) for lane in lanes]
    return [judge(output) for output in outputs]


def nodes_problem(session: Session, names: Sequence[str], reports: dict[str, NodeReport]) -> str:
    """Why nodes cannot be tested together at all ("" when they can)."""
    for name in names:
        if name in session.unreachable:
            return f"{name} is unreachable: {session.unreachable[name]}"
        if name in session.lost:
            return f"not run: {session.lost[name]}"
        if name not in reports:
            return f"{name}: its state could not be read"
    return ""


def pair_lanes(
    session: Session,
    gate: str,
    server: str,
    client: str,
    reports: dict[str, NodeReport],
    base_port: int,
    gpudirect: str = "off",
) -> tuple[list[Lane], list[GateResult], dict[str, MemoryChoice]]:
    """The lanes of a pair, one per rail both nodes have; a failure for each rail only one node
    has (or for the pair when it cannot be tested); the memory each endpoint writes from."""
    subject = Subject.pair(server, client)
    problem = nodes_problem(session, (server, client), reports)
    if problem:
        return [], [GateResult(gate, subject, False, problem)], {}
    sides: list[list[Endpoint]] = []
    memory: dict[str, MemoryChoice] = {}
    for name in (server, client):
        node = session.inventory.hosts[name].node
        devices = rail_devices(node, reports[name])
        if not devices:
            return [], [GateResult(gate, subject, False, f"{name}: no compute HCA to test: declare rdma.devices")], {}
        plan = memory_plan(reports[name], devices, gpudirect)
        memory.update({f"{name}:{d}": choice for d, choice in plan.items()})
        sides.append([endpoint(name, node, reports[name], d, plan[d].gpu) for d in devices])
    lanes = [Lane(i, s, c, base_port + i) for i, (s, c) in enumerate(zip(sides[0], sides[1], strict=False))]
    longer, other = (sides[0], client) if len(sides[0]) > len(sides[1]) else (sides[1], server)
    missing = [
        GateResult(
            gate,
            Subject.pair(server, client, rail=i),
            False,
            f"{longer[i].name} has no peer: {other} has {len(lanes)} compute HCA(s) (rdma.devices differ)",
        )
        for i in range(len(lanes), len(longer))
    ]
    return lanes, missing, memory
