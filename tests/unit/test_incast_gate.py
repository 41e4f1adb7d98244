"""The incast gate: who sends to whom in which round, the counters read around it (the command run
for real by bash, its parse on real captures: rxe's hw_counters from the lab, an mlx5 port's from
`rdma statistic`, bnxt_en's pause counters from `ethtool -S`), and verdicts computed by hand."""

from __future__ import annotations

import os
import subprocess
import time
from types import SimpleNamespace

import jsonschema
import pytest
from gevent import subprocess as gsubprocess

from rdmaprov.engine.results import RunResult
from rdmaprov.engine.session import CommandResult, HostLost, each
from rdmaprov.health.baselines import apply_baselines, load_parts
from rdmaprov.health.gates.ib_write_bw import bandwidth_tool
from rdmaprov.health.gates.incast import (
    Around,
    congestion,
    counters_command,
    incast_groups,
    incast_tests,
    judge_incast,
    parse_counters,
)
from rdmaprov.health.gates.pairs import rounds
from rdmaprov.health.gates.perftest import Endpoint, Lane, LaneOutput, run_lanes
from rdmaprov.health.gates.result import GateResult
from rdmaprov.health.gates.subject import Subject
from rdmaprov.inventory import load_inventory
from rdmaprov.parsers.counters import loss_growth, parse_port_counters, trouble_growth
from rdmaprov.report.html import render
from rdmaprov.report.junit import junit_xml
from rdmaprov.schemas import load_schema
from tests.conftest import FIXTURES
from tests.support.inventories import gates_config, problems, write
from tests.support.pages import Page
from tests.support.runs import verify_run

QOS = FIXTURES / "roce_qos"
CLIENT = (FIXTURES / "seed" / "ib_write_bw_client_roce_25g.txt").read_text()  # 23.14 Gb/s
BNXT_NAME = "ethtool_S_bnxt_en_pfc_pri_counters_all_zero_ethq.txt"
BNXT = (QOS / BNXT_NAME).read_text()

INVENTORY = """cluster:
  name: c
  gates:
    incast: {{senders: 2{extra}}}
defaults:
  fabric: {fabric}
{qos}groups:
  g:
    hosts:
      n1: {{address: 10.0.0.1}}
      n2: {{address: 10.0.0.2}}
      n3: {{address: 10.0.0.3}}
"""


def _session(tmp_path, fabric: str = "roce", profile: str | None = "dcqcn", extra: str = ""):
    qos = f"  roce_qos: {{profile: {profile}}}\n" if profile else ""
    qos += "  rdma: {netdevs: [eth0]}\n" if fabric == "softroce" else ""
    path = write(tmp_path, INVENTORY.format(fabric=fabric, qos=qos, extra=extra))
    return SimpleNamespace(inventory=load_inventory(path))


# --- who sends to whom ------------------------------------------------------------------------------


def test_groups_fill_senders_plus_one_and_share_the_nodes_left_over():
    hosts = [f"n{i}" for i in range(1, 10)]
    assert incast_groups(hosts[:2], 3) == []
    assert incast_groups(hosts[:3], 3) == [["n1", "n2", "n3"]]  # fewer than senders + 1: one group of all
    assert [len(g) for g in incast_groups(hosts[:8], 3)] == [4, 4]
    assert [len(g) for g in incast_groups(hosts, 3)] == [5, 4]
    assert sum(incast_groups(hosts, 3), []) == hosts


def test_every_node_receives_once_from_its_group_and_groups_run_at_once():
    hosts = [f"n{i}" for i in range(1, 9)]
    tests = incast_tests(hosts, 3)
    assert sorted(t[0] for t in tests) == sorted(hosts)
    assert tests[0] == ("n1", "n2", "n3", "n4") and tests[4] == ("n5", "n6", "n7", "n8")
    batches = rounds(tests)
    assert len(batches) == 4 and all(len(batch) == 2 for batch in batches)  # 8 nodes: 4 rounds, not 8


def test_a_newcomer_receives_from_nodes_already_there_taken_in_turn():
    tests = incast_tests(["n1", "n2", "n3", "n4", "n5"], 2, newcomers=["n4", "n5"])
    assert tests == [("n4", "n1", "n2"), ("n5", "n3", "n1")]
    # one node already there: the newcomers join the groups of all, and every node receives
    assert incast_tests(["n1", "n2", "n3"], 2, newcomers=["n2", "n3"]) == [
        ("n1", "n2", "n3"),
        ("n2", "n1", "n3"),
        ("n3", "n1", "n2"),
    ]


