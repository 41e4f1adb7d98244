"""Slurm release by release: the version read from packages and from a running controller (real
outputs of Debian 12's 22.05.8), the health check's time limit each release enforces, slurm.conf
holding no key its oldest daemon would refuse, and validate refusing a timeout that cannot work."""

from __future__ import annotations

from dataclasses import replace

import pytest
from pyinfra.context import ctx_host, ctx_state

from rdmaprov.deploys.node_check import wanted_here
from rdmaprov.engine.context import NodeContext
from rdmaprov.engine.run_context import context_of
from rdmaprov.facts.files import FileState, ManagedFile
from rdmaprov.facts.slurm import RunningSlurmConfig, SlurmHardware, SlurmRelease
from rdmaprov.inventory import load_inventory
from rdmaprov.nodecheck import expectations
from rdmaprov.nodecheck.expectations import SlurmSide
from rdmaprov.operations.slurm import SlurmMember
from rdmaprov.parsers.slurm import NodeHardware
from rdmaprov.parsers.slurm_release import (
    SlurmPackages,
    SlurmVersion,
    parse_packages,
    parse_show_config,
    parse_version,
)
from rdmaprov.slurm.conf import SlurmNodeLine, render_slurm_conf
from tests.conftest import FIXTURES, REPO
from tests.support.inventories import problems, write
from tests.support.ops import FactHost, FactState
from tests.unit.test_slurm_conf import _conf

SLURM = FIXTURES / "slurm"
V22, V24, V25, V26 = SlurmVersion(22, 5, 8), SlurmVersion(24, 11, 5), SlurmVersion(25, 11, 0), SlurmVersion(26, 5, 5)
ONE = NodeHardware("vm1", 1, 1, 1, 1, 964)
NODES = [SlurmNodeLine("node1", "10.79.41.11", ONE, 0)]
PARTITIONS = [("main", ["node1"], True, "INFINITE")]


def _check(tmp_path, settings: str):
    text = (
        "cluster:\n  name: lab\n  slurm:\n    enabled: true\n    controller: node1\n"
        f"    health_check: {{{settings}}}\nhosts:\n  node1: {{address: 10.79.41.11}}\n"
        "  node2: {address: 10.79.41.12}\n"
    )
    return write(tmp_path, text)


def _slurm(tmp_path, settings: str):
    slurm = load_inventory(_check(tmp_path, settings), require_files=False).slurm
    assert slurm is not None
    return slurm


def test_the_release_from_debians_packages_and_from_slurms_own_words():
    # sinfo -V of Debian 12's slurm-client; the package command on a Debian 12 host without Slurm
    assert parse_version((SLURM / "sinfo_V_debian12.txt").read_text()) == V22
    assert parse_version("1:22.05.8-4+deb12u3") == V22 and str(V22) == "22.05.8" and V25.release == "25.11"
    assert parse_version("slurm 24.11") == SlurmVersion(24, 11, 0) and parse_version("no version") is None
    packages = parse_packages((SLURM / "release_debian12_not_installed.txt").read_text().splitlines())
    assert packages == SlurmPackages(None, V22) and packages.version == V22
    # installed wins over what an install would bring: rdmaprov installs, it does not upgrade
    assert parse_packages(["dpkg ii  22.05.8-4+deb12u3", "candidate 24.11.5-4"]).version == V22
    # a lab node with Slurm installed, then with slurmd and slurmctld held (apt-mark hold): held is
    # installed; removed with its configuration left (rc) is not
    for name in ("release_lab_node_installed.txt", "release_lab_node_held.txt"):
        assert parse_packages((SLURM / name).read_text().splitlines()) == SlurmPackages(V22, V22)
    assert parse_packages(["dpkg hi  22.05.8-4+deb12u3", "candidate 24.11.5-4"]).version == V22
    assert parse_packages(["dpkg rc  22.05.8-4+deb12u3", "candidate 24.11.5-4"]).version == V24
    assert parse_packages([]).version is None


def test_a_running_controllers_configuration_as_scontrol_show_config_prints_it():
    running = parse_show_config((SLURM / "scontrol_show_config_22.05.8.txt").read_text())
    assert running is not None and running.version == V22
    assert running.health_check_interval_s == 300 and running.health_check_timeout_s is None  # no such key in 22.05
    assert running.health_check_program == "/usr/local/sbin/rdmaprov-slurm-health-check"
    failed = (SLURM / "slurm_22.05.8_on_newer_health_check_keys.txt").read_text()
    assert parse_show_config(failed) is None and parse_show_config("") is None


