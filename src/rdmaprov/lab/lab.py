"""`rdmaprov lab up|status|ssh|down`: one lab per state directory, recorded in state.json so that
`down` removes exactly what `up` created (by PID and by name) and nothing else."""

from __future__ import annotations

import ipaddress
import json
import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

import gevent
import yaml

from rdmaprov.errors import UserError
from rdmaprov.lab import mirror
from rdmaprov.lab.gates import softroce_gates
from rdmaprov.lab.image import HOSTKEY_MARK, Image, ensure_image
from rdmaprov.lab.network import check_subnet_free, create_bridge, delete_link
from rdmaprov.lab.nodes import Node, restart_vm, start_container, start_vm, stop_node, stop_process
from rdmaprov.lab.proc import require, run
from rdmaprov.lab.qmp import QmpError, TxRing, nic_tx_ring, pause_and_resume
from rdmaprov.lab.releases import DEFAULT_RELEASE, Release, find_release, node_releases
from rdmaprov.lab.saved import Saved, load_saved
from rdmaprov.lab.saved import save as save_nodes
from rdmaprov.lab.sshshare import share_options
from rdmaprov.parsers.console import kernel_trouble

MIRROR_PORT = 8079
DEFAULT_SUBNET = "10.77.0.0/24"
DEFAULT_BRIDGE = "rdmaprov0"
DEFAULT_MEMORY_MB = 1024


@dataclass
class LabSettings:
    nodes: int | None = None  # None: one per release named, else 2
    release: str = DEFAULT_RELEASE.codename  # one for all nodes, or a comma-separated one per node
    kind: str = "vm"
    subnet: str = DEFAULT_SUBNET
    bridge: str = DEFAULT_BRIDGE
    memory_mb: int = DEFAULT_MEMORY_MB
    boot_timeout: int = 600
    saved: Path | None = None  # boot copies of a saved lab's nodes (lab/saved.py) instead of new ones


@dataclass
class Lab:
    """A lab's state directory and what it records."""

    dir: Path
    state: dict = field(default_factory=dict)

    @property
    def state_file(self) -> Path:
        return self.dir / "state.json"

    @property
    def key(self) -> Path:
        return self.dir / "id_ed25519"

    @property
    def known_hosts(self) -> Path:
        return self.dir / "known_hosts"

    @property
    def inventory(self) -> Path:
        return self.dir / "inventory.yaml"

    @property
    def marker(self) -> str:
        """Appears in the command line of every process this lab starts (PID-reuse guard)."""
        return str(self.dir)

    def load(self) -> Lab:
        if self.state_file.exists():
            self.state = json.loads(self.state_file.read_text())
        return self

    def save(self) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        tmp = self.state_file.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.state, indent=2))
        tmp.rename(self.state_file)

    def nodes(self) -> list[Node]:
        return [Node(**n) for n in self.state.get("nodes", [])]


def _validate(settings: LabSettings) -> tuple[ipaddress.IPv4Network, list[Release]]:
    """The lab's subnet and each node's release, or a UserError saying what to fix."""
    if settings.nodes is not None and settings.nodes < 1:
        raise UserError(f"--nodes {settings.nodes}: a lab needs at least 1 node")
    releases = node_releases(settings.release, settings.nodes)
    nodes = len(releases)
    if settings.kind not in ("vm", "container"):
        raise UserError(f"--kind {settings.kind}: use vm or container")
    if len(settings.bridge) > 11 or not settings.bridge.replace("-", "").isalnum():
        raise UserError(
            f"--bridge {settings.bridge}: use at most 11 letters, digits or '-' (tap and veth names derive from it)"
        )
    kernels = sorted({r.name for r in releases if r.kernel_suite})
    if settings.kind == "container" and kernels:
        raise UserError(
            f"--release {settings.release}: {', '.join(kernels)} boots another kernel, and a container runs on this "
            "machine's own (fix: --kind vm, or the release's codename)"
        )
    if settings.kind == "vm" and nodes > 8:
        raise UserError(f"--nodes {nodes}: more than 8 emulated VMs do not fit 2 cores; use --kind container for scale")
    try:
        subnet = ipaddress.IPv4Network(settings.subnet)
    except ValueError as exc:
        raise UserError(f"--subnet {settings.subnet}: {exc} (write it as 10.77.0.0/24)") from exc
    if not subnet.is_private:
        raise UserError(f"--subnet {subnet}: the lab needs a private range (10.0.0.0/8, 172.16.0.0/12, 192.168.0.0/16)")
    if subnet.num_addresses < nodes + 16:
        raise UserError(f"--subnet {subnet} is too small for {nodes} nodes")
    return subnet, releases


