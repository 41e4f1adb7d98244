"""What a container lacked, read from what podman and a perftest program inside it printed: the
image, the program, the RDMA device, the verbs provider for the HCA, or locked memory. Each
message is the one these tools print (tests/fixtures/containers/, captured on the lab's VMs)."""

from __future__ import annotations

import re

_DRIVER = re.compile(r"couldn't load driver '(lib[\w-]+?)-rdmav\d+\.so'")
_NO_PROGRAM = re.compile(r"executable file `([^`]+)` not found")
_NO_DEVICES = ("Did not detect devices", "Unable to find the Infiniband/RoCE device", "No IB devices found")


def provider_name(device: str) -> str:
    """The verbs provider an RDMA device's name asks for: mlx5_0 → mlx5, rxe0 → rxe, bnxt_re1 →
    bnxt_re (the library is lib<provider>-rdmavNN.so)."""
    return re.sub(r"_?\d+$", "", device)


def container_lack(text: str, device: str, image: str) -> str | None:
    """What the container lacked for a perftest run on `device`, or None when its output says
    nothing of the kind (a network or fabric failure, judged elsewhere)."""
    if "image not known" in text:
        return f"the image {image} is not on the node: pull or load it on every node first (the gate never pulls)"
    program = _NO_PROGRAM.search(text)
    if program:
        return f"the image {image} has no {program.group(1)}: install perftest in it"
    if "cannot open sd-bus" in text:
        return "podman cannot reach D-Bus for the container's cgroup: start dbus on the node (apply does)"
    if any(words in text for words in _NO_DEVICES):
        if _DRIVER.search(text):  # libibverbs found the device but none of its providers loads
            wanted = f"lib{provider_name(device)}"
            return (
                f"the image {image} has no verbs provider for {device} ({wanted}-rdmav*.so, rdma-core's "
                "providers: ibverbs-providers or libibverbs): the container saw no usable RDMA device"
            )
        return (
            "the container sees no RDMA device: /dev/infiniband was not passed in "
            "(containers.runtime: podman gives it to every container; docker needs --device)"
        )
    if re.search(rf"IB device {re.escape(device)} not found", text):
        return (
            f"the container does not see {device}: it runs in another network namespace than the device "
            "(the gate runs containers on the host's network)"
        )
    if "Couldn't allocate MR" in text or "Failed to create MR" in text:
        return "the container may not lock memory (memlock is limited in it): give it --ulimit memlock=-1"
    return None