@pytest.mark.parametrize(
    ("settings", "version", "rendered", "kill"),
    [
        ("interval_s: 300", V22, None, 60),  # before 26.05: no key, slurmd's fixed 60 s
        ("interval_s: 30", V24, None, 60),
        ("interval_s: 300", None, None, 60),  # release unknown: no key a release might refuse
        ("interval_s: 300", V26, 60, 60),  # 26.05's default, said out loud
        ("interval_s: 30", V26, 29, 29),  # kept below the interval
        ("interval_s: 300, timeout_s: 20, report_timeout_s: 10", V26, 20, 20),
        ("interval_s: 300, timeout_s: 20, report_timeout_s: 10", V22, None, 60),
    ],
)
def test_the_health_checks_limit_release_by_release(tmp_path, settings, version, rendered, kill):
    slurm = _slurm(tmp_path, settings)
    timing = slurm.health_check.timing(version)
    assert (timing.timeout_s, timing.kill_s, timing.budget_s) == (rendered, kill, kill - 5)
    lines = render_slurm_conf(slurm, ("vm1", "10.79.41.11"), NODES, PARTITIONS, version=version).splitlines()
    assert [line for line in lines if line.startswith("HealthCheckTimeout=")] == (
        [f"HealthCheckTimeout={rendered}"] if rendered else []
    )


def test_start_only_is_rendered_only_where_the_release_knows_it(tmp_path):
    slurm = _slurm(tmp_path, "node_state: [START_ONLY], cycle: false")
    text = render_slurm_conf(slurm, ("vm1", "10.79.41.11"), NODES, PARTITIONS, version=V25)
    assert "HealthCheckNodeState=START_ONLY" in text.splitlines()
    # 22.05.8 reads it as "Invalid HealthCheckNodeState value START_ONLY ignored" (the fixture)
    for version, have in ((V24, "the cluster runs Slurm 24.11.5"), (None, "the cluster's Slurm release is not known")):
        with pytest.raises(ValueError) as info:
            render_slurm_conf(slurm, ("vm1", "10.79.41.11"), NODES, PARTITIONS, version=version)
        assert str(info.value) == f"health_check.node_state START_ONLY needs Slurm 25.11 or later; {have}"


def test_slurm_conf_is_written_for_the_oldest_daemon_and_not_guessed_for_an_unknown_one(tmp_path):
    slurm = _slurm(tmp_path, "interval_s: 30")
    nodes = [SlurmMember(h, h, f"10.79.41.1{i + 1}", 0) for i, h in enumerate(("node1", "node2"))]
    hardware = {SlurmHardware: {"node1": ONE, "node2": ONE}}

    def conf(releases: dict, current: bytes | None = None) -> tuple[list[str], dict]:
        file = FileState(True, current, "644", "root", "root") if current else FileState(False)
        out, notes = _conf(slurm, {ManagedFile: file}, {**hardware, SlurmRelease: releases}, nodes)
        return [line for line in (out[1] if out else current.decode()).splitlines() if "Timeout=" in line], (
            notes.warnings
        )

    assert conf({"node1": SlurmPackages(V26), "node2": SlurmPackages(None, V26)}) == (["HealthCheckTimeout=29"], {})
    # one daemon older than 26.05 would stop at the key: none for anyone
    assert conf({"node1": SlurmPackages(V26), "node2": SlurmPackages(V24)}) == ([], {})
    assert conf({}) == ([], {})  # no release known at all: nothing a newer one would have had
    lines, warnings = conf({"node2": SlurmPackages(V26)})
    assert lines == [] and warnings["node1"] == [
        "slurm.conf: the Slurm release of node1 is not known this run; written with no key an older release "
        "would refuse (HealthCheckTimeout waits until every Slurm host is known)"
    ]
    # once written, the key stays while a host is not reached (a --limit run, a node down): the
    # same file, so no daemon restarts; a host seen older than 26.05 still takes it out
    both = {"node1": SlurmPackages(V26), "node2": SlurmPackages(V26)}
    written, _ = _conf(slurm, {ManagedFile: FileState(False)}, {**hardware, SlurmRelease: both}, nodes)
    text = written[1].split("\n", 1)[1].encode()
    assert conf({"node2": SlurmPackages(V26)}, text) == (["HealthCheckTimeout=29"], {})
    assert conf({"node2": SlurmPackages(V24)}, text)[0] == []


