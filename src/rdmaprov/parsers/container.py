"""What a container lacked, read from what podman and a perftest program inside it printed: the
image, the program, the RDMA device, the verbs provider for the HCA, or locked memory. Each
message is the one these tools print (tests/fixtures/containers/, captured on the lab's VMs).
The gate starts its containers with no flags of their own, so a device or memlock missing in
them means the node's containers.conf drop-in is missing or was edited."""

from __future__ import annotations

import re

_DRIVER = re.compile(r"couldn't load driver '(lib[\w-]+?)-rdmav\d+\.so'")
_NO_PROGRAM = re.compile(r"executable file `([^`]+)` not found")
_NO_DEVICES = ("Did not detect devices", "Unable to find the Infiniband/RoCE device", "No IB devices found")
_PUT_BACK = "rdmaprov apply --tags containers puts back the drop-in 50-rdmaprov.conf that gives it"


def provider_name(device: str) -> str:
    """The verbs provider a kernel-named RDMA device asks for: mlx5_0 → mlx5, rxe0 → rxe, bnxt_re1
    → bnxt_re (the library is lib<provider>-rdmavNN.so). A renamed device (mlx5_bond_0, rocep1s0f0)
    gives a name that is no provider's: callers use it only when libibverbs printed that name."""
    return re.sub(r"_?\d+$", "", device)


def _no_provider(text: str, device: str | None, image: str) -> str | None:
    """The image's verbs providers, when libibverbs found a device but could load none for it."""
    drivers = set(_DRIVER.findall(text))
    if not drivers:
        return None
    wanted = f"lib{provider_name(device)}" if device else ""
    loaded = f"libibverbs could not load {wanted}-rdmav*.so" if wanted in drivers else "no provider loaded"
    return (
        f"the image {image} has no verbs provider for {device or 'the HCA'} ({loaded}): install rdma-core's "
        "providers in it (ibverbs-providers; libibverbs on RHEL)"
    )


def container_lack(text: str, image: str, device: str | None = None) -> str | None:
    """What the container lacked for a perftest run on `device` (None: not known), or None when
    its output says nothing of the kind (a network or fabric failure, judged elsewhere)."""
    if "image not known" in text:
        return f"the image {image} is not on the node: pull or load it on every node first (the gate never pulls)"
    program = _NO_PROGRAM.search(text)
    if program:
        return f"the image {image} has no {program.group(1)}: install perftest in it"
    if "cannot open sd-bus" in text:
        return "podman cannot reach D-Bus for the container's cgroup: start dbus on the node (apply does)"
    if any(words in text for words in _NO_DEVICES):
        return _no_provider(text, device, image) or f"the container sees no RDMA device: {_PUT_BACK} /dev/infiniband"
    if device and re.search(rf"IB device {re.escape(device)} not found", text):
        return (
            f"the container does not see {device}: the image may lack its verbs provider, or the device is in "
            "another network namespace than the container"
        )
    if "Couldn't allocate MR" in text or "Failed to create MR" in text:
        return f"the container may not lock memory (memlock is limited in it): {_PUT_BACK} memlock=-1"
    return None
