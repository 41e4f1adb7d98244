"""containers.enroot's check: enroot installed, reading /etc/enroot, and leaving its containers the
node's /dev and network, read from real captures (tests/fixtures/enroot/) and from the section's
own shell run here."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from rdmaprov.facts.node_report import ENROOT, SECTION, node_report_command
from rdmaprov.health.checks import report_arguments, verify_node
from rdmaprov.health.container_checks import check_enroot
from rdmaprov.health.findings import Checker
from rdmaprov.parsers.enroot import EnrootSetting, EnrootState, parse_enroot
from rdmaprov.parsers.node import parse_node_report
from tests.conftest import FIXTURES
from tests.support.inventories import lab_host

CAPTURES = FIXTURES / "enroot"


def _captured(name: str) -> EnrootState | None:
    return parse_enroot((CAPTURES / f"{name}.txt").read_text().splitlines())


def _finding(state: EnrootState | None) -> tuple[bool, str, str]:
    c = Checker("gpu1", "infiniband")
    check_enroot(c, state)
    [found] = c.findings
    return found.ok, found.found, found.hint


def test_nvidias_package_layout_with_its_defaults_passes():
    state = _captured("enroot_package_defaults")
    assert state == EnrootState(True, "4.1.2", "/etc/enroot/enroot.conf", {})
    assert _finding(state) == (True, "enroot 4.1.2, /dev and the network shared", "")


def test_a_restricted_dev_is_named_with_its_file_and_the_first_value_wins():
    """60-other.conf says no, but enroot keeps 50-site.conf's yes; its `false` turns UNSHARE_NET off."""
    state = _captured("enroot_restrict_dev")
    assert state is not None and state.settings == {
        "ENROOT_RESTRICT_DEV": EnrootSetting("yes", "/etc/enroot/enroot.conf.d/50-site.conf"),
        "ENROOT_UNSHARE_NET": EnrootSetting("false", "/etc/enroot/enroot.conf.d/60-other.conf"),
    }
    ok, found, hint = _finding(state)
    assert not ok and found == "ENROOT_RESTRICT_DEV yes in /etc/enroot/enroot.conf.d/50-site.conf"
    assert "turn ENROOT_RESTRICT_DEV off in /etc/enroot/enroot.conf.d/50-site.conf" in hint
    assert "without /dev/infiniband" in hint and "UNSHARE_NET" not in hint


def test_an_enroot_that_reads_another_sysconfdir_or_none_at_all_fails_saying_why():
    ok, found, hint = _finding(_captured("enroot_usr_local"))
    assert not ok and found == "enroot 4.1.2 reads /usr/local/etc/enroot/enroot.conf"
    assert "does not read /etc/enroot" in hint and "sysconfdir /etc" in hint
    ok, found, hint = _finding(_captured("enroot_missing"))
    assert not ok and found == "not installed" and "enroot+caps" in hint and "does not install it" in hint
    c = Checker("gpu1", "infiniband")
    check_enroot(c, None)  # a report from before containers.enroot
    assert c.findings[0].unknown and c.findings[0].ok


def test_the_section_is_read_only_where_enroot_is_on_and_its_finding_is_verifys():
    assert ENROOT not in node_report_command()
    spec = lab_host(containers={"enroot": True})
    assert report_arguments(spec)["enroot"] and ENROOT in node_report_command(**report_arguments(spec))
    text = f"{SECTION}enroot\n" + (CAPTURES / "enroot_restrict_dev.txt").read_text()
    report = parse_node_report(text)
    assert report.enroot == _captured("enroot_restrict_dev")
    [found] = [f for f in verify_node(spec, report) if f.id == "containers.enroot"]
    assert not found.ok and found.deploy is None  # not apply's to fix
    assert not [f for f in verify_node(lab_host(), report) if f.id == "containers.enroot"]


def _section(path: str) -> list[str]:
    result = subprocess.run(["sh", "-c", ENROOT], capture_output=True, text=True, env={**os.environ, "PATH": path})
    assert result.returncode == 0, result.stderr
    return result.stdout.splitlines()


def test_the_section_reads_the_script_and_config_files_without_running_enroot(tmp_path: Path):
    """sh runs the section here: with no enroot on PATH, and with an `enroot` whose only lines
    are those the section reads from the real script (its sysconfdir a folder here); running it
    would fail, which shows the section never does."""
    assert _section("/usr/bin:/bin") == ["missing"]
    conf = tmp_path / "etc"
    (conf / "enroot.conf.d").mkdir(parents=True)
    (conf / "enroot.conf").write_text("#ENROOT_RESTRICT_DEV        no\nENROOT_UNSHARE_IPC y\n")
    (conf / "enroot.conf.d" / "10-a.conf").write_text("ENROOT_UNSHARE_NET=yes\nENROOT_REMAP_ROOT yes\n")
    (conf / "enroot.conf.d" / "README").write_text("ENROOT_RESTRICT_DEV yes\n")  # not a .conf: not read
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    script = bin_dir / "enroot"
    script.write_text(f'#!/bin/sh\nexit 99\nconfig::init "{conf}/enroot.conf"\nexport ENROOT_VERSION="4.1.2"\n')
    script.chmod(0o755)
    lines = _section(f"{bin_dir}:/usr/bin:/bin")
    assert lines == [
        f"conf {conf}/enroot.conf",
        "version 4.1.2",
        f"file {conf}/enroot.conf",
        "ENROOT_UNSHARE_IPC y",
        f"file {conf}/enroot.conf.d/10-a.conf",
        "ENROOT_UNSHARE_NET=yes",
    ]
    assert set(parse_enroot(lines).taking) == {"ENROOT_UNSHARE_IPC", "ENROOT_UNSHARE_NET"}


def test_node_check_carries_enroot_to_the_node_and_reads_its_section():
    from rdmaprov.nodecheck import expectations
    from rdmaprov.nodecheck.run import report_command

    spec = lab_host(containers={"enroot": True})
    kept = expectations.parse(expectations.render("lab", spec, None))
    assert kept.host.node.containers.enroot and ENROOT in report_command(kept.host)
    plain = expectations.parse(expectations.render("lab", lab_host(), None))
    assert not plain.host.node.containers.enroot and ENROOT not in report_command(plain.host)