def test_a_declared_timeout_an_older_release_cannot_take_is_said_not_written(tmp_path):
    slurm = _slurm(tmp_path, "timeout_s: 20, report_timeout_s: 10")
    nodes = [SlurmMember(h, h, f"10.79.41.1{i + 1}", 0) for i, h in enumerate(("node1", "node2"))]
    facts = {
        SlurmHardware: {"node1": ONE, "node2": ONE},
        SlurmRelease: dict.fromkeys(("node1", "node2"), SlurmPackages(V22)),
    }
    out, notes = _conf(slurm, {ManagedFile: FileState(False)}, facts, nodes)
    assert not any(line.startswith("HealthCheckTimeout") for line in out[1].splitlines())
    assert notes.warnings["node1"] == [
        "slurm.conf: health_check.timeout_s 20 is not written: Slurm 22.05.8 has no HealthCheckTimeout (26.05 and "
        "later) and kills the check at 60 s"
    ]


def test_a_timeout_that_cannot_work_is_refused_with_its_reason(tmp_path):
    path = _check(tmp_path, "interval_s: 30, timeout_s: 30")
    assert problems(path) == [
        f"{path}:6:47: cluster.slurm.health_check.timeout_s: health_check.timeout_s 30 is not below interval_s 30: "
        "Slurm 26.05 wants HealthCheckTimeout less than HealthCheckInterval and logs an error at every start "
        "(fix: set timeout_s to at most 29, or raise interval_s)"
    ]
    path = _check(tmp_path, "timeout_s: 20")  # the default report_timeout_s of 30 s cannot finish
    assert problems(path) == [
        f"{path}:6:31: cluster.slurm.health_check.timeout_s: health_check.timeout_s 20 leaves no room for "
        "report_timeout_s 30: slurmd would kill the check before its report gives up (5 s go to node-check's "
        "start and exit) (fix: set report_timeout_s to at most 15, or raise timeout_s)"
    ]
    assert _slurm(tmp_path, "timeout_s: 20, report_timeout_s: 15").health_check.timeout_s == 20


def test_the_node_keeps_to_the_budget_its_expectations_carry():
    inventory = load_inventory(REPO / "inventories" / "prod.yaml", require_files=False)
    host = inventory.hosts[next(iter(inventory.hosts))]
    text = expectations.render(inventory.name, host, SlurmSide("gpu001", True, 0.1, 24))
    assert expectations.parse(text).slurm == SlurmSide("gpu001", True, 0.1, 24)
    # a file written before budgets: the fixed 60 s limit's budget
    older = text.replace('    "budget_s": 24,\n', "")
    assert '"budget_s"' not in older and expectations.parse(older).slurm == SlurmSide("gpu001", True, 0.1, 55)


def _side(inventory, facts: dict, cluster: dict) -> tuple[SlurmSide | None, dict]:
    """The Slurm side the node_check deploy writes into node1's expectations, and its warnings."""
    state = FactState(cluster, hosts=["node1", "node2"])
    with ctx_state.use(state), ctx_host.use(FactHost("node1", facts)):
        side = wanted_here(NodeContext(inventory.hosts["node1"], inventory, ["node1"]))
    return side, context_of(state).notes.warnings  # type: ignore[arg-type]


def test_the_budget_the_node_check_deploy_writes_follows_the_release_or_the_running_slurm(tmp_path):
    full = load_inventory(_check(tmp_path, "interval_s: 30"), require_files=False)
    both = {"node1": SlurmPackages(V26), "node2": SlurmPackages(None, V26)}
    assert _side(full, {}, {SlurmRelease: both})[0] == SlurmSide("node1", True, 0.1, 24)  # 29 s less 5
    assert _side(full, {}, {SlurmRelease: {**both, "node2": SlurmPackages(V22)}})[0].budget_s == 55
    text = "cluster:\n  name: site\n  slurm: {enabled: true, mode: health_check}\n"
    text += "hosts:\n  node1: {address: 10.0.0.1}\n"
    site = load_inventory(write(tmp_path, text, "site.yaml"), require_files=False)
    running = parse_show_config((SLURM / "scontrol_show_config_22.05.8.txt").read_text())
    assert _side(site, {RunningSlurmConfig: running}, {})[0].budget_s == 55  # 22.05: the fixed 60 s
    shorter = replace(running, version=V26, health_check_timeout_s=20)
    assert _side(site, {RunningSlurmConfig: shorter}, {})[0].budget_s == 15
    side, warnings = _side(site, {}, {})
    assert side.budget_s == 55 and warnings["node1"] == [
        "node check: Slurm's configuration could not be read here (scontrol show config); the check keeps to 55 s, "
        "within Slurm's default 60 s limit: apply again once Slurm answers"
    ]
