"""The exporter over a fake sysfs tree built from the irdma captures: exact metric lines."""

from __future__ import annotations

from pathlib import Path

from prometheus_client import CollectorRegistry, generate_latest

from rdmaprov.exporter.rdma_exporter import RdmaCollector, sanitise
from tests.conftest import FIXTURES
from tests.support.promtool import promtool_check

SEED = FIXTURES / "seed"


def _sysfs(root: Path) -> Path:
    """/sys/class/infiniband/irdma0/ports/1 with the captured hw_counters names and values."""
    port = root / "irdma0" / "ports" / "1"
    (port / "hw_counters").mkdir(parents=True)
    (port / "counters").mkdir()
    (port / "state").write_text("4: ACTIVE\n")
    (port / "phys_state").write_text("5: LinkUp\n")
    (port / "rate").write_text("25 Gb/sec (1X EDR)\n")
    (port / "link_layer").write_text("Ethernet\n")
    names = (SEED / "hw_counters_ls_irdma0.txt").read_text().split()
    values = dict(
        line.split(": ")
        for line in (SEED / "hw_counters_rdma_values_irdma0.txt").read_text().splitlines()
        if ": " in line
    )
    for name in names:
        (port / "hw_counters" / name).write_text(values.get(name, "0") + "\n")
    (port / "counters" / "port_xmit_data").write_text("123456789\n")
    (port / "counters" / "port_rcv_data").write_text("1000\n")
    (port / "counters" / "port_xmit_packets").write_text("1000\n")
    return root


def _scrape(root: Path) -> tuple[list[str], RdmaCollector]:
    registry = CollectorRegistry()
    collector = RdmaCollector(str(root))
    registry.register(collector)
    return generate_latest(registry).decode().splitlines(), collector


def _samples(lines: list[str]) -> dict[str, float]:
    """Each series (name and labels) with its value: how prometheus_client spells a float is its own
    (0.25 writes 2.5e+010 where 0.26 writes 2.5e+10; Prometheus reads both), the value is ours."""
    return {series: float(value) for series, value in (line.rsplit(" ", 1) for line in lines if line[:1] != "#")}


def test_every_counter_exported_with_labels_and_types(tmp_path):
    lines, _ = _scrape(_sysfs(tmp_path))
    samples = _samples(lines)
    assert samples['rdma_port_state{device="irdma0",port="1"}'] == 4
    assert samples['rdma_port_active{device="irdma0",port="1"}'] == 1
    assert samples['rdma_port_physical_state{device="irdma0",port="1"}'] == 5
    assert samples['rdma_port_rate_bytes_per_second{device="irdma0",port="1"}'] == 25e9 / 8
    assert samples['rdma_port_info{device="irdma0",link_layer="Ethernet",port="1"}'] == 1
    assert samples['rdma_hw_counters_iwinrdmawrites_total{device="irdma0",port="1"}'] == 141075419
    assert samples['rdma_hw_counters_iwoutrdmawrites_total{device="irdma0",port="1"}'] == 137113821
    types = {line.split()[2].removesuffix("_total"): line.split()[3] for line in lines if line.startswith("# TYPE")}
    assert types["rdma_hw_counters_iwinrdmawrites"] == "counter"
    assert types["rdma_hw_counters_lifespan"] == "gauge"  # a setting, not a running count
    assert samples['rdma_counters_port_xmit_data_bytes_total{device="irdma0",port="1"}'] == 123456789 * 4
    names = (SEED / "hw_counters_ls_irdma0.txt").read_text().split()
    exported = {line.split("{")[0] for line in lines if line.startswith("rdma_hw_counters_")}
    assert len(exported) == len(names) == 47
    assert "rdma_exporter_read_errors_total 0.0" in lines


def test_garbage_and_vanished_files_are_skipped_and_counted(tmp_path):
    root = _sysfs(tmp_path)
    port = root / "irdma0" / "ports" / "1"
    (port / "hw_counters" / "tcpInSegs").write_text("not a number\n")
    (port / "hw_counters" / "tcpOutSegs").unlink()
    (port / "hw_counters" / "tcpOutSegs").mkdir()  # unreadable as a file
    lines, collector = _scrape(root)
    assert not any(line.startswith("rdma_hw_counters_tcpinsegs_total") for line in lines)
    assert "rdma_exporter_read_errors_total 2.0" in lines
    assert any(line.startswith("rdma_exporter_scrape_duration_seconds ") for line in lines)
    # read at scrape time: a new value shows on the next scrape
    (port / "hw_counters" / "tcpInSegs").write_text("42\n")
    lines, _ = _scrape(root)
    assert 'rdma_hw_counters_tcpinsegs_total{device="irdma0",port="1"} 42.0' in lines


def test_data_counters_in_bytes_and_rate_in_bytes_per_second(tmp_path):
    """The kernel keeps port_xmit_data/port_rcv_data in 4-octet words and the rate in Gb/sec: the
    exporter publishes bytes and bytes/s, named so; packet counters stay as they are."""
    lines, _ = _scrape(_sysfs(tmp_path))
    samples = _samples(lines)
    assert samples['rdma_counters_port_rcv_data_bytes_total{device="irdma0",port="1"}'] == 4000
    assert samples['rdma_counters_port_xmit_packets_total{device="irdma0",port="1"}'] == 1000
    assert samples['rdma_port_rate_bytes_per_second{device="irdma0",port="1"}'] == 3.125e9
    assert (
        "# HELP rdma_counters_port_rcv_data_bytes_total counters/port_rcv_data of the port (sysfs), in bytes: "
        "converted from 4-octet words (x4)."
    ) in lines
    old = ("rdma_port_rate_bits_per_second", "rdma_counters_port_xmit_data_total", "rdma_counters_port_rcv_data_total")
    assert not [line for line in lines if any(name in line for name in old)]


def test_promtool_finds_nothing_to_lint(tmp_path):
    """The real rendered scrape (every irdma counter, the data counters, the rate) in base units."""
    lines, _ = _scrape(_sysfs(tmp_path))
    assert promtool_check("\n".join(lines) + "\n") == (0, "")


def test_sanitise():
    assert sanitise("RxECNMrkd") == "rxecnmrkd"
    assert sanitise("rx-write-requests") == "rx_write_requests"
    assert sanitise("..weird name!") == "weird_name"
