"""rdmaprov: declarative provisioning and day-2 checks for RDMA GPU training clusters."""

__version__ = "0.1.0"
