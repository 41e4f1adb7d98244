"""The workload gate: the site's own command across the nodes, its figure read by the inventory's
pattern from real benchmark and training logs, its transport from NCCL's own lines, each process
told its place in the job whatever launched it."""

from __future__ import annotations

import shlex
import subprocess
from pathlib import Path
from types import SimpleNamespace

import pytest

from rdmaprov.health.baselines import apply_baselines
from rdmaprov.health.gates.all_reduce import transport_checked
from rdmaprov.health.gates.bandwidth import Verdict
from rdmaprov.health.gates.launch import Launcher, SlurmLauncher
from rdmaprov.health.gates.result import GateResult
from rdmaprov.health.gates.subject import Subject
from rdmaprov.health.gates.workload import PLACE, judge_figure, last_words, transport_required, workload_job
from rdmaprov.inventory import load_inventory
from rdmaprov.inventory.gates import BaselineConfig, Figure
from rdmaprov.parsers.figure import TAKE, Figures, pattern_problem, read_figures
from rdmaprov.parsers.mpi import mpirun_exit_code
from rdmaprov.parsers.nccl_debug import parse_nccl_transport
from tests.support.inventories import problems, write

FIXTURES = Path(__file__).parents[1] / "fixtures"
BENCHMARK = (FIXTURES / "seed" / "erdma_e2e_benchmark_output.txt").read_text()
TORCHRUN = (FIXTURES / "seed" / "torchrun_cifar10_2node_rank0_epochs_accuracy.txt").read_text()
SOCKETS = (FIXTURES / "gpu-h100" / "all_reduce_perf_nccl_debug_info.txt").read_text()

INVENTORY = """cluster:
  name: lab
  gates:
    all_reduce: {{launcher_ifname: eth0}}
    workload:
{workload}
{slurm}defaults:
  fabric: softroce
  rdma: {{netdevs: [eth0], devices: [rxe0]}}
  nccl: {{env: {{NCCL_SOCKET_IFNAME: eth0}}}}
hosts:
  node1: {{address: 10.79.41.11}}
  node2: {{address: 10.79.41.12}}
"""
COMMAND = "      command: torchrun --nnodes=$RDMAPROV_NNODES --node-rank=$RDMAPROV_NODE_RANK 'bench mark.py' $(id)\n"
FIGURE = "      figure: {pattern: 'p50: \\S+ (?P<value>[0-9.]+)/s', unit: samples/s, min: 1000}\n"


def _inventory(tmp_path, workload: str = COMMAND + FIGURE, slurm: bool = False):
    text = INVENTORY.format(
        workload=workload.rstrip("\n"), slurm="  slurm: {enabled: true, controller: node1}\n" if slurm else ""
    )
    return write(tmp_path, text)


def _figure(**changes) -> Figure:
    settings = {"pattern": r"p50: \S+ (?P<value>[0-9.]+)/s", "unit": "samples/s", "better": "higher", "take": "median"}
    settings |= {"minimum": None, "maximum": None} | changes
    return Figure(**settings)


# --- reading the figure ----------------------------------------------------------------------------


def test_the_benchmark_figure_is_read_by_the_inventory_pattern_from_the_erdma_guide_output():
    assert read_figures(BENCHMARK, r"p50: \S+ (?P<value>[0-9.]+)/s").values == [1306.0]
    every = read_figures(BENCHMARK, r"p\d\d: \S+ ([0-9.]+)/s").values  # no name: the first group
    assert every == [1306.0, 1304.0, 1302.0, 1302.0]
    assert (TAKE["min"](every), TAKE["median"](every), TAKE["first"](every)) == (1302.0, 1303.0, 1306.0)


def test_a_training_log_gives_one_figure_per_epoch_and_take_chooses_the_run_s():
    accuracy = read_figures(TORCHRUN, r"Accuracy: (?P<value>[0-9.]+)").values
    assert accuracy == [0.8046, 0.856] and TAKE["last"](accuracy) == 0.856
    words = read_figures(TORCHRUN, r"The number of (\w+) dataset")  # words are not figures
    assert words.values == [] and words.rejected == ["training", "test"]
    assert read_figures("loss nan\nloss inf\nloss 0.5\nloss 0,5\n", r"loss (\S+)").values == [0.5]
    # a group that caught its unit with the number, as `p50: (\S+)` does on "0.098s"
    assert read_figures(BENCHMARK, r"p50: (\S+)").rejected == ["0.098s"]