def _ensure_client_key(lab: Lab) -> str:
    if not lab.key.exists():
        run(
            ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "rdmaprov-lab", "-f", str(lab.key)],
            "creating the lab's SSH key",
        )
    return lab.key.with_suffix(".pub").read_text().strip()


def _wait_for_node(lab: Lab, node: Node, deadline: float, pinned: list[str] | None = None) -> list[str]:
    """Wait until the node printed its host keys (or, with `pinned`, the ones it is known by: a
    saved node boots without being set up again, lab/saved.py) and its sshd answers; return its
    known_hosts lines."""
    keys: list[str] = pinned or []
    while time.monotonic() < deadline:
        if not pinned and node.report.exists():
            text = node.report.read_bytes().decode(errors="replace")
            found = [line.split(HOSTKEY_MARK, 1)[1].split()[:2] for line in text.splitlines() if HOSTKEY_MARK in line]
            keys = [f"{node.address} {k[0]} {k[1]}" for k in found if len(k) == 2]
        if keys:
            try:
                with socket.create_connection((node.address, 22), timeout=2) as sock:
                    sock.settimeout(5)
                    if sock.recv(64).startswith(b"SSH-"):
                        return keys
            except OSError:
                pass
        if node.pid and not Path(f"/proc/{node.pid}").exists():
            tail = node.console.read_text(errors="replace")[-800:] if node.console.exists() else ""
            raise UserError(f"lab node {node.name} exited while booting; see {node.workdir}:\n{tail}")
        gevent.sleep(1)
    raise UserError(f"lab node {node.name} did not answer SSH within the boot timeout; console log: {node.console}")


def _wait_for_nodes(
    lab: Lab, nodes: list[Node], timeout: float, pinned: dict[str, list[str]] | None = None
) -> list[list[str] | UserError]:
    """_wait_for_node for every node at once (with the host keys `pinned` has for it): each one's
    known_hosts lines, or why it did not answer."""
    deadline = time.monotonic() + timeout
    jobs = [
        gevent.spawn(_collect, _wait_for_node, lab, node, deadline, (pinned or {}).get(node.name)) for node in nodes
    ]
    gevent.joinall(jobs)
    # get() re-raises what killed a greenlet (_collect catches only UserError); .value was None.
    return [job.get() for job in jobs]


_T = TypeVar("_T")


def _collect(func: Callable[..., _T], *args: object) -> _T | UserError:
    """Run func in a greenlet, returning a UserError instead of letting gevent print a traceback."""
    try:
        return func(*args)
    except UserError as exc:
        return exc


def _indented(data: dict, spaces: int) -> list[str]:
    """`data` as YAML block lines, indented to sit under a key of the inventory being written."""
    return [" " * spaces + line for line in yaml.safe_dump(data, sort_keys=False).splitlines()]


