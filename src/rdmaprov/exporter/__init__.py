"""Prometheus exporter of RDMA port state and counters (also shipped to nodes as one file)."""
