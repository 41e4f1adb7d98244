"""Property: mutate the example inventories (their data, and their text) and load them. Either
rdmaprov refuses the result with its own error (file, place, fix), or it accepts it, and then every
node's plan-time values (the files, scripts, units and package lists the deploys would write) are
derived without an exception. Bounded: a few hundred examples, seconds in CI.

RDMAPROV_FUZZ_EXAMPLES raises the count and RDMAPROV_FUZZ_RANDOM=1 explores new inputs on each run
(CI uses a fixed, repeatable set so that a red run always means a change broke something).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import yaml
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from rdmaprov.builds.scripts import build_script, install_script
from rdmaprov.deploys.boot import render_unit as boot_unit
from rdmaprov.deploys.builds import UserBuildSettings, user_build
from rdmaprov.deploys.exporter import render_unit as exporter_unit
from rdmaprov.deploys.limits import memlock_value, render_limits_conf, render_systemd_conf
from rdmaprov.deploys.mtu import render_script as mtu_script
from rdmaprov.deploys.nccl_env import render_nccl_conf, render_profile
from rdmaprov.deploys.openmpi import render_profile as mpi_profile
from rdmaprov.deploys.package_sources import apt_source_line, yum_repo
from rdmaprov.deploys.rdma_userspace import rdma_package_sets
from rdmaprov.deploys.softroce import render_script as rxe_script
from rdmaprov.deploys.softroce import rxe_links
from rdmaprov.deploys.ssh_trust import hosts_file_lines
from rdmaprov.errors import UserError
from rdmaprov.inventory import load_inventory
from rdmaprov.inventory.config import plain
from rdmaprov.inventory.limit import select_hosts
from rdmaprov.inventory.model import Inventory
from tests.conftest import REPO
from tests.support.ops import os_fact

EXAMPLES = {name: (REPO / "inventories" / f"{name}.yaml").read_text() for name in ("prod", "erdma", "lab")}
FUZZ = settings(
    max_examples=int(os.environ.get("RDMAPROV_FUZZ_EXAMPLES", "150")),
    deadline=None,
    derandomize=os.environ.get("RDMAPROV_FUZZ_RANDOM") != "1",
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)

ODD_TEXT = st.one_of(
    st.text(max_size=12),
    st.sampled_from(
        [
            "x'\ny",
            "$(id)",
            "`id`",
            "a\x00b",
            "a b",
            "-x",
            "--help",
            "1e32",
            "~",
            "yes",
            "22.0",
            "0x1f",
            "gpu1\n",
            "=mlx5_0",
            "mlx5_8",
            "eth0",
            "rxe0",
            "unlimited",
            "2.18.3-1",
            "12.2",
            "sm_90",
            "/opt/x",
            "http://m/x",
            "\u2028",
            "é",
            "*",
            "@gpu",
            "'",
            '"',
            "\\",
            "%h",
            "NCCL_IB_HCA",
        ]
    ),
)
LEAF = st.one_of(st.none(), st.booleans(), st.integers(-(2**70), 2**70), st.floats(allow_nan=True), ODD_TEXT)
VALUE = st.recursive(
    LEAF,
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(ODD_TEXT, inner, max_size=3)),
    max_leaves=6,
)


def _paths(value: Any, path: tuple = ()) -> list[tuple]:
    """Every place in the document: mapping keys and list items, nested."""
    found = [path]
    if isinstance(value, dict):
        for key, item in value.items():
            found += _paths(item, path + (key,))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            found += _paths(item, path + (index,))
    return found


def _mutate(data: Any, path: tuple, action: str, new: Any, key: Any) -> Any:
    if not path:
        return new if action == "replace" else data
    parent = data
    for part in path[:-1]:
        parent = parent[part]
    last = path[-1]
    if action == "replace":
        parent[last] = new
    elif action == "delete":
        del parent[last]
    elif isinstance(parent[last], dict):
        parent[last][key] = new
    elif isinstance(parent[last], list):
        parent[last].append(new)
    return data


def plan_values(inventory: Inventory) -> None:
    """What the deploys compute from the inventory before reading any fact, for every node."""
    hosts = inventory.host_names()
    for name in hosts + list(inventory.groups):
        if name in hosts or inventory.groups[name]:
            select_hosts(inventory, [name])
    hosts_file_lines(hosts, {name: spec.address for name, spec in inventory.hosts.items()})
    debian = os_fact("debian-12")
    for spec in inventory.hosts.values():
        node = spec.node
        env, _ = node.nccl_environment()
        render_nccl_conf(env), render_profile(env)
        mtus = node.wanted_mtus()
        mtu_script(mtus), boot_unit("NIC MTU", "/usr/local/sbin/rdmaprov-mtu", list(mtus))
        rxe_script(rxe_links(list(node.rdma.netdevs)))
        pam, systemd = memlock_value(node.memlock)
        render_limits_conf(pam), render_systemd_conf(systemd)
        exporter_unit(node.exporter.listen)
        prefix = node.mpi.install_prefix
        if prefix:
            mpi_profile(prefix)
        rdma_package_sets(node.packages)
        if node.apt_mirror:
            apt_source_line(node.apt_mirror, debian.codename, True)
        if node.yum_mirror:
            yum_repo(node.yum_mirror)
        for index, build in enumerate(node.builds):
            if build["source"].get("kind", "file") != "file":
                spec_ = user_build(UserBuildSettings.of(build, index, plain(build["source"])), debian, [])
                build_script(spec_), install_script(spec_, keep_archive=False)


def _accepted_or_refused(path: Path) -> None:
    try:
        inventory = load_inventory(path, require_files=False)
    except UserError as exc:
        assert exc.problems and all(p.file == str(path) and p.message for p in exc.problems)
        event("refused")
        return
    event("accepted")
    plan_values(inventory)


@FUZZ
@given(st.sampled_from(sorted(EXAMPLES)), st.data())
def test_mutated_inventory_data_is_refused_or_planned(tmp_path, example, data):
    doc = yaml.safe_load(EXAMPLES[example])
    for _ in range(data.draw(st.integers(1, 3), label="mutations")):
        path = data.draw(st.sampled_from(_paths(doc)), label="path")
        action = data.draw(st.sampled_from(["replace", "delete", "add"] if path else ["replace"]), label="action")
        doc = _mutate(doc, path, action, data.draw(VALUE, label="value"), data.draw(ODD_TEXT, label="key"))
    target = tmp_path / "mutated.yaml"
    target.write_text(yaml.safe_dump(doc, allow_unicode=True))
    _accepted_or_refused(target)


@FUZZ
@given(st.sampled_from(sorted(EXAMPLES)), st.data())
def test_mutated_inventory_text_is_refused_or_planned(tmp_path, example, data):
    lines = EXAMPLES[example].splitlines(keepends=True)
    for _ in range(data.draw(st.integers(1, 4), label="edits")):
        index = data.draw(st.integers(0, len(lines) - 1), label="line")
        edit = data.draw(st.sampled_from(["delete", "duplicate", "insert", "indent", "dedent"]), label="edit")
        if edit == "delete" and len(lines) > 1:
            del lines[index]
        elif edit == "duplicate":
            lines.insert(index, lines[index])
        elif edit == "insert":
            column = data.draw(st.integers(0, len(lines[index])), label="column")
            text = data.draw(
                st.one_of(
                    ODD_TEXT,
                    st.sampled_from([": ", "- ", "&a ", "*a", "<<: *a", "{", "}", "[", "]", "? ", "!!set ", "#"]),
                )
            )
            lines[index] = lines[index][:column] + text + lines[index][column:]
        elif edit == "indent":
            lines[index] = "  " + lines[index]
        else:
            lines[index] = lines[index][2:] if lines[index].startswith("  ") else lines[index]
    target = tmp_path / "edited.yaml"
    target.write_text("".join(lines))
    _accepted_or_refused(target)