def write_inventory(lab: Lab, settings: LabSettings, nodes: list[Node], host_address: str) -> None:
    """An inventory for this lab, in the same shape as inventories/lab.yaml."""
    netdev = "eth0" if settings.kind == "vm" else "host0"
    softroce = settings.kind == "vm"
    lines = [
        f"# Written by `rdmaprov lab up` for the {len(nodes)}-node {settings.kind} lab in {lab.dir}.",
        "cluster:",
        # The VM lab is the cluster inventories/lab.yaml describes: one name, one set of
        # baselines and counter reads, whichever of the two inventories a run was given.
        f"  name: {'lab' if softroce else f'lab-{settings.kind}'}",
        "  ssh:",
        "    user: root",
        f"    key: {lab.key}",
        f"    known_hosts: {lab.known_hosts}",
        "    connect_timeout: 30",
        "  gates:",
        *_indented(softroce_gates(netdev, rdma=softroce), 4),
        "defaults:",
        f"  fabric: {'softroce' if softroce else 'roce'}",
    ]
    if softroce:
        lines += [
            "  netns_mode: exclusive",
            "  rdma:",
            f"    netdevs: [{netdev}]",
            "    devices: [rxe0]",
            "  exporter:",
            "    enabled: true",
        ]
    lines += [
        "  mirror:",
        "    apt:",
        f"      url: http://{host_address}:{MIRROR_PORT}/debian",
        "      # no suite: each node takes its own release's (the mirror serves one per release)",
        f"      key: {lab.dir / 'mirror.asc'}",
        "      exclusive: true",
        "  nccl:",
        "    env:",
        f"      NCCL_SOCKET_IFNAME: {netdev}",
        "      NCCL_DEBUG: WARN",
        "groups:",
        "  nodes:",
        "    hosts:",
    ]
    for node in nodes:
        lines += [f"      {node.name}:  # {find_release(node.release).title}", f"        address: {node.address}"]
    lab.inventory.write_text("\n".join(lines) + "\n")


INOTIFY_INSTANCES = Path("/proc/sys/fs/inotify/max_user_instances")


def _room_for_containers(nodes: int, log) -> None:
    """Each container's systemd takes several inotify instances, all counted against root: at
    Debian's default of 128, containers beyond about 27 never finish booting. Raise the limit."""
    wanted = 128 + 8 * nodes
    current = int(INOTIFY_INSTANCES.read_text())
    if current < wanted:
        INOTIFY_INSTANCES.write_text(f"{wanted}\n")
        log(f"lab: raised fs.inotify.max_user_instances from {current} to {wanted} for {nodes} containers")


def _images_and_mirror(lab: Lab, releases: list[Release], timings: dict[str, float], log) -> dict[str, Image]:
    """Each release's image (built once) and one mirror with a suite per release; the time each
    part took goes into `timings`."""
    images: dict[str, Image] = {}
    pools: dict[str, Path] = {}
    timings.update(image_s=0.0, mirror_s=0.0)
    for release in dict.fromkeys(releases):
        step = time.monotonic()
        images[release.name] = ensure_image(release, log)
        timings["image_s"] += time.monotonic() - step
        if release.codename in pools:  # one suite per Debian release, whichever kernel its nodes boot
            continue
        step = time.monotonic()
        pools[release.codename] = mirror.fetch_packages(images[release.name], release, log)
        timings["mirror_s"] += time.monotonic() - step
    step = time.monotonic()
    lab.dir.mkdir(parents=True, exist_ok=True)
    mirror.build_repository(lab.dir, pools)
    timings["mirror_s"] += time.monotonic() - step
    return images


