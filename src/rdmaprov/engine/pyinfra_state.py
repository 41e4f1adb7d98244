"""Build pyinfra's Inventory and State from an rdmaprov inventory."""

from __future__ import annotations

import logging
import os

from pyinfra.api import Config, State, arguments, facts
from pyinfra.api import Inventory as PyinfraInventory
from pyinfra.api.connect import connect_all
from pyinfra.api.exceptions import PyinfraError
from pyinfra.api.state import BaseStateCallback, StateStage

from rdmaprov.engine.connection import compare_macs_in_c, watch
from rdmaprov.engine.run_context import context_of, start_run
from rdmaprov.errors import UserError
from rdmaprov.inventory.model import HostSpec, Inventory, SSHSettings


def _remember_global_arguments() -> None:
    """pyinfra works out its global arguments (typing.get_type_hints over a TypedDict) again on
    every operation call and fact read: 0.17 ms each here, half a minute of CPU for a check of
    a 100-operation stack on 2,000 nodes. They never change: worked out once, for the process."""
    known = arguments.all_global_arguments()
    arguments.all_global_arguments = facts.all_global_arguments = lambda: known


_remember_global_arguments()


def connector_data(spec: HostSpec) -> dict[str, object]:
    """pyinfra host data for one host: SSH with host keys always verified, sudo when not root."""
    ssh = spec.ssh
    data: dict[str, object] = {
        "ssh_hostname": spec.address,
        "ssh_port": ssh.port,
        "ssh_user": ssh.user,
        "ssh_strict_host_key_checking": "yes",
        "ssh_allow_agent": False,
        "ssh_look_for_keys": ssh.key is None,
        "ssh_connect_retries": 0,
        "_timeout": ssh.command_timeout,  # every command's deadline (pyinfra reads globals from host data)
    }
    if ssh.key:
        data["ssh_key"] = ssh.key
    if ssh.known_hosts:
        data["ssh_known_hosts_file"] = ssh.known_hosts
    if ssh.password:
        data["ssh_password"] = ssh.password
    elif ssh.password_env:
        password = os.environ.get(ssh.password_env)
        if password is None:
            raise UserError(
                f"host {spec.name}: ssh.password_env names ${ssh.password_env}, which is not set (export it, or remove "
                "password_env once the node has its key)"
            )
        data["ssh_password"] = password
    if ssh.user != "root":
        data["_sudo"] = True
        if ssh.sudo_password_env:
            password = os.environ.get(ssh.sudo_password_env)
            if password is None:
                raise UserError(
                    f"host {spec.name}: ssh.sudo_password_env names ${ssh.sudo_password_env}, which is not set"
                )
            data["_sudo_password"] = password
        elif ssh.password:
            data["_sudo_password"] = ssh.password  # a first login's password is usually sudo's too
    return data


def build_state(inventory: Inventory, selected: list[str], parallel: int | None = None) -> State:
    """A pyinfra State over the selected hosts, `parallel` at once (default: all of them, or
    `cluster.parallel`)."""
    names_with_data = [(name, connector_data(inventory.hosts[name])) for name in selected]
    pyinfra_inventory = PyinfraInventory((names_with_data, {}))
    timeout = max(inventory.hosts[name].ssh.connect_timeout for name in selected)
    config = Config(
        PARALLEL=parallel or inventory.parallel or len(selected),
        CONNECT_TIMEOUT=timeout,
        FAIL_PERCENT=None,
    )
    # Operations decide lazily at execution time; `check` iterates each generator itself once.
    state = State(pyinfra_inventory, config, check_for_changes=False)
    start_run(state).ssh = {name: inventory.hosts[name].ssh for name in selected}
    return state


# The libraries that log on their own, and what -v shows of each: pyinfra's steps, and only
# paramiko's warnings and errors (its INFO is every handshake).
LIBRARY_LOGS = {"pyinfra": logging.INFO, "paramiko": logging.WARNING}


def quiet_libraries(verbose: bool) -> None:
    """rdmaprov reports results and unreachable nodes itself, unless -v asks for the libraries'
    own logs. Left alone, Python's last-resort handler prints paramiko's errors to stderr: a
    node that did not send its SSH banner showed the user a traceback beside rdmaprov's words."""
    for name, level in LIBRARY_LOGS.items():
        log = logging.getLogger(name)
        log.propagate = False
        log.handlers[:] = []
        if verbose:
            handler = logging.StreamHandler()
            handler.setFormatter(logging.Formatter(f"{name}: %(message)s"))
            log.addHandler(handler)
            log.setLevel(level)
        else:
            log.addHandler(logging.NullHandler())


class _ConnectErrors(BaseStateCallback):
    def __init__(self) -> None:
        self.errors: dict[str, str] = {}

    def host_connect_error(self, state: State, host, error) -> None:  # type: ignore[override]
        self.errors[host.name] = str(error.args[0] if getattr(error, "args", None) else error)


def connect(state: State) -> dict[str, str]:
    """Connect every host at once; {name: reason} for the hosts that could not be reached."""
    compare_macs_in_c()
    callback = _ConnectErrors()
    state.add_callback_handler(callback)
    state.set_stage(StateStage.Connect)
    try:
        connect_all(state)
    except PyinfraError:
        pass  # every host failed: each one's reason is in the callback
    ssh = context_of(state).ssh
    for host in state.active_hosts:
        watch(state, host, ssh.get(host.name) or SSHSettings())
    return {
        host.name: callback.errors.get(host.name, "could not connect")
        for host in state.inventory
        if host not in state.active_hosts
    }


def privileges(host) -> dict[str, object]:
    """The sudo arguments a command outside an operation needs (operations get them from host data)."""
    return {key: getattr(host.data, key) for key in ("_sudo", "_sudo_password") if getattr(host.data, key, None)}
