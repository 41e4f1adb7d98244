"""RDMA port state and every counter under sysfs, for Prometheus, read at scrape time.

This file is installed on the nodes as it is (by the exporter deploy) and needs only Python 3 and
prometheus_client (Debian/Ubuntu python3-prometheus-client, EPEL python3-prometheus_client):
keep it free of other imports.

Per device and port: state and physical state (the kernel's numeric codes), rate, link layer,
and every file under counters/ and hw_counters/ as `rdma_counters_<name>_total` and
`rdma_hw_counters_<name>_total`. A counter file that vanishes or holds garbage is skipped and
counted in `rdma_exporter_read_errors_total`; a scrape never fails because of sysfs content.

Values are in Prometheus' base units, so `rate()` and `promtool check metrics` need no footnotes:
the port rate as `rdma_port_rate_bytes_per_second` (the kernel's Gb/sec divided by 8), and
counters/port_xmit_data and counters/port_rcv_data, which the kernel keeps in 4-octet words
(InfiniBand PortXmitData/PortRcvData; Documentation/ABI/stable/sysfs-class-infiniband), times 4
as `rdma_counters_port_xmit_data_bytes_total` and `rdma_counters_port_rcv_data_bytes_total`, as
node_exporter's InfiniBand collector does. Every other counter keeps its unit and name.
"""

from __future__ import annotations

import argparse
import os
import re
import time
from collections.abc import Iterator

from prometheus_client.core import REGISTRY, CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

SYSFS = "/sys/class/infiniband"
# Kernel files that hold a setting or a level, not a running count: exported as gauges.
NOT_MONOTONIC = {"lifespan", "resp_cqe_error_max", "req_cqe_error_max"}
# counters/ files in units of 4 octets (the data counters; every other counters/ file counts packets
# or events): exported times 4, named bytes, so that rate() is bytes per second.
FOUR_OCTET_WORDS = {"port_xmit_data", "port_rcv_data"}


def sanitise(name: str) -> str:
    """A sysfs file name as a Prometheus metric-name part: [a-zA-Z0-9_], lower case."""
    cleaned = re.sub(r"[^a-zA-Z0-9_]", "_", name).strip("_").lower()
    return re.sub(r"_+", "_", cleaned) or "unnamed"


def _read(path: str) -> str | None:
    try:
        with open(path, encoding="ascii", errors="replace") as handle:
            return handle.read().strip()
    except OSError:
        return None


class RdmaCollector(Collector):
    """Reads sysfs on every collect(); keeps only the error count between scrapes."""

    def __init__(self, root: str = SYSFS) -> None:
        self.root = root
        self.errors = 0

    def _listdir(self, path: str) -> list[str]:
        try:
            return sorted(os.listdir(path))
        except OSError:
            return []

    def _number(self, path: str) -> int | None:
        text = _read(path)
        if text is None or not re.fullmatch(r"\d+", text):
            self.errors += 1
            return None
        return int(text)

    def collect(self) -> Iterator:
        started = time.monotonic()
        labels = ["device", "port"]
        state = GaugeMetricFamily(
            "rdma_port_state", "Port logical state (kernel code: 1 DOWN, 2 INIT, 3 ARMED, 4 ACTIVE).", labels=labels
        )
        up = GaugeMetricFamily("rdma_port_active", "1 when the port is ACTIVE.", labels=labels)
        phys = GaugeMetricFamily(
            "rdma_port_physical_state",
            "Port physical state (kernel code: 5 LinkUp, 3 Disabled, 2 Polling...).",
            labels=labels,
        )
        rate = GaugeMetricFamily(
            "rdma_port_rate_bytes_per_second",
            "Port rate as the kernel reports it, converted from Gb/sec to bytes per second.",
            labels=labels,
        )
        info = GaugeMetricFamily("rdma_port_info", "Port attributes as labels.", labels=labels + ["link_layer"])
        families: dict[tuple[str, str], CounterMetricFamily | GaugeMetricFamily] = {}
        for device in self._listdir(self.root):
            ports_dir = os.path.join(self.root, device, "ports")
            for port in self._listdir(ports_dir):
                base = os.path.join(ports_dir, port)
                values = [device, port]
                code = self._state_code(os.path.join(base, "state"))
                if code is not None:
                    state.add_metric(values, code)
                    up.add_metric(values, 1 if code == 4 else 0)
                phys_code = self._state_code(os.path.join(base, "phys_state"))
                if phys_code is not None:
                    phys.add_metric(values, phys_code)
                rate_text = _read(os.path.join(base, "rate")) or ""
                match = re.match(r"([\d.]+)\s*Gb/sec", rate_text)
                if match:
                    rate.add_metric(values, float(match.group(1)) * 1e9 / 8)
                info.add_metric(values + [_read(os.path.join(base, "link_layer")) or ""], 1)
                for group in ("counters", "hw_counters"):
                    self._counters(families, group, os.path.join(base, group), values)
        yield from (state, up, phys, rate, info)
        yield from families.values()
        yield CounterMetricFamily(
            "rdma_exporter_read_errors", "sysfs files that could not be read or parsed, since start.", value=self.errors
        )
        yield GaugeMetricFamily(
            "rdma_exporter_scrape_duration_seconds",
            "Time this scrape spent reading sysfs.",
            value=time.monotonic() - started,
        )

    def _state_code(self, path: str) -> int | None:
        text = _read(path)
        match = re.match(r"(\d+)\s*:", text or "")
        if not match:
            if text is not None:
                self.errors += 1
            return None
        return int(match.group(1))

    def _counters(self, families: dict, group: str, directory: str, values: list[str]) -> None:
        """One family per file, as bytes where the kernel counts 4-octet words (FOUR_OCTET_WORDS)."""
        for name in self._listdir(directory):
            value = self._number(os.path.join(directory, name))
            if value is None:
                continue
            metric = f"rdma_{group}_{sanitise(name)}"
            doc = f"{group}/{name} of the port (sysfs)."
            if group == "counters" and name in FOUR_OCTET_WORDS:
                metric, value = f"{metric}_bytes", value * 4
                doc = f"{group}/{name} of the port (sysfs), in bytes: converted from 4-octet words (x4)."
            key = (group, metric)
            if key not in families:
                if name in NOT_MONOTONIC:
                    families[key] = GaugeMetricFamily(metric, doc, labels=["device", "port"])
                else:
                    families[key] = CounterMetricFamily(metric, doc, labels=["device", "port"])
            families[key].add_metric(values, value)


def serve(listen: str, root: str = SYSFS) -> None:
    """Serve /metrics on ADDR:PORT until killed."""
    from prometheus_client import start_http_server

    address, _, port = listen.rpartition(":")
    REGISTRY.register(RdmaCollector(root))
    start_http_server(int(port), addr=address or "0.0.0.0")
    while True:
        time.sleep(3600)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="rdmaprov exporter", description="Export RDMA port state and counters for Prometheus."
    )
    parser.add_argument("--listen", default="0.0.0.0:9879", help="ADDR:PORT to serve /metrics on")
    parser.add_argument("--sysfs", default=SYSFS, help="the infiniband sysfs class directory (for tests)")
    args = parser.parse_args(argv)
    if not re.fullmatch(r"[^:]*:\d+", args.listen):
        parser.error(f"--listen {args.listen}: give ADDR:PORT, e.g. 0.0.0.0:9879")
    serve(args.listen, args.sysfs)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