def up(lab: Lab, settings: LabSettings, log=print) -> dict:
    """Build (or reuse) the images and mirror, then boot the nodes in parallel and pin their keys;
    with settings.saved, the saved lab's nodes as they were saved, with its subnet and bridge."""
    saved = load_saved(settings.saved) if settings.saved else None
    if saved:
        settings = saved.settings(settings)
    subnet, releases = _validate(settings)
    lab.load()
    if lab.state.get("nodes"):
        raise UserError(
            f"a lab is already running from {lab.dir} ({len(lab.state['nodes'])} nodes): `rdmaprov lab down` first, or "
            "use another --dir"
        )
    tools = ["ip", "ssh-keygen", "gpg", "apt-ftparchive"] + (
        ["qemu-system-x86_64", "qemu-img"] if settings.kind == "vm" else ["systemd-nspawn"]
    )
    require(*tools)
    if os.geteuid() != 0:
        raise UserError("the lab creates bridges, taps and namespaces: run it as root")
    if saved:
        check_subnet_free(subnet, settings.bridge, saved.subnet_in_use)
        saved.restore_keys(lab.dir)
    else:
        check_subnet_free(subnet, settings.bridge)
    if settings.kind == "container":
        _room_for_containers(len(releases), log)

    started = time.monotonic()
    timings: dict[str, float] = {}
    images = _images_and_mirror(lab, releases, timings, log)

    hosts = list(subnet.hosts())
    host_address = str(hosts[0])
    pubkey = _ensure_client_key(lab)
    nodes = saved.nodes_in(lab.dir) if saved else _new_nodes(lab, settings, subnet, releases)
    lab.state = {
        "kind": settings.kind,
        "bridge": settings.bridge,
        "subnet": str(subnet),
        "host_address": host_address,
        "nodes": [],
        "mirror_pid": None,
    }
    lab.save()
    try:
        create_bridge(settings.bridge, f"{host_address}/{subnet.prefixlen}")
        lab.state["bridge_created"] = True
        server = mirror.serve(lab.dir, host_address, MIRROR_PORT)
        lab.state["mirror_pid"] = server.pid
        step = time.monotonic()
        _start_nodes(lab, settings, nodes, images, pubkey, saved)
        pinned = {node.name: saved.host_keys(node.name) for node in nodes} if saved else None
        results = _wait_for_nodes(lab, nodes, settings.boot_timeout, pinned)
        errors = [result for result in results if isinstance(result, UserError)]
        if errors:
            raise UserError([p for e in errors for p in e.problems])
        known = [line for result in results if not isinstance(result, UserError) for line in result]
        lab.known_hosts.write_text("\n".join(known) + "\n")
        timings["boot_to_ssh_s"] = time.monotonic() - step
        _check_login(lab, nodes)
        if settings.kind == "vm":
            lab.state["nicwatch_pid"] = _start_nic_watch(lab)
    except BaseException:
        down(lab)
        raise
    write_inventory(lab, settings, nodes, host_address)
    timings["total_s"] = time.monotonic() - started
    lab.state["timings"] = timings
    lab.save()
    return lab.state


def _new_nodes(lab: Lab, settings: LabSettings, subnet: ipaddress.IPv4Network, releases: list[Release]) -> list[Node]:
    """node1, node2, … at the subnet's 11th address on, each with its release."""
    hosts = list(subnet.hosts())
    return [
        Node(
            name=f"node{i}",
            address=str(hosts[9 + i]),
            prefixlen=subnet.prefixlen,
            kind=settings.kind,
            workdir=str(lab.dir / "nodes" / f"node{i}"),
            release=release.name,
        )
        for i, release in enumerate(releases, start=1)
    ]


def _start_nodes(
    lab: Lab, settings: LabSettings, nodes: list[Node], images: dict[str, Image], pubkey: str, saved: Saved | None
) -> None:
    """Start each node, recording it in the lab's state as soon as it runs (for `down`); a saved
    node boots on an overlay of its saved disk, which stays as it was saved for the next copy."""
    for index, node in enumerate(nodes, start=1):
        image = images[node.release]
        if settings.kind == "vm":
            disk = saved.disk(node.name) if saved else image.disk
            start_vm(node, image, settings.bridge, pubkey, settings.memory_mb, index, disk, set_up=not saved)
        else:
            start_container(node, image, settings.bridge, pubkey, f"{settings.bridge}c{index}")
        lab.state["nodes"].append(node.to_dict())
        lab.save()


def _start_nic_watch(lab: Lab) -> int:
    """`lab nic-watch` in the background for as long as the lab is up (lab/nicwatch.py says why)."""
    log = open(lab.dir / "nic-watch.log", "ab")
    command = [sys.executable, "-m", "rdmaprov", "lab", "--dir", str(lab.dir), "nic-watch"]
    return subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, start_new_session=True).pid


