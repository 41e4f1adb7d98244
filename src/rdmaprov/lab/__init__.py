"""The local lab: Debian 12 or 13 QEMU VMs (SoftRoCE-capable kernel) or systemd-nspawn containers on a
private bridge, with a signed package mirror served from the host, so rdmaprov can be tried and
tested end to end without a real cluster."""