def test_an_incast_subject_names_its_senders_then_the_receiver_and_reads_back():
    subject = Subject.incast(["n2", "n3"], "n1")
    assert str(subject) == "n2,n3 -> n1" and subject.hosts == ["n2", "n3", "n1"]
    assert Subject.parse(str(subject)) == subject
    assert Subject.parse("n1,n2").kind == "job" and Subject.parse("n1 -> n2").kind == "pair"


def test_the_incast_settings_are_off_unless_written_and_checked_in_order(tmp_path):
    unwritten = INVENTORY.replace("  gates:\n    incast: {{senders: 2{extra}}}\n", "")
    assert not load_inventory(write(tmp_path, unwritten.format(fabric="roce", qos=""))).gates.incast.enabled
    gate = _session(tmp_path).inventory.gates.incast
    assert (gate.enabled, gate.senders, gate.fraction, gate.duration_s) == (True, 2, 0.9, 5)
    path = write(tmp_path, INVENTORY.format(fabric="roce", qos="", extra=", duration_s: 30, timeout_s: 20"))
    [problem] = problems(path, require_files=False)
    assert "cluster.gates.incast.duration_s: duration_s 30 is not below timeout_s 20" in problem


# --- the counters read around it ---------------------------------------------------------------------


def test_the_counter_read_runs_in_bash_quotes_the_netdev_and_parses_back(tmp_path):
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "ethtool").write_text(f"#!/bin/sh\n[ \"$2\" = 'ens1;x' ] || exit 1\ncat {QOS / BNXT_NAME}\n")
    (fake / "ethtool").chmod(0o755)
    env = {**os.environ, "PATH": f"{fake}:{os.environ['PATH']}"}
    ran = subprocess.run(["bash", "-c", counters_command(["ens1;x"])], capture_output=True, text=True, env=env)
    assert ran.returncode == 0 and not (tmp_path / "x").exists()
    ports = parse_counters(ran.stdout)
    assert ports["ens1;x"]["rx_pfc_prio3"] == 0 and ports["ens1;x"]["tx_pfc_prio3_pause_us"] == 0
    assert "rx_link_pause" in ports["ens1;x"]
    assert counters_command([]).endswith("2>/dev/null; true")  # no NIC to read: RDMA counters alone


def test_rxes_counters_of_a_policed_link_grew_as_lost_packets():
    before = parse_port_counters((FIXTURES / "lab" / "counters_policed_node1_before.txt").read_text().splitlines())
    after = parse_port_counters((FIXTURES / "lab" / "counters_policed_node1_after.txt").read_text().splitlines())
    lost = loss_growth(before, after)
    assert lost and all(" completer_retry_err " in line or " duplicate_request " in line for line in lost)
    assert set(lost) <= set(trouble_growth(before, after))
    # a receiver-not-ready retry loses nothing; mlx5's names from a real `rdma statistic`
    names = _mlx5()
    grown = {"mlx5_0/1": {n: v + 1 for n, v in names.items()}}
    lost = {line.split()[1] for line in loss_growth({"mlx5_0/1": names}, grown)}
    assert lost == {
        "out_of_sequence", "duplicate_request", "packet_seq_err", "implied_nak_seq_err", "local_ack_timeout_err",
        "roce_adp_retrans", "roce_adp_retrans_to",  # mlx5's adaptive retransmission: a packet was lost
    }  # fmt: skip


def _mlx5() -> dict[str, int]:
    words = (QOS / "rdma_statistic_single_line_mlx5_2_ja_blog.txt").read_text().split()[2:]
    return {name: int(value) for name, value in zip(words[::2], words[1::2], strict=True)}


def _nic() -> dict[str, int]:
    return parse_counters("\n".join(f"ethtool ens1 {line}" for line in BNXT.splitlines()))["ens1"]


def _around(grow: dict[str, dict[str, int]]) -> Around:
    """n1..n3 with an mlx5 port and a bnxt_en NIC each, read before; after, `grow` added on top."""
    before = {host: {"mlx5_0/1": _mlx5(), "ens1": _nic()} for host in ("n1", "n2", "n3")}
    after = {host: {port: dict(values) for port, values in ports.items()} for host, ports in before.items()}
    for host, counters in grow.items():
        for name, by in counters.items():
            port = "ens1" if name in after[host]["ens1"] else "mlx5_0/1"
            before[host][port].setdefault(name, 0)  # counters/ beside hw_counters: link_downed…
            after[host][port][name] = after[host][port].get(name, 0) + by
    return Around(1000.0, before, 1005.0, after)