def test_a_pattern_that_cannot_read_a_number_says_why():
    assert "no group" in pattern_problem(r"p50: \S+ [0-9.]+/s")
    assert pattern_problem(r"p50: (?P<value>[0-9.]+").startswith("not a regular expression")
    assert pattern_problem(r"(?P<value>\d+)") is None


def test_the_figure_is_held_to_its_bounds_with_the_sums_shown():
    passed = judge_figure(Figures([1306.0], []), _figure(minimum=1000.0))
    assert (passed.status, passed.measured, passed.threshold) == ("pass", 1306.0, 1000.0)
    assert passed.reason == "1306 samples/s (the one match) within min 1000 samples/s"
    low = judge_figure(Figures([1306.0, 1302.0, 1304.0], []), _figure(minimum=1305.0))
    assert (low.status, low.reason) == ("fail", "1304 samples/s (median of 3 matches) < min 1305 samples/s")
    step = judge_figure(Figures([0.098], []), _figure(unit="s", better="lower", maximum=0.09))
    assert (step.status, step.threshold, step.reason) == ("fail", 0.09, "0.098 s (the one match) > max 0.09 s")
    free = judge_figure(Figures([0.098], []), _figure(unit="s", better="lower"))
    assert free.passed and "no bound set: only its baseline judges it" in free.reason
    none = judge_figure(Figures([], ["0.098s"]), _figure())
    assert none.status == "fail" and "read no plain number in the output: it caught 1, e.g. '0.098s'" in none.reason


# --- what NCCL used --------------------------------------------------------------------------------


def test_the_transport_of_a_real_torchrun_passes_and_a_socket_fallback_names_host_and_rank(tmp_path):
    session = SimpleNamespace(inventory=load_inventory(_inventory(tmp_path)))
    ok = Verdict("pass", 1306.0, 1000.0, "samples/s", "1306 samples/s")
    rdma = parse_nccl_transport(TORCHRUN)
    assert rdma.networks == {"gpu-pod0": {"IBext"}} and rdma.ranks == {"gpu-pod0": {0}}
    assert transport_required(rdma, transport_checked(session, ["node1"], rdma, ok)) == ok
    sockets = parse_nccl_transport(SOCKETS)
    verdict = transport_required(sockets, transport_checked(session, ["node1"], sockets, ok))
    assert verdict.status == "fail"
    assert verdict.reason.startswith("NCCL used TCP sockets, not RDMA, on vm [rank 0] (NET/IB: no device found)")


def test_ranks_are_named_in_the_world_communicator_not_in_a_subgroup():
    """A framework's subgroups number their ranks from 0 again: a host is named with its ranks in
    the largest communicator (the lines as NCCL 2.18 prints them in the IIJ torchrun log)."""
    [world] = [line for line in TORCHRUN.splitlines() if "Init START" in line]
    assert " rank 0 nranks 2 " in world
    subgroup = world.replace("comm 0x55f6bc9e0030 rank 0 nranks 2", "comm 0x55f6bc9e0999 rank 5 nranks 1")
    found = parse_nccl_transport(TORCHRUN + subgroup + "\n")
    assert found.ranks == {"gpu-pod0": {0}} and found.named(["gpu-pod0"]) == "gpu-pod0 [rank 0]"


def test_a_log_without_nccl_lines_fails_unless_the_workload_needs_no_nccl():
    ok = Verdict("pass", 2.0, None, "s", "2 s")
    silent = parse_nccl_transport('{"probe": "allreduce", "size": 4194304, "time_us": 812.5}\n')
    failed = transport_required(silent, ok)
    assert failed.status == "fail" and "no NCCL line says which network it used" in failed.reason
    assert "require_rdma: false" in failed.reason
    assert transport_required(silent, Verdict("fail", None, None, "", "it crashed")).reason == "it crashed"


def test_a_failed_run_quotes_the_program_s_last_words_not_mpirun_s_box_or_nccl_s_info():
    log = (FIXTURES / "public" / "nccl_info_ib_no_device_socket_fallback_mpirun_nonzero_exit.txt").read_text()
    assert last_words(log) == (
        "The local rank is: 0 | The local rank is: 1 | "
        "Failed: Cuda error example_allreduce_2comms.cu:107 'invalid device ordinal'"
    )
    assert mpirun_exit_code(log) == 1 and mpirun_exit_code(TORCHRUN) is None
    assert last_words("") == "no output"
    # a real failed run on the lab: Open MPI 4.1's [host:pid] note and both of its boxes left out
    lab = (FIXTURES / "lab" / "mpirun_workload_exit3_openmpi4_debian12.txt").read_text()
    assert (last_words(lab), mpirun_exit_code(lab)) == ("loading the model | no such file: model.pt", 3)
    # a rule the program printed itself hides nothing
    assert last_words("step 1\n" + "-" * 40 + "\nRuntimeError: NCCL error\n") == "step 1 | RuntimeError: NCCL error"
    # nor does a box of the program's own whose words merely contain a launcher's name
    rule = "-" * 40
    ruled = f"{rule}\nTraining aborted: loss is NaN (sorted batches)\n{rule}\n"
    assert last_words(ruled) == "Training aborted: loss is NaN (sorted batches)"


