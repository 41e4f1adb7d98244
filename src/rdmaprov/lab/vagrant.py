"""`rdmaprov lab vagrant-inventory`: an inventory for the machines of a Vagrant project, every
host key pinned.

`vagrant ssh-config` says how Vagrant reaches each machine (user, its own private key); each
machine's host keys and IPv4 addresses are then read over `vagrant ssh`, Vagrant's own channel to
a machine it created on this host's private network, and pinned in a known_hosts file beside the
inventory, so that every later connection of rdmaprov checks them (StrictHostKeyChecking stays on;
a machine rebuilt with new keys must be read again). The cluster's address and RDMA interface on
each node is the private network's: the interface with an IPv4 address other than the one Vagrant
logs in on.
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path

import yaml

from rdmaprov.errors import UserError
from rdmaprov.inventory import load_inventory
from rdmaprov.lab.gates import softroce_gates
from rdmaprov.lab.proc import require
from rdmaprov.parsers.vagrant import VagrantSsh, parse_host_keys, parse_ipv4_addresses, parse_ssh_config

SPLIT = "@@rdmaprov-addresses"
READ = f"cat /etc/ssh/ssh_host_*_key.pub; echo {SPLIT}; ip -4 -o addr show"


@dataclass(frozen=True)
class Machine:
    ssh: VagrantSsh
    keys: list[tuple[str, str]]
    netdev: str
    address: str
    port: int


def _vagrant(directory: Path, args: list[str], timeout: int = 300) -> str:
    try:
        proc = subprocess.run(
            ["vagrant", *args], cwd=directory, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL
        )
    except subprocess.TimeoutExpired:
        raise UserError(f"`vagrant {' '.join(args)}` in {directory} did not finish within {timeout} s") from None
    if proc.returncode != 0:
        said = "\n".join((proc.stderr or proc.stdout).strip().splitlines()[-4:])
        raise UserError(
            f"`vagrant {' '.join(args)}` in {directory} failed (exit {proc.returncode}); are the machines up "
            f"(`vagrant status`), with the environment they were brought up with?\n{said}"
        )
    return proc.stdout


def choose_interface(ssh: VagrantSsh, addresses: dict[str, list[str]], netdev: str | None) -> tuple[str, str]:
    """(interface, address) of the cluster network on one machine: `netdev` when given, else the one
    interface with an IPv4 address other than loopback and the one Vagrant logs in on."""
    addresses = {name: cidrs for name, cidrs in addresses.items() if name != "lo"}
    if netdev:
        if netdev not in addresses:
            have = ", ".join(f"{n} {c[0]}" for n, c in addresses.items()) or "none"
            raise UserError(f"{ssh.name} has no IPv4 address on {netdev} (it has: {have}): fix --netdev")
        return netdev, addresses[netdev][0].split("/")[0]
    others = {n: c for n, c in addresses.items() if all(cidr.split("/")[0] != ssh.hostname for cidr in c)}
    if len(others) == 1:
        name, cidrs = next(iter(others.items()))
        return name, cidrs[0].split("/")[0]
    if not others:
        own = [n for n, c in addresses.items() if any(cidr.split("/")[0] == ssh.hostname for cidr in c)]
        if own and not ssh.hostname.startswith("127."):
            return own[0], ssh.hostname
        raise UserError(
            f"{ssh.name} has no network but the one Vagrant logs in through: give it a private network in the "
            "Vagrantfile (config.vm.network :private_network, ip: ...)"
        )
    listed = ", ".join(f"{n} {c[0]}" for n, c in others.items())
    raise UserError(f"{ssh.name} has several networks ({listed}): name the cluster's with --netdev")


def read_machine(directory: Path, ssh: VagrantSsh, netdev: str | None) -> Machine:
    keys_text, _, addresses = _vagrant(directory, ["ssh", ssh.name, "-c", READ]).partition(SPLIT)
    keys = parse_host_keys(keys_text)
    if not keys:
        raise UserError(f"{ssh.name} showed no SSH host key (/etc/ssh/ssh_host_*_key.pub) over `vagrant ssh`")
    interface, address = choose_interface(ssh, parse_ipv4_addresses(addresses), netdev)
    port = ssh.port if address == ssh.hostname else 22
    return Machine(ssh, keys, interface, address, port)


def known_hosts_lines(machines: list[Machine]) -> list[str]:
    lines = []
    for machine in machines:
        host = machine.address if machine.port == 22 else f"[{machine.address}]:{machine.port}"
        lines += [f"{host} {kind} {key}" for kind, key in machine.keys]
    return lines


def inventory_data(machines: list[Machine], known_hosts: str) -> dict:
    """The inventory: Vagrant's user and keys, the lab's SoftRoCE settings on the private network."""
    netdevs = sorted({m.netdev for m in machines})
    if len(netdevs) != 1:
        named = ", ".join(f"{m.ssh.name} {m.netdev}" for m in machines)
        raise UserError(f"the machines' private networks are on differently named interfaces ({named}): use --netdev")
    netdev = netdevs[0]
    hosts = {}
    for machine in machines:
        entry: dict = {"address": machine.address, "ssh": {"key": machine.ssh.identity}}
        if machine.port != 22:
            entry["ssh"]["port"] = machine.port
        hosts[machine.ssh.name] = entry
    return {
        "cluster": {
            "name": "vagrant",
            "ssh": {"user": machines[0].ssh.user, "known_hosts": known_hosts, "connect_timeout": 30},
            "gates": softroce_gates(netdev),
        },
        "defaults": {
            "fabric": "softroce",
            "rdma": {"netdevs": [netdev], "devices": ["rxe0"]},
            "nccl": {"env": {"NCCL_SOCKET_IFNAME": netdev}},
        },
        "groups": {"nodes": {"hosts": hosts}},
    }


def write_inventory(directory: Path, output: Path, netdev: str | None = None, log=print) -> tuple[Path, Path]:
    """Read the project's machines and write `output` and its known_hosts file beside it."""
    require("vagrant")
    config = _vagrant(directory, ["ssh-config"])
    try:
        machines_ssh = parse_ssh_config(config)
    except ValueError as exc:
        raise UserError(f"cannot read `vagrant ssh-config` in {directory}: {exc}") from None
    if not machines_ssh:
        raise UserError(f"`vagrant ssh-config` in {directory} listed no machine: run `vagrant up` first")
    machines = []
    for ssh in machines_ssh:
        log(f"vagrant: reading {ssh.name}'s host keys and addresses over `vagrant ssh`")
        machines.append(read_machine(directory, ssh, netdev))
    known_hosts = output.with_suffix(".known_hosts")
    data = inventory_data(machines, known_hosts.name)
    header = (
        f"# Written by `rdmaprov lab vagrant-inventory` for the Vagrant machines in {directory.resolve()}.\n"
        f"# Host keys were read over `vagrant ssh` and are pinned in {known_hosts.name}; read them again after a\n"
        "# machine is rebuilt. The gates' thresholds only prove that RDMA and MPI work in VMs (SoftRoCE).\n"
    )
    # Checked before anything is replaced: an inventory that would not load must not overwrite a
    # working one, nor its known_hosts file the keys that one pins.
    output.parent.mkdir(parents=True, exist_ok=True)
    staged = output.with_name(output.name + ".tmp")
    staged.write_text(header + yaml.safe_dump(data, sort_keys=False))
    try:
        load_inventory(staged, require_files=False)
    except UserError:
        staged.unlink()
        raise
    staged_keys = known_hosts.with_name(known_hosts.name + ".tmp")
    staged_keys.write_text("\n".join(known_hosts_lines(machines)) + "\n")
    staged_keys.replace(known_hosts)
    staged.replace(output)
    return output, known_hosts