def _lanes(
    receiver_gbps: float, outputs: tuple[str, str] = (CLIENT, CLIENT), sender_gbps: float = 25.0, server: str = ""
) -> tuple[list[Lane], list[LaneOutput]]:
    receiver = Endpoint("n1", "mlx5_0", 1, 3, receiver_gbps, declared=True, tclass=106)
    lanes = [Lane(i, receiver, Endpoint(h, "mlx5_0", 1, 3, sender_gbps, True, tclass=106), 18800 + i)
             for i, h in enumerate(("n2", "n3"))]  # fmt: skip
    return lanes, [
        LaneOutput(lane, text, 0 if text else 1, server, 0) for lane, text in zip(lanes, outputs, strict=True)
    ]


# --- verdicts ----------------------------------------------------------------------------------------

_DCQCN_WORKING = {
    "n1": {"np_ecn_marked_roce_packets": 1200, "np_cnp_sent": 300},
    "n2": {"rp_cnp_handled": 140, "rx_pfc_prio3": 55},
    "n3": {"rp_cnp_handled": 160, "rx_pfc_prio3": 41},
}


def test_senders_summed_against_the_receivers_port_with_the_congestion_shown(tmp_path):
    lanes, outputs = _lanes(48.0)
    verdict, details = judge_incast(_session(tmp_path), lanes, outputs, _around(_DCQCN_WORKING))
    assert (verdict.status, verdict.measured, verdict.threshold) == ("pass", 46.28, 0.9 * 48)
    assert verdict.reason == (
        "46.28 Gb/s (96.4% of the receiver's port rate) >= 43.2 Gb/s = 0.90 × the receiver's port rate "
        "(mlx5_0 on n1 at 48 Gb/s)"
    )
    assert details["senders"] == {"n2": 23.14, "n3": 23.14} and details["window_s"] == 5.0
    assert details["congestion"] == {
        "n1": {"np_ecn_marked_roce_packets": 1200, "np_cnp_sent": 300},
        "n2": {"rp_cnp_handled": 140, "rx_pfc_prio3": 55},
        "n3": {"rp_cnp_handled": 160, "rx_pfc_prio3": 41},
    }
    short, _ = judge_incast(_session(tmp_path), *_lanes(100.0, sender_gbps=100.0), _around({}))
    assert short.status == "fail" and "46.28 Gb/s (46.3% of the receiver's port rate) < 90 Gb/s" in short.reason
    # two 25G senders cannot fill a 400G port: held to what they can carry together
    wide, _ = judge_incast(_session(tmp_path), *_lanes(400.0), _around({}))
    assert wide.status == "warn" and wide.reason.startswith(
        "46.28 Gb/s (92.6% of the senders' port rates) >= 45 Gb/s = 0.90 × the senders' port rates (n2 25 + n3 25 Gb/s)"
    ), wide.reason


def test_where_no_sender_got_through_the_receiver_is_named_with_what_its_server_said(tmp_path):
    server = " Couldn't listen to port 18800\n Failed to modify QP to RTR"
    verdict, details = judge_incast(_session(tmp_path), *_lanes(25.0, ("", ""), server=server), _around({}))
    assert verdict.reason.startswith(
        "no sender got through to n1 (its first server said: Couldn't listen to port 18800 | Failed to modify QP"
    ), verdict.reason
    assert details["named"] == ["n1", "n2", "n3"]


def test_a_sender_without_a_figure_fails_the_incast_by_name(tmp_path):
    verdict, details = judge_incast(_session(tmp_path), *_lanes(25.0, (CLIENT, "")), _around({}))
    assert verdict.status == "fail" and verdict.reason.startswith("ib_write_bw on n3 gave no result: no output")
    assert details["senders"] == {"n2": 23.14, "n3": None} and details["named"] == ["n3"]


STARVED = (FIXTURES / "lab" / "ib_write_bw_client_rxe0_starved_tcg.txt").read_text()  # 0 iterations


