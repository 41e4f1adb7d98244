"""Every file and command rdmaprov writes, rendered from hostile values, read back by its real
consumer (bash, sh, systemd's tools, NCCL's KEY=VALUE rule): the value arrives exactly, nothing
runs, or the renderer refuses it. Values here bypass validation on purpose: quoting is the
second wall and must hold on its own."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from rdmaprov.builds.scripts import build_script, fetch_lines, install_script
from rdmaprov.builds.spec import BuildSpec, Source
from rdmaprov.deploys.boot import render_unit as boot_unit
from rdmaprov.deploys.exporter import render_unit as exporter_unit
from rdmaprov.deploys.gpu_driver import render_profile as cuda_profile
from rdmaprov.deploys.mtu import render_script as mtu_script
from rdmaprov.deploys.nccl_env import render_nccl_conf, render_profile
from rdmaprov.deploys.openmpi import render_profile as mpi_profile
from rdmaprov.deploys.package_sources import apt_source_line, yum_repo
from rdmaprov.deploys.repository import repository_files
from rdmaprov.deploys.softroce import render_script as rxe_script
from rdmaprov.deploys.ssh_trust import hosts_file_lines
from rdmaprov.health.gates.ib_write_bw import TCP_PORT, bandwidth_tool
from rdmaprov.health.gates.perftest import Endpoint, perftest_words
from rdmaprov.parsers.ssh import known_hosts_line, parse_ssh_identity
from rdmaprov.quoting import device_unit, fail_command, sh, sh_double, sh_join, systemd_arg
from tests.support.inventories import gates_config, node_config

HOSTILE = [
    "x'; touch {marker}; '",
    "$(touch {marker})",
    "`touch {marker}`",
    'a"b\\c $HOME ${{PATH}} %h %% !x',
    "=mlx5_0:1,mlx5_1:1",
    "",
    "  spaces  around  ",
]


def _apt(apt: dict):
    return node_config({"mirror": {"apt": apt}}).apt_mirror


def _values(marker: Path) -> list[str]:
    return [v.format(marker=marker) for v in HOSTILE]


def _run(shell: str, script: str, cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([shell, "-c", script], capture_output=True, text=True, cwd=cwd, env=env)


@pytest.mark.parametrize("shell", ["bash", "sh"])
def test_nccl_profile_gives_login_shells_exactly_the_values(tmp_path, shell):
    marker = tmp_path / "owned"
    env = {f"NCCL_V{i}": value for i, value in enumerate(_values(marker))}
    profile = tmp_path / "nccl.sh"
    profile.write_text(render_profile(env))
    names = " ".join(f'"${name}"' for name in env)
    out = _run(shell, f". {sh(profile)}; printf '%s\\0' {names}", tmp_path)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split("\0")[:-1] == list(env.values())
    assert not marker.exists()


def test_nccl_conf_holds_each_value_verbatim_on_its_own_line():
    env = {"NCCL_A": "x'y\"z $(id)", "NCCL_IB_HCA": "=mlx5_0:1,mlx5_1:1", "NCCL_B": "a=b=c"}
    lines = render_nccl_conf(env).splitlines()[1:]
    # NCCL reads KEY=VALUE lines and splits at the first '='.
    assert dict(line.split("=", 1) for line in lines) == env


@pytest.mark.parametrize("bad", ["a\nNCCL_DEBUG=TRACE", "a\rb", "a\x00b"])
def test_line_oriented_files_refuse_what_would_make_a_second_line(bad):
    with pytest.raises(ValueError, match="control character"):
        render_nccl_conf({"NCCL_X": bad})
    with pytest.raises(ValueError, match="control character"):
        render_profile({"NCCL_X": bad})
    with pytest.raises(ValueError):
        yum_repo(node_config({"mirror": {"yum": {"baseurl": f"http://m/{bad}"}}}).yum_mirror)
    with pytest.raises(ValueError):
        apt_source_line(_apt({"url": f"http://m/{bad}"}), "bookworm", False)
    with pytest.raises(ValueError):
        repository_files("rdmaprov-x", "X repository", "debian", f"http://m/{bad} bookworm main", None, None, None)


def test_apt_source_fields_must_be_single_words():
    with pytest.raises(ValueError, match="whitespace"):
        apt_source_line(_apt({"url": "http://m/debian [trusted=yes]"}), "bookworm", False)
    assert apt_source_line(_apt({"url": "http://m/debian", "components": ["main", "contrib"]}), "bookworm", True) == (
        "deb [signed-by=/etc/apt/keyrings/rdmaprov-mirror.asc] http://m/debian bookworm main contrib\n"
    )


@pytest.mark.parametrize("render", [mpi_profile, cuda_profile])
def test_path_profiles_keep_odd_paths_whole(tmp_path, render):
    marker = tmp_path / "owned"
    value = f"/opt/x'; touch {marker}; '"
    profile = tmp_path / "p.sh"
    profile.write_text(render(value))
    out = _run("bash", f'. {sh(profile)}; printf %s "$PATH"', tmp_path, env={"PATH": "/usr/bin:/bin"})
    assert out.returncode == 0 and not marker.exists()
    assert value in out.stdout


def _stub_tools(tmp_path: Path) -> tuple[dict[str, str], Path]:
    """ip, rdma and modprobe that record their arguments (NUL-separated) instead of acting."""
    bin_dir, log = tmp_path / "bin", tmp_path / "calls"
    bin_dir.mkdir()
    for tool in ("ip", "rdma", "modprobe"):
        stub = bin_dir / tool
        stub.write_text(f"#!/bin/sh\nprintf '%s\\0' {tool} \"$@\" >> {sh(log)}\nprintf '\\n' >> {sh(log)}\nexit 1\n")
        stub.chmod(0o755)
    return {"PATH": f"{bin_dir}:/usr/bin:/bin"}, log


def test_boot_scripts_pass_netdev_names_as_single_arguments(tmp_path):
    marker = tmp_path / "owned"
    netdev = f"eth0;touch {marker}"
    env, log = _stub_tools(tmp_path)
    for script in (mtu_script({netdev: 9000}), rxe_script([("rxe0", netdev)]).replace("set -e\n", "")):
        path = tmp_path / "boot.sh"
        path.write_text(script)
        subprocess.run(["sh", str(path)], capture_output=True, env=env)
    calls = [line.split("\0")[:-1] for line in log.read_text().splitlines()]
    assert ["ip", "link", "set", "dev", netdev, "mtu", "9000"] in calls
    assert ["rdma", "link", "add", "rxe0", "type", "rxe", "netdev", netdev] in calls
    assert not marker.exists()


@pytest.mark.skipif(shutil.which("systemd-escape") is None, reason="systemd-escape not installed")
@pytest.mark.parametrize("netdev", ["eth0", "eth-1", "ens1f0np0", "eth0.100", "bond_0", ".x"])
def test_device_units_are_named_as_systemd_names_them(netdev):
    expected = subprocess.run(
        ["systemd-escape", "--path", "--suffix=device", f"/sys/subsystem/net/devices/{netdev}"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    assert device_unit(netdev) == expected
    assert f"Wants={expected}\n" in boot_unit("NIC MTU", "/usr/local/sbin/x", [netdev])


def test_systemd_arguments_escape_specifiers_variables_and_quotes():
    assert systemd_arg("0.0.0.0:9879") == "0.0.0.0:9879"
    assert systemd_arg('a b%h$HOME"\\') == '"a b%%h$$HOME\\"\\\\"'
    with pytest.raises(ValueError):
        systemd_arg("0.0.0.0:9879\nExecStartPre=/bin/id")


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="systemd-analyze not installed")
def test_rendered_units_pass_systemd_analyze_verify(tmp_path):
    units = {
        "rdmaprov-exporter.service": exporter_unit("0.0.0.0:9879"),
        "rdmaprov-mtu.service": boot_unit("NIC MTU", "/bin/true", ["eth-1", "eth0"]),
    }
    for name, text in units.items():
        (tmp_path / name).write_text(text)
    out = subprocess.run(
        ["systemd-analyze", "verify", *(str(tmp_path / n) for n in units)], capture_output=True, text=True
    )
    assert "Failed" not in out.stderr and "Invalid" not in out.stderr and "bad-setting" not in out.stderr, out.stderr


def test_failure_messages_print_data_never_run_it(tmp_path):
    marker = tmp_path / "owned"
    url = f"https://mirror.invalid/$(touch {marker})`touch {marker}`"
    out = _run("sh", f"false || {fail_command(f'cannot download {url}', 'fix builds[0].source')}", tmp_path)
    assert out.returncode == 1 and not marker.exists()
    assert out.stderr.startswith(f"rdmaprov: cannot download {url} on ") and out.stderr.endswith(
        ": fix builds[0].source\n"
    )


def test_a_failing_fetch_of_a_hostile_url_runs_nothing(tmp_path):
    marker = tmp_path / "owned"
    url = f"file:///nonexistent/$(touch {marker})"
    spec = BuildSpec("b", "1", Source("url", url=url, setting="builds[0].source"), "true", "/opt/b")
    out = _run("sh", "set -e\n" + "\n".join(fetch_lines(spec)), tmp_path)
    assert out.returncode == 1 and not marker.exists()
    assert f"cannot download {url}" in out.stderr


def test_build_and_install_scripts_keep_an_odd_prefix_whole(tmp_path):
    marker = tmp_path / "owned"
    (tmp_path / "src" / "t-1").mkdir(parents=True)
    (tmp_path / "src" / "t-1" / "hello").write_text("hi\n")
    tarball = tmp_path / "t.tar"
    subprocess.run(["tar", "-C", str(tmp_path / "src"), "-cf", str(tarball), "t-1"], check=True)
    prefix = tmp_path / "opt x" / f"$(touch {marker})"
    spec = BuildSpec(
        "t", "1", Source("file", path=str(tarball)), 'mkdir -p "$STAGE" && cp hello "$STAGE/"', str(prefix)
    )
    root = tmp_path / "node"
    work = spec.workdir.replace("/var/cache/rdmaprov", str(root))
    Path(work).mkdir(parents=True)
    shutil.copy(tarball, f"{work}/source.tar")
    for script in (build_script(spec), install_script(spec, keep_archive=False)):
        out = _run("sh", script.replace("/var/cache/rdmaprov", str(root)), tmp_path)
        assert out.returncode == 0, out.stderr
    assert (prefix / "current" / "hello").read_text() == "hi\n"
    assert not marker.exists()


def test_nvcc_gencode_keeps_its_double_quoted_form_and_quotes_everything(tmp_path):
    marker = tmp_path / "owned"
    assert sh_double("-gencode=arch=compute_80,code=sm_80") == '"-gencode=arch=compute_80,code=sm_80"'
    value = f'$(touch {marker}) `id` "x" \\'
    assert _run("sh", f"printf %s {sh_double(value)}", tmp_path).stdout == value
    assert not marker.exists()


def test_commands_quote_every_word(tmp_path):
    words = ["ib_write_bw", "-d", "mlx5_0; id", "x y", "'"]
    out = _run("sh", f"printf '%s\\0' {sh_join(words)}", tmp_path)
    assert out.stdout.split("\0")[:-1] == words
    tool = bandwidth_tool(gates_config().ib_write_bw, "ib_write_bw")
    command = sh_join(perftest_words(tool, Endpoint("n", "mlx5_0 $(id)", 1, 3, None), TCP_PORT))
    assert command.split()[2] == "'mlx5_0"


def test_hosts_file_and_known_hosts_lines_hold_only_plain_names():
    assert hosts_file_lines(
        ["gpu1", "gpu2", "gpu3"], {"gpu1": "10.0.0.1", "gpu2": "gpu2.example.com", "gpu3": "fd00::3"}
    ) == ["10.0.0.1 gpu1", "fd00::3 gpu3"]
    assert (
        known_hosts_line(["gpu1", "10.0.0.1", "evil,* ssh-rsa", "host name"], "ssh-ed25519 AAAA")
        == "gpu1,10.0.0.1 ssh-ed25519 AAAA"
    )


def test_a_node_cannot_smuggle_key_options_into_authorized_keys():
    identity = parse_ssh_identity(
        'user command="touch /tmp/x" ssh-ed25519 AAAAC3Nza\nhost ssh-ed25519 AAAAC3Nzb host\n'
    )
    assert identity.user_key is None
    assert identity.host_keys == ("ssh-ed25519 AAAAC3Nzb",)