def test_a_program_that_never_started_is_explained_by_mpirun_s_own_report():
    """Real Open MPI 4.1.4 logs where the program printed nothing: before, "no output" (a missing
    executable) or three lines cut from the middle of a box (no SSH agent, as on the lent H100)."""
    missing = (FIXTURES / "lab" / "mpirun_no_such_executable_openmpi4_debian12.txt").read_text()
    assert last_words(missing) == (
        "Open MPI: mpirun was unable to launch the specified application as it could not access or execute an "
        "executable: Executable: /nonexistent/train.sh Node: vm while attempting to start process rank 0."
    )
    agent = (FIXTURES / "lab" / "mpirun_rsh_agent_not_found_openmpi4_debian12.txt").read_text()
    assert last_words(agent) == (
        'Open MPI: The value of the MCA parameter "plm_rsh_agent" was set to a path that could not be found: '
        "plm_rsh_agent: ssh-missing-xyz Please either unset the parameter, or check that the path is correct"
    )
    # the program's own words, where there are any, still come first; a long report is cut
    assert last_words("loading\n" + missing) == "loading"
    assert len(last_words(missing.replace("vm", "vm" * 400))) == len("Open MPI: ") + 400


# --- the inventory ---------------------------------------------------------------------------------


def test_the_workload_section_is_typed_and_off_unless_written(tmp_path):
    gate = load_inventory(_inventory(tmp_path)).gates.workload
    assert (gate.enabled, gate.per_node, gate.require_rdma, gate.master_port) == (True, 1, True, 29500)
    assert gate.figure == _figure(minimum=1000)
    unwritten = write(tmp_path, INVENTORY.format(workload="", slurm="").replace("    workload:\n\n", ""))
    assert "workload" not in unwritten.read_text()
    assert load_inventory(unwritten).gates.workload.enabled is False
    # turned off, its command may go (an unwritten one stays off: not made from the defaults)
    off = load_inventory(_inventory(tmp_path, "      enabled: false\n      per_node: 8\n"))
    assert (off.gates.workload.enabled, off.gates.workload.command) == (False, "")


@pytest.mark.parametrize(
    ("workload", "message"),
    [
        (
            COMMAND + "      figure: {pattern: 'p50: [0-9.]+/s', unit: samples/s}\n",
            "cluster.gates.workload.figure.pattern: the figure's pattern cannot read a number: it has no group",
        ),
        (
            COMMAND + "      figure: {pattern: '(?P<value>[0-9.]+', unit: s}\n",
            "the figure's pattern cannot read a number: not a regular expression",
        ),
        (
            COMMAND + "      figure: {pattern: '([0-9.]+)/s', unit: samples/s, min: 1300, max: 1200}\n",
            "cluster.gates.workload.figure.max: max 1200 is below min 1300: no figure could pass",
        ),
        (
            COMMAND + "      hosts: [node1, node9]\n",
            "workload.hosts names 'node9', which is not a host of this inventory",
        ),
        ("      per_node: 8\n", "cluster.gates.workload: missing required key 'command'"),
        ("      enabled: true\n", "cluster.gates.workload: missing required key 'command'"),
        (COMMAND + "      figure: {pattern: '([0-9.]+)', unit: s, max: .nan}\n", "max"),
    ],
)
def test_a_workload_that_could_not_be_judged_is_refused_naming_the_place(tmp_path, workload, message):
    found = problems(_inventory(tmp_path, workload))
    assert any(message in problem for problem in found), found
    assert all("inv.yaml" in problem for problem in found), found


def test_an_enabled_that_is_no_boolean_is_told_once_not_also_as_a_missing_command(tmp_path):
    found = problems(_inventory(tmp_path, "      enabled: 'no'\n"))
    assert len(found) == 1 and "cluster.gates.workload.enabled: expected true or false" in found[0], found


# --- the job ---------------------------------------------------------------------------------------