def test_a_sender_that_got_nothing_through_fails_the_incast_by_name_though_the_sum_passes(tmp_path):
    verdict, details = judge_incast(_session(tmp_path), *_lanes(25.0, (CLIENT, STARVED), 25.0), _around({}))
    assert verdict.status == "fail" and verdict.reason.startswith(
        "n3 got nothing through to n1 in its window (0 Gb/s) while n2 did: starved by the others' traffic"
    ), verdict.reason
    assert details["senders"] == {"n2": 23.14, "n3": 0.0} and details["named"] == ["n3"]
    # a trickle beside a full share is starved too (the lab's 0.048 Gb/s against 23.14)
    trickle = (FIXTURES / "softroce-lab" / "ib_write_bw_client_rxe_tcg.txt").read_text()
    verdict, details = judge_incast(_session(tmp_path), *_lanes(25.0, (CLIENT, trickle), 25.0), _around({}))
    assert verdict.status == "fail" and verdict.reason.startswith(
        "n3 got 0.048008 Gb/s through to n1, under a tenth of an even share (11.59 Gb/s) while n2 did"
    ), verdict.reason
    assert details["named"] == ["n3"]
    # one sender gave no figure, the other nothing: no sender got through, and each is said
    verdict, details = judge_incast(_session(tmp_path), *_lanes(25.0, ("", STARVED)), _around({}))
    assert verdict.reason.startswith("no sender got through to n1") and "ib_write_bw on n2 gave no result" in (
        verdict.reason
    )
    assert details["named"] == ["n1", "n2"]
    # every sender at 0: the receiver is the likelier fault, as where none gave a figure
    none, details = judge_incast(_session(tmp_path), *_lanes(25.0, (STARVED, STARVED)), _around({}))
    assert none.status == "fail" and none.reason.startswith("no sender got through to n1"), none.reason
    assert details["named"] == ["n1"]


@pytest.mark.parametrize(
    ("grow", "said"),
    [
        ({"n2": {"rx_pfc_prio0": 77}}, "n2 ens1: rx_pfc_prio0 +77 in 5 s (roce.pause)"),
        ({"n3": {"rx_link_pause": 5}}, "n3 ens1: rx_link_pause +5 in 5 s (roce.pause)"),
        ({"n2": {"link_downed": 1}}, "n2 mlx5_0/1: link_downed +1 in 5 s (rdma.port_errors)"),
        (  # 1 % of the window, no 1 s floor: 0.1 s is 2 % of 5 s
            {"n1": {"tx_pfc_prio3_pause_us": 100_000}},
            "n1 ens1: tx_pfc_prio3_pause_us +0.1 s (2.0 % of the time) in 5 s (roce.pause_time)",
        ),
        ({"n1": {"out_of_sequence": 12}}, "n1: packets lost on a lossless fabric: mlx5_0/1 out_of_sequence +12"),
        (
            {"n1": {"np_ecn_marked_roce_packets": 900}},
            "n1 mlx5_0/1: np_ecn_marked_roce_packets +900 with no np_cnp_sent in 5 s (roce.dcqcn)",
        ),
        ({"n2": {"rp_cnp_ignored": 30}}, "n2 mlx5_0/1: rp_cnp_ignored +30 in 5 s (roce.dcqcn)"),
        (
            {"n1": {"np_ecn_marked_roce_packets": 900, "np_cnp_sent": 80}},
            "n1 sent 80 CNPs but no sender handled one: DCQCN's reaction point is off on n2, n3 "
            "(roce_rp/enable/3), or the CNPs were lost (their priority 6 must not be dropped)",
        ),
    ],
)
def test_what_the_counters_show_under_congestion_fails_naming_the_node(tmp_path, grow, said):
    verdict, details = judge_incast(_session(tmp_path), *_lanes(50.0), _around(grow))
    assert verdict.status == "fail" and verdict.reason.startswith(said), verdict.reason
    assert details["named"] == (["n2", "n3"] if "reaction point" in said else list(grow))
    assert "(senders 46.28 Gb/s: 46.28 Gb/s" in verdict.reason  # the figure stays in the reason