def ssh_command(lab: Lab, node: Node, command: list[str] | None = None, tty: bool = False) -> list[str]:
    """The ssh command line to reach a node with the lab's key and pinned host keys, over the
    node's shared connection (lab/sshshare.py)."""
    cmd = [
        "ssh",
        "-i",
        str(lab.key),
        "-o",
        f"UserKnownHostsFile={lab.known_hosts}",
        "-o",
        "StrictHostKeyChecking=yes",
        "-o",
        "BatchMode=yes",
        *share_options(node.ssh_socket),
    ]
    if tty:
        cmd.append("-t")
    return cmd + [f"root@{node.address}"] + (command or [])


def _check_login(lab: Lab, nodes: list[Node]) -> None:
    for node in nodes:
        proc = subprocess.run(ssh_command(lab, node, ["true"]), capture_output=True, text=True, timeout=60)
        if proc.returncode != 0:
            raise UserError(f"lab node {node.name} answers but key login failed: {proc.stderr.strip()}")


def find_node(lab: Lab, name: str) -> Node:
    lab.load()
    for node in lab.nodes():
        if node.name == name:
            return node
    names = ", ".join(n.name for n in lab.nodes()) or "none: run `rdmaprov lab up`"
    raise UserError(f"no lab node {name!r} in {lab.dir} (nodes: {names})")


def restart(lab: Lab, names: list[str], boot_timeout: int = 600) -> dict[str, str]:
    """Get VMs that stopped answering going again, saying how for each: a VM whose QEMU stopped
    taking its NIC's transmits is paused and resumed (a second; nothing lost); any other, or one
    that still does not answer, is powered off and booted on its own disk as it was (what it was
    converged to stays: nodes.restart_vm) and must answer with the host keys the lab pinned for it."""
    nodes = [find_node(lab, name) for name in names]
    containers = [node.name for node in nodes if node.kind != "vm"]
    if containers:
        what = "is a container" if len(containers) == 1 else "are containers"
        raise UserError(f"restart boots VMs again; {', '.join(containers)} {what}: `rdmaprov lab down`, then up")
    older = [node.name for node in nodes if not node.qemu_args.exists()]
    if older:
        raise UserError(f"{', '.join(older)} booted by an older rdmaprov (no qemu.args): `rdmaprov lab down`, then up")
    done = {node.name: f"transmits resumed ({ring.waiting} were waiting in QEMU)" for node, ring in _resumed(nodes)}
    booting = [node for node in nodes if node.name not in done]
    for node in booting:
        restart_vm(node, lab.marker)
        lab.state["nodes"] = [node.to_dict() if n["name"] == node.name else n for n in lab.state["nodes"]]
        lab.save()
    results = _wait_for_nodes(lab, booting, boot_timeout, {node.name: pinned_keys(lab, node) for node in booting})
    problems = [problem for result in results if isinstance(result, UserError) for problem in result.problems]
    if problems:
        raise UserError(problems)
    _check_login(lab, booting)  # by the keys the lab pinned alone (StrictHostKeyChecking)
    done.update({node.name: "booted again on its own disk" for node in booting})
    return {name: done[name] for name in names}


def pinned_keys(lab: Lab, node: Node) -> list[str]:
    """The node's lines in the lab's known_hosts: the host keys it printed at its first boot."""
    lines = lab.known_hosts.read_text().splitlines() if lab.known_hosts.exists() else []
    return [line for line in lines if line.split(" ", 1)[0] == node.address]


def _resumed(nodes: list[Node], within: float = 15) -> list[tuple[Node, TxRing]]:
    """The nodes whose QEMU held transmits it never took and that answer SSH again once paused
    and resumed (lab/qmp.py says why that frees them)."""
    stalled = []
    for node in nodes:
        try:
            ring = nic_tx_ring(node.qmp)
            if ring.waiting:
                pause_and_resume(node.qmp)
                stalled.append((node, ring))
        except QmpError:
            pass  # QEMU does not answer (a stopped or older VM): booting it again is what is left
    deadline = time.monotonic() + within
    answering: list[tuple[Node, TxRing]] = []
    while stalled and time.monotonic() < deadline:
        answering += [(node, ring) for node, ring in stalled if ssh_answers(node)]
        stalled = [(node, ring) for node, ring in stalled if (node, ring) not in answering]
        gevent.sleep(1)
    return answering


