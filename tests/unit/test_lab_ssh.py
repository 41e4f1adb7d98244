"""`lab ssh` over one shared connection per node (lab/sshshare.py); the real connections opened,
reused and closed by `lab down` are the lab's end-to-end tests'."""

from __future__ import annotations

import socket
from pathlib import Path

from rdmaprov.lab.lab import Lab, ssh_command
from rdmaprov.lab.nodes import Node
from rdmaprov.lab.sshshare import SHARE_S, SILENT_S, end_shared


def _node(workdir: Path) -> Node:
    return Node(name="node1", address="10.77.0.11", prefixlen=24, kind="vm", workdir=str(workdir))


def _options(command: list[str]) -> dict[str, str]:
    return dict(command[i + 1].split("=", 1) for i, word in enumerate(command) if word == "-o")


def test_each_node_has_its_own_shared_connection_kept_a_few_seconds_after_its_last_command():
    lab = Path("/var/lib/lab")  # nothing is made there: the command line only
    command = ssh_command(Lab(lab), _node(lab / "nodes" / "node1"), ["uname", "-r"])
    options = _options(command)
    assert options["ControlMaster"] == "auto" and options["ControlPersist"] == str(SHARE_S)
    assert options["ControlPath"] == "/var/lib/lab/nodes/node1/ssh.sock"
    # a node gone silent ends the connection within SILENT_S, not TCP's minutes
    assert int(options["ServerAliveInterval"]) * int(options["ServerAliveCountMax"]) == SILENT_S
    # still the lab's key and its pinned host keys, and the command last
    assert options["StrictHostKeyChecking"] == "yes" and options["BatchMode"] == "yes"
    assert command[-3:] == ["root@10.77.0.11", "uname", "-r"]


def test_a_lab_folder_too_deep_for_a_socket_logs_in_for_each_command():
    deep = Path("/") / ("d" * 80)
    options = _options(ssh_command(Lab(deep), _node(deep / "nodes" / "node1")))
    assert "ControlMaster" not in options and "ControlPath" not in options and "ServerAliveInterval" not in options
    assert options["UserKnownHostsFile"] == str(deep / "known_hosts")


def test_closing_a_connection_whose_ssh_was_killed_removes_its_socket(tmp_path):
    path = tmp_path / "ssh.sock"
    listener = socket.socket(socket.AF_UNIX)
    listener.bind(str(path))
    listener.close()  # a socket file nothing listens on: what a killed master leaves
    end_shared(path, "10.77.0.11")
    assert not path.exists()
    end_shared(path, "10.77.0.11")  # and none at all: nothing to do