def test_rates_per_hour_and_counters_a_nic_lacks_are_left_alone_in_a_window_of_seconds(tmp_path):
    # symbol_error may grow 120 an hour: one in five seconds is no rate (the periodic check judges it)
    verdict, _ = judge_incast(_session(tmp_path), *_lanes(48.0), _around({"n2": {"symbol_error": 1}}))
    assert verdict.status == "pass", verdict.reason
    # a receiver that counts ECN marks but not the CNPs it sends: nothing said of its CNPs
    around = _around({"n1": {"np_ecn_marked_roce_packets": 500}})
    for reads in (around.before, around.after):
        del reads["n1"]["mlx5_0/1"]["np_cnp_sent"]
    verdict, _ = judge_incast(_session(tmp_path), *_lanes(48.0), around)
    assert verdict.status == "pass", verdict.reason


def test_ecn_under_pfc_only_fails_and_lost_packets_are_only_shown_where_the_fabric_may_drop(tmp_path):
    pfc_only, _ = judge_incast(_session(tmp_path, profile="pfc_only"), *_lanes(50.0), _around(_DCQCN_WORKING))
    assert pfc_only.status == "fail" and "(roce.ecn_activity)" in pfc_only.reason
    lossy = {"n1": {"out_of_sequence": 12}}
    for fabric, profile in (("softroce", "dcqcn"), ("roce", None)):
        verdict, details = judge_incast(_session(tmp_path, fabric, profile), *_lanes(50.0), _around(lossy))
        assert verdict.status != "fail", (fabric, profile, verdict.reason)
        assert details["congestion"]["n1"]["lost"] == ["mlx5_0/1 out_of_sequence +12"]
    infiniband, _ = judge_incast(_session(tmp_path, "infiniband", None), *_lanes(50.0), _around(lossy))
    assert infiniband.status == "fail" and "lossless" in infiniband.reason


def test_a_node_whose_counters_could_not_be_read_fails_the_incast(tmp_path):
    around = _around({})
    del around.after["n3"]
    verdict, _ = judge_incast(_session(tmp_path), *_lanes(50.0), around)
    assert verdict.status == "fail" and verdict.reason.startswith("n3: its counters could not be read")
    assert "n3" not in congestion("n1", ["n2", "n3"], around, 3)


def test_an_incast_result_matches_the_result_schema_and_shows_in_junit(tmp_path):
    lanes, outputs = _lanes(48.0)
    verdict, details = judge_incast(_session(tmp_path), lanes, outputs, _around(_DCQCN_WORKING))
    result = GateResult.of("incast", Subject.incast(["n2", "n3"], "n1"), verdict, details=details)
    doc = RunResult("verify", "inv.yaml", "c", "2026-01-01T00:00:00+00:00", 1.0, [], [], [result]).to_json()
    jsonschema.validate(doc, load_schema("result"))
    assert doc["gates"][0]["subject"] == "n2,n3 -> n1" and doc["exit_code"] == 0
    assert 'classname="incast" name="n2,n3 -&gt; n1"' in junit_xml("c", [], [result])


def test_the_report_counts_a_failed_incast_against_the_node_it_names_not_its_whole_group(tmp_path):
    lanes, outputs = _lanes(48.0)
    verdict, details = judge_incast(_session(tmp_path), lanes, outputs, _around({"n3": {"rx_pfc_prio0": 9}}))
    assert details["named"] == ["n3"]
    doc = verify_run(3, cluster="incast").to_json()
    result = GateResult.of("incast", Subject.incast(["node02", "node03"], "node01"), verdict, details=details)
    doc["gates"] = [{**result.to_json(), "details": {**details, "named": ["node03"]}}]
    page = Page(render(doc))
    assert "failing nodes (how many failures name each): node03 (1)" in page.verdict, page.verdict
    assert "incast node02,node03 -> node01: n3 ens1: rx_pfc_prio0 +9 in 5 s (roce.pause)" in page.verdict
    nodes = next(t for t in page.tables if t.rows[0][0][1] == "node" and t.css == "")
    assert [(row[0][1], row[-1][1]) for row in nodes.rows[1:]] == [("node01", "0"), ("node02", "0"), ("node03", "1")]


# --- the lanes run for real, every "node" this machine ----------------------------------------------

FAKE_PERFTEST = """import socket, sys, time
args = sys.argv[1:]
port = int(args[args.index("-p") + 1])
if args[-1].startswith("-"):  # no server address: the server side
    with socket.create_server(("127.0.0.1", port)) as server:
        server.settimeout(20)
        peer, _ = server.accept()
        peer.recv(1)
    print("server of port", port)
else:
    for _ in range(100):
        try:
            socket.create_connection((args[-1], port), timeout=5).close()
            break
        except OSError:
            time.sleep(0.1)
    sys.stdout.write(open(sys.argv[0] + ".txt").read())
"""