def ssh_answers(node: Node) -> bool:
    """Whether the node's sshd accepts a connection (a VM whose NIC stalled does not)."""
    try:
        with socket.create_connection((node.address, 22), timeout=2):
            return True
    except OSError:
        return False


def save(lab: Lab, to: Path, names: list[str]) -> list[str]:
    """The named nodes (every node if none) saved in `to` for `lab up --from` (lab/saved.py)."""
    lab.load()
    if not lab.state.get("nodes"):
        raise UserError(f"no lab is up in {lab.dir}: `rdmaprov lab up`, then save it")
    nodes = [find_node(lab, name) for name in names] if names else lab.nodes()
    syncs = {node.name: ssh_command(lab, node, ["sync"]) for node in nodes}
    save_nodes(lab.dir, lab.state, nodes, syncs, {node.name: pinned_keys(lab, node) for node in nodes}, to)
    return [node.name for node in nodes]


def down(lab: Lab) -> list[str]:
    """Stop every process and remove every link this lab recorded; return what was removed."""
    lab.load()
    removed: list[str] = []
    stop_process(lab.state.get("nicwatch_pid"), lab.marker)
    for node in lab.nodes():
        stop_node(node, lab.marker)
        removed.append(node.name)
    stop_process(lab.state.get("mirror_pid"), lab.marker)
    bridge = lab.state.get("bridge")
    if bridge and lab.state.get("bridge_created"):
        delete_link(bridge)
        removed.append(bridge)
    shutil.rmtree(lab.dir / "nodes", ignore_errors=True)
    lab.known_hosts.unlink(missing_ok=True)
    lab.inventory.unlink(missing_ok=True)
    lab.state = {}
    lab.state_file.unlink(missing_ok=True)
    return removed


def status(lab: Lab) -> list[dict]:
    lab.load()
    rows = []
    for node in lab.nodes():
        alive = bool(node.pid) and Path(f"/proc/{node.pid}").exists()
        reachable = alive and ssh_answers(node)
        rows.append(
            {
                "name": node.name,
                "kind": node.kind,
                "release": node.release,
                "address": node.address,
                "pid": node.pid,
                "running": alive,
                "ssh": reachable,
                "kernel": _console_trouble(node),
                "nic": _nic(node) if alive and not reachable and node.kind == "vm" else None,
            }
        )
    return rows


def _console_trouble(node: Node) -> str | None:
    """What the node's kernel last reported of a crash or a stalled NIC (VMs: their console)."""
    if node.kind != "vm" or not node.console.exists():
        return None
    return kernel_trouble(node.console.read_bytes().decode(errors="replace"))


def _nic(node: Node) -> str:
    """QEMU's view of a silent VM's transmit ring (lab/qmp.py)."""
    try:
        return str(nic_tx_ring(node.qmp))
    except QmpError as exc:
        return f"QEMU not asked: {exc}"


def node_rss_kib(node: Node) -> int:
    """Resident memory of everything a node runs on the host (QEMU, or the container's processes)."""
    if not node.pid:
        return 0
    children: dict[int, list[int]] = {}
    rss: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            status = (entry / "status").read_text()
        except OSError:
            continue
        fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
        pid = int(entry.name)
        children.setdefault(int(fields.get("PPid", "0").strip() or 0), []).append(pid)
        rss[pid] = int(fields.get("VmRSS", "0 kB").split()[0])
    total, todo = 0, [node.pid]
    while todo:
        pid = todo.pop()
        total += rss.get(pid, 0)
        todo.extend(children.get(pid, []))
    return total
