"""What a container lacked, read from what podman or docker and a perftest program inside it
printed: the image, the program, the RDMA device, the verbs provider for the HCA, or locked
memory. Each message is the one these tools print (tests/fixtures/containers/, captured on the
lab's VMs). The gate starts its containers with no flags of their own (podman) or with only those
of the node's rdmaprov-docker-run (docker), so a device or memlock missing in them means the
node's configuration from rdmaprov is missing or was edited."""

from __future__ import annotations

import re

_DRIVER = re.compile(r"couldn't load driver '(lib[\w-]+?)-rdmav\d+\.so'")
# crun (podman): executable file `X` not found; docker's tini (the gate's --init): exec X failed: No such file
_NO_PROGRAM = re.compile(r"executable file `([^`]+)` not found|\[FATAL tini \(\d+\)\] exec (\S+) failed: No such file")
_NO_DEVICES = ("Did not detect devices", "Unable to find the Infiniband/RoCE device", "No IB devices found")
# what puts back what gives a container a device and memlock, by runtime
_GIVER = {
    "podman": "the drop-in 50-rdmaprov.conf that gives it",
    "docker": "/usr/local/bin/rdmaprov-docker-run, whose flags give it",
}


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


def _runtime_lack(text: str) -> str | None:
    """What the node's runtime itself lacked: dockerd, rdmaprov's docker run, the NVIDIA container
    toolkit, D-Bus, AppArmor."""
    # Debian 12's docker 20.10 client says "unknown server OS" when its ping finds no daemon
    if "Cannot connect to the Docker daemon" in text or "unknown server OS" in text:
        return "dockerd is not running on the node: rdmaprov apply --tags containers starts it"
    if "rdmaprov-docker-run: not found" in text:
        return "the node has no rdmaprov-docker-run: rdmaprov apply --tags containers puts it back"
    if "cannot open sd-bus" in text:
        return "podman cannot reach D-Bus for the container's cgroup: start dbus on the node (apply does)"
    if 'could not select device driver "" with capabilities: [[gpu]]' in text:
        return (
            "docker cannot give the container GPUs (--gpus): the node has no NVIDIA container toolkit; rdmaprov "
            "apply installs it from the CUDA repository (gpu.repo for a mirror of it)"
        )
    if "apparmor_parser" in text:
        return (
            "dockerd cannot load its AppArmor profile (no apparmor_parser): install apparmor on the node (apply does)"
        )
    return None


def container_lack(text: str, image: str, device: str | None = None, runtime: str = "podman") -> str | None:
    """What the container lacked for a perftest run on `device` (None: not known), started by
    `runtime`, or None when its output says nothing of the kind (a network or fabric failure,
    judged elsewhere)."""
    if "image not known" in text or "No such image" in text:
        return f"the image {image} is not on the node: pull or load it on every node first (the gate never pulls)"
    lack = _runtime_lack(text)  # first: dockerd's AppArmor failure names a program it lacks too
    if lack:
        return lack
    program = _NO_PROGRAM.search(text)
    if program:
        return f"the image {image} has no {program.group(1) or program.group(2)}: install perftest in it"
    put_back = f"rdmaprov apply --tags containers puts back {_GIVER.get(runtime, _GIVER['podman'])}"
    if any(words in text for words in _NO_DEVICES):
        return _no_provider(text, device, image) or f"the container sees no RDMA device: {put_back} /dev/infiniband"
    if device and re.search(rf"IB device {re.escape(device)} not found", text):
        return (
            f"the container does not see {device}: the image may lack its verbs provider, or the device is in "
            "another network namespace than the container"
        )
    if "Couldn't allocate MR" in text or "Failed to create MR" in text:
        return f"the container may not lock memory (memlock is limited in it): {put_back} memlock=-1"
    return None