class LocalSession:
    """A session whose every node is this machine: commands run in bash here (gevent's subprocess,
    so that the lanes' server and clients run at once), lanes meet over loopback. `lost` hosts
    raise as a node that stopped answering does."""

    def __init__(self, inventory, path: str, lose: str = "") -> None:
        self.inventory, self.path, self.lose = inventory, path, lose
        self.lost: dict[str, HostLost] = {}
        self.unreachable: dict[str, str] = {}

    def run(self, name: str, command: str, timeout_s: int | None = None) -> CommandResult:
        if name == self.lose:
            raise HostLost(name, "now", "the incast gate", "connection reset")
        env = {**os.environ, "PATH": f"{self.path}:{os.environ['PATH']}"}
        done = gsubprocess.run(["bash", "-c", command], capture_output=True, text=True, env=env, timeout=60)
        return CommandResult(done.returncode == 0, done.stdout, done.stderr)

    def each(self, names, work):
        return each(names, work)


def _local(tmp_path, lose: str = "") -> LocalSession:
    fake = tmp_path / "bin"
    fake.mkdir(exist_ok=True)
    (fake / "perftest.py").write_text(FAKE_PERFTEST)
    (fake / "perftest.py.txt").write_text(CLIENT)
    # named ib_write_bw in its command line, as the gates' stray-server kill matches it
    wrapper = f'#!/bin/bash\nexec -a ib_write_bw /usr/bin/python3 {fake / "perftest.py"} "$@"\n'
    (fake / "ib_write_bw").write_text(wrapper)
    (fake / "ib_write_bw").chmod(0o755)
    text = INVENTORY.format(fabric="roce", qos="", extra="").replace("10.0.0.", "127.0.0.")
    return LocalSession(load_inventory(write(tmp_path, text)), str(fake), lose)


def _local_lanes() -> list[Lane]:
    receiver = Endpoint("n1", "mlx5_0", 1, 3, 25.0)
    return [Lane(i, receiver, Endpoint(h, "mlx5_0", 1, 3, 25.0), 28800 + i) for i, h in enumerate(("n2", "n3"))]


def test_lanes_from_two_client_nodes_into_one_server_run_at_once_and_come_back_in_lane_order(tmp_path):
    tool = bandwidth_tool(_session(tmp_path).inventory.gates.incast, "incast")
    outputs = run_lanes(_local(tmp_path), tool, _local_lanes())
    assert not isinstance(outputs, str), outputs
    assert [o.lane.client.host for o in outputs] == ["n2", "n3"]
    assert all(o.client_status == 0 and " 23.14 " in o.client for o in outputs)
    assert [o.server for o in outputs] == ["server of port 28800", "server of port 28801"]


def test_a_client_node_lost_mid_lanes_is_raised_and_its_server_is_not_waited_for(tmp_path):
    tool = bandwidth_tool(_session(tmp_path).inventory.gates.incast, "incast")
    started = time.monotonic()
    with pytest.raises(HostLost, match="n3 stopped answering"):
        run_lanes(_local(tmp_path, lose="n3"), tool, _local_lanes())
    assert time.monotonic() - started < 10  # the server of n3's lane was killed, not waited 10 s for


def test_an_incasts_baseline_is_its_receivers_whichever_nodes_sent(tmp_path, monkeypatch):
    """The groups change with the nodes selected (--limit, a node down): node1 taking 2 senders'
    writes keeps one baseline whether node2 and node3 or node4 and node5 sent."""
    monkeypatch.setenv("RDMAPROV_STATE", str(tmp_path))
    settings = gates_config({"baseline": {"runs": 1}}).baseline

    def run(senders: list[str], gbps: float) -> GateResult:
        result = GateResult("incast", Subject.incast(senders, "node1"), True, "x", gbps, 100.0, "Gb/s")
        apply_baselines([result], "prod", settings)
        return result

    run(["node2", "node3"], 380.0)
    later = run(["node4", "node5"], 370.0)
    assert "against its baseline 380 Gb/s" in later.reason and not later.baseline["drift"], later.reason
    run(["node2", "node3", "node4"], 390.0)  # three senders: a part of its own
    assert sorted(load_parts("prod")) == ["incast into node1 from 2 senders", "incast into node1 from 3 senders"]