def test_the_command_reaches_each_process_as_one_quoted_word_with_its_place_in_the_job(tmp_path):
    inventory = load_inventory(_inventory(tmp_path, slurm=True))
    session = SimpleNamespace(inventory=inventory)
    job = workload_job(session, ["node1", "node2"], inventory.gates.workload, gpus=8)
    assert job.program == ["sh", "-c", PLACE + inventory.gates.workload.command] and job.ranks == 2
    assert job.env["NCCL_DEBUG"] == "INFO" and job.env["NCCL_SOCKET_IFNAME"] == "eth0"
    assert (job.env["RDMAPROV_NNODES"], job.env["RDMAPROV_MASTER_ADDR"]) == ("2", "10.79.41.11")
    mpirun = Launcher(session).job_command(job, inventory.gates.all_reduce, 600)
    srun = SlurmLauncher(session).job_command(job, inventory.gates.all_reduce, 600)
    for line in (mpirun, srun):  # the site's line is one word to the node's shell: $(id) runs only in sh -c
        assert shlex.split(line)[-1] == PLACE + inventory.gates.workload.command
    assert "--job-name=rdmaprov-workload-" in srun and "--gres=gpu:8" in srun


@pytest.mark.parametrize(
    ("launcher_env", "place"),
    [
        ({"OMPI_COMM_WORLD_RANK": "5"}, "5 2"),  # mpirun, 2 per node: the third node
        ({"PMIX_RANK": "1"}, "1 0"),
        ({"SLURM_PROCID": "3", "SLURM_NODEID": "1"}, "3 1"),  # srun says the node itself
        ({}, "0 0"),
    ],
)
def test_each_process_is_told_its_rank_and_node_rank_whatever_launched_it(launcher_env, place):
    script = PLACE + 'echo "$RDMAPROV_RANK $RDMAPROV_NODE_RANK"'
    env = {"PATH": "/usr/bin:/bin", "RDMAPROV_NPROC_PER_NODE": "2", **launcher_env}
    assert subprocess.run(["sh", "-c", script], env=env, capture_output=True, text=True).stdout.strip() == place


def test_under_srun_the_master_is_slurm_s_first_node_at_the_address_slurm_has(tmp_path):
    """srun numbers the nodes in Slurm's order, which need not be the inventory's: the master is
    the job's first node, its NodeAddr read from scontrol (here a scontrol answering with the lab
    controller's real `scontrol -o show node` lines)."""
    nodes = FIXTURES / "slurm" / "scontrol_show_node_lab_node2_drained_by_rdmaprov.txt"
    scontrol = tmp_path / "scontrol"
    scontrol.write_text(
        '#!/bin/sh\n[ "$1 $2" = "show hostnames" ] && { echo node2; echo node1; exit; }\n'
        f'[ "$1 $2" = "show node" ] && grep "^NodeName=$3 " {nodes}\n'
    )
    scontrol.chmod(0o755)
    env = {"PATH": f"{tmp_path}:/usr/bin:/bin", "RDMAPROV_NPROC_PER_NODE": "1", "RDMAPROV_MASTER_ADDR": "10.79.41.11"}
    script = PLACE + 'echo "$RDMAPROV_NODE_RANK $RDMAPROV_MASTER_ADDR"'
    slurm = {**env, "SLURM_JOB_NODELIST": "node[1-2]", "SLURM_PROCID": "0", "SLURM_NODEID": "0"}
    assert subprocess.run(["sh", "-c", script], env=slurm, capture_output=True, text=True).stdout == "0 10.79.41.12\n"
    assert subprocess.run(["sh", "-c", script], env=env, capture_output=True, text=True).stdout == "0 10.79.41.11\n"


# --- its own past ----------------------------------------------------------------------------------


def test_a_lower_is_better_figure_drifts_when_it_rises(tmp_path, monkeypatch):
    monkeypatch.setenv("RDMAPROV_STATE", str(tmp_path))
    settings = BaselineConfig(True, 0.05, 1, "warn", 0.25)

    def run(step_s: float) -> GateResult:
        result = GateResult.of(
            "workload",
            Subject.parse("node1,node2"),
            Verdict("pass", step_s, None, "s", f"{step_s} s"),
            details={"better": "lower"},
        )
        apply_baselines([result], "lab", settings)
        return result

    assert run(0.098).baseline["value"] == 0.098
    assert run(0.09).status == "pass"  # faster
    slower = run(0.2)
    assert slower.status == "warn" and "above its baseline 0.098 s" in slower.reason
