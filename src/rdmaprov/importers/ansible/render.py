"""Write the converted inventory as YAML with comments: a header that says what the user must do
before the first run, each imported setting with the Ansible variable and line it came from, and
every Ansible variable that has no rdmaprov setting as a comment beside its group or host.

Values are written by PyYAML's emitter (it quotes whatever YAML would read otherwise: `'123'`,
`'yes'`); comments are printable ASCII only, every other character escaped, so that no value from
the Ansible files can end a comment line and become YAML.
"""

from __future__ import annotations

import json
import re
from typing import Any

import yaml

from rdmaprov.importers.ansible.convert import Converted, Entry, Setting
from rdmaprov.importers.ansible.model import is_encrypted
from rdmaprov.inventory.source import TaggedScalar

MAX_SHOWN = 160  # characters of a value shown in a comment; its file and line say where the rest is
_SECRET = re.compile(r"pass|secret|token|credential|private_key(?!_file)|vault", re.I)
_PLAIN_NAME = re.compile(r"[A-Za-z0-9_.-]+")
_UNPRINTABLE = re.compile(r"[^\x20-\x7e]")

DEFAULTS_TEMPLATE = """\
# defaults:                      # what every node is; an Ansible inventory does not say it
#   fabric: infiniband           # infiniband | roce | erdma | softroce
#   rdma:
#     devices: [mlx5_0, mlx5_1]  # the HCAs NCCL may use (`ibv_devices` lists them)
#     rate_gbps: 200
#   gpu:
#     count: 8
#   nccl:
#     env: {NCCL_SOCKET_IFNAME: eth0}
"""


def scalar(value: Any) -> str:
    """One YAML scalar, quoted where YAML would read it as something else."""
    text = yaml.safe_dump(value, default_flow_style=True, allow_unicode=True, width=2**31 - 1)
    return text.removesuffix("\n...\n").removesuffix("\n")


def comment_text(text: str) -> str:
    """Printable ASCII: anything else (a newline, U+2028, DEL) escaped, so a comment stays one line."""
    return _UNPRINTABLE.sub(lambda m: m.group().encode("unicode_escape").decode("ascii"), text)


def _json_default(value: Any) -> Any:
    if is_encrypted(value):
        return "<encrypted with ansible-vault>"
    if isinstance(value, TaggedScalar):
        return value.text
    return str(value)


def shown_value(name: str, value: Any) -> str:
    if is_encrypted(value):
        return "<encrypted with ansible-vault: not copied>"
    if _SECRET.search(name):
        return "<not copied: a secret>"
    try:
        text = json.dumps(value, ensure_ascii=True, default=_json_default)
    except (TypeError, ValueError, RecursionError):
        text = repr(value)
    text = comment_text(text)
    if len(text) > MAX_SHOWN:
        text = f"{text[:MAX_SHOWN]}... ({len(text):,} characters)"
    return text


def _name(name: str) -> str:
    return name if _PLAIN_NAME.fullmatch(name) else comment_text(json.dumps(name, ensure_ascii=True))


def _setting(indent: str, setting: Setting) -> str:
    return f"{indent}{setting.key}: {scalar(setting.value)}  # {setting.var}, {comment_text(str(setting.origin))}"


def _body(entry: Entry, indent: str) -> list[str]:
    """The lines inside a host, group or cluster: address, ssh, then the comments."""
    lines = []
    if entry.address is not None:
        lines.append(_setting(indent, entry.address))
    if entry.ssh:
        lines.append(f"{indent}ssh:")
        lines += [_setting(indent + "  ", entry.ssh[key]) for key in ("user", "port", "key") if key in entry.ssh]
    lines += [f"{indent}# note: {comment_text(note)}" for note in entry.notes]
    for group, name, var in entry.leftovers:
        where = f" (group {group})" if group else ""
        lines.append(
            f"{indent}# ansible{where}: {_name(name)}: {shown_value(name, var.value)}  "
            f"({comment_text(str(var.origin))})"
        )
    return lines


def _entry(entry: Entry, indent: str, comments: tuple[str, ...] = (), members: tuple[str, ...] = ()) -> list[str]:
    """`name:` and its body; `name: {}` when only comments (or nothing) would follow."""
    inner = indent + "  "
    body = [f"{inner}# {comment_text(text)}" for text in comments] + _body(entry, inner)
    if members:
        body += [f"{inner}hosts:"] + [f"{inner}  {scalar(member)}:" for member in members]
    if entry.address is None and not entry.ssh and not members:
        return [f"{indent}{scalar(entry.name)}: {{}}"] + body
    return [f"{indent}{scalar(entry.name)}:"] + body


def _header(conv: Converted, derived_name: bool) -> list[str]:
    source = conv.source
    lines = [
        f"# rdmaprov inventory imported from the Ansible inventory {source.path} ({source.kind}) by",
        "# `rdmaprov import ansible`. Files read:",
    ]
    lines += [f"#   {path}" for path in source.files]
    todo = [
        f"SSH host keys: rdmaprov always checks them, against cluster.ssh.known_hosts ({conv.known_hosts}). "
        "Every node's host key must be in that file before the first run (from your provisioning system, "
        "or `ssh-keyscan` over a network you trust, fingerprints compared).",
        "The nodes' RDMA hardware is not in an Ansible inventory: describe it under `defaults:` "
        "(a template is at the end of this file; `rdmaprov validate` says what is missing).",
        "Ansible variables with no rdmaprov setting are kept as comments (`# ansible: NAME: VALUE  (FILE:LINE)`) "
        "beside the group or host that set them: translate what matters by hand. Secrets are not copied.",
    ]
    if derived_name:
        todo.append(f"cluster.name {conv.name!r} comes from the file's name: change it here, or import with --name.")
    todo += conv.notes
    lines += ["#", "# Before the first run:"]
    for number, item in enumerate(todo, start=1):
        lines += _wrap(f"{number}. {comment_text(item)}", "#   ", "#      ")
    return lines


def _wrap(text: str, first: str, rest: str, width: int = 110) -> list[str]:
    lines, current = [], first
    for word in text.split(" "):
        if len(current) + len(word) > width and current.strip("# "):
            lines.append(current.rstrip())
            current = rest
        current += word + " "
    lines.append(current.rstrip())
    return lines


def render(conv: Converted, derived_name: bool) -> str:
    lines = _header(conv, derived_name)
    cluster = conv.cluster
    lines += ["cluster:", f"  name: {scalar(conv.name)}", "  ssh:"]
    lines += [_setting("    ", cluster.ssh[key]) for key in ("user", "port", "key") if key in cluster.ssh]
    lines.append(f"    known_hosts: {scalar(conv.known_hosts)}  # every node's host key must be in this file")
    cluster_only = Entry(cluster.name, cluster.origin, notes=cluster.notes, leftovers=cluster.leftovers)
    lines += _body(cluster_only, "  ")
    lines += ["", "hosts:"]
    for host in conv.hosts:
        lines += _entry(host, "  ")
    if conv.groups:
        lines += ["", "groups:"]
        for group in conv.groups:
            comments = (f"Ansible children: {', '.join(group.children)} (their hosts are listed here)",)
            lines += _entry(group, "  ", comments if group.children else (), tuple(group.members))
    lines += ["", DEFAULTS_TEMPLATE.rstrip()]
    return "\n".join(lines) + "\n"
