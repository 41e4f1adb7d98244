"""The lab's Debian image, one per release: built once with debootstrap, cached by the hash of its recipe.

It holds only what a freshly installed server has (systemd, openssh-server, python3, the
kernel, whose modules include rdma_rxe) plus a first-boot unit that takes the node's name,
address and the lab's public key from the kernel command line (VMs) or a bound file
(containers), generates the node's own SSH host keys, and prints them on the console so the
lab can pin them. No RDMA packages: rdmaprov's deploys install those from the lab mirror.
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

from rdmaprov.errors import UserError
from rdmaprov.lab.paths import cache_root, make_once
from rdmaprov.lab.proc import require, run
from rdmaprov.lab.releases import Release

DEBIAN_MIRROR = "http://deb.debian.org/debian"
INCLUDE = [
    "systemd-sysv",
    "udev",
    "kmod",
    "iproute2",
    "procps",
    "netbase",
    "openssh-server",
    "python3",
    "linux-image-amd64",
    "ca-certificates",
]
DISK_SIZE = "3G"
HOSTKEY_MARK = "RDMAPROV-HOSTKEY"

INIT_SCRIPT = f"""#!/bin/sh
# rdmaprov lab first-boot: name, address, login key and host keys for this node.
set -eu
CONF=/etc/rdmaprov-lab/config
get() {{
  if [ -f "$CONF" ]; then sed -n "s/^$1=//p" "$CONF"
  else tr ' ' '\\n' < /proc/cmdline | sed -n "s/^rdmaprov\\.$1=//p"; fi
}}
NAME=$(get hostname)
ADDR=$(get ip)
[ -n "$NAME" ] || exit 0
echo "$NAME" > /etc/hostname
hostname "$NAME"
printf '127.0.0.1 localhost\\n127.0.1.1 %s\\n' "$NAME" > /etc/hosts
mkdir -p /etc/systemd/network
printf '[Match]\\nName=eth0 host0\\n\\n[Network]\\nAddress=%s\\nLinkLocalAddressing=no\\nIPv6AcceptRA=no\\n' "$ADDR" > /etc/systemd/network/10-lab.network
mkdir -p /root/.ssh
chmod 700 /root/.ssh
get authkey | base64 -d > /root/.ssh/authorized_keys
chmod 600 /root/.ssh/authorized_keys
ls /etc/ssh/ssh_host_*_key >/dev/null 2>&1 || ssh-keygen -A
# VMs report on the serial console; containers into a directory the lab binds in.
OUT=/dev/console
[ -d /etc/rdmaprov-lab/out ] && OUT=/etc/rdmaprov-lab/out/hostkeys
for key in /etc/ssh/ssh_host_*_key.pub; do echo "{HOSTKEY_MARK} $(cat "$key")"; done > "$OUT"
"""  # noqa: E501 (a systemd-networkd file written in one printf; the image cache key is this text)

INIT_UNIT = """[Unit]
Description=rdmaprov lab node setup (name, address, keys)
DefaultDependencies=no
After=local-fs.target
Before=systemd-networkd.service ssh.service network-pre.target
Wants=network-pre.target

[Service]
Type=oneshot
ExecStart=/usr/local/sbin/rdmaprov-lab-init
RemainAfterExit=yes

[Install]
WantedBy=multi-user.target
"""

# Units that only slow a throwaway lab node's boot down.
MASKED = [
    "e2scrub_reap.service",
    "e2scrub_all.timer",
    "apt-daily.timer",
    "apt-daily-upgrade.timer",
    "fstrim.timer",
    "man-db.timer",
    "dpkg-db-backup.timer",
    "getty-static.service",
    "systemd-timesyncd.service",
    "serial-getty@ttyS0.service",
    "getty@tty1.service",
]


@dataclass(frozen=True)
class Image:
    """A built image: the root directory (containers) and the VM disk, kernel and initrd."""

    root: Path

    @property
    def rootfs(self) -> Path:
        return self.root / "rootfs"

    @property
    def disk(self) -> Path:
        return self.root / "disk.qcow2"

    @property
    def kernel(self) -> Path:
        return self.root / "vmlinuz"

    @property
    def initrd(self) -> Path:
        return self.root / "initrd.img"


def recipe_hash(release: Release) -> str:
    """Changes whenever anything that goes into the image changes."""
    recipe = {
        "suite": release.codename,
        "include": INCLUDE,
        "init": INIT_SCRIPT,
        "unit": INIT_UNIT,
        "masked": MASKED,
        "size": DISK_SIZE,
        "v": 1,
    }
    if release.kernel_suite:  # only then: the images of the other releases keep their cache keys
        recipe["kernel"] = release.kernel_suite
    return hashlib.sha256(json.dumps(recipe, sort_keys=True).encode()).hexdigest()[:16]


def image_dir(release: Release) -> Path:
    return cache_root() / "images" / f"debian{release.version}-{recipe_hash(release)}"


def _configure_rootfs(rootfs: Path, release: Release) -> None:
    (rootfs / "usr/local/sbin/rdmaprov-lab-init").write_text(INIT_SCRIPT)
    (rootfs / "usr/local/sbin/rdmaprov-lab-init").chmod(0o755)
    (rootfs / "etc/systemd/system/rdmaprov-lab-init.service").write_text(INIT_UNIT)
    wants = rootfs / "etc/systemd/system/multi-user.target.wants"
    wants.mkdir(parents=True, exist_ok=True)
    for unit, target in (
        ("rdmaprov-lab-init.service", "/etc/systemd/system/rdmaprov-lab-init.service"),
        ("systemd-networkd.service", "/lib/systemd/system/systemd-networkd.service"),
    ):
        link = wants / unit
        if not link.is_symlink():
            link.symlink_to(target)
    for unit in MASKED:
        link = rootfs / "etc/systemd/system" / unit
        if not link.is_symlink():
            link.symlink_to("/dev/null")
    # No host keys and no machine id in the image: every node makes its own at first boot.
    for key in (rootfs / "etc/ssh").glob("ssh_host_*"):
        key.unlink()
    (rootfs / "etc/machine-id").write_text("")
    (rootfs / "etc/fstab").write_text("/dev/vda / ext4 defaults,errors=remount-ro 0 1\n")
    (rootfs / "etc/apt/sources.list").write_text(f"deb {DEBIAN_MIRROR} {release.codename} main\n")
    shutil.rmtree(rootfs / "var/cache/apt/archives", ignore_errors=True)
    (rootfs / "var/cache/apt/archives/partial").mkdir(parents=True, exist_ok=True)


def _install_kernel(image: Image, release: Release, log) -> None:
    """linux-image-amd64 of release.kernel_suite beside the release's own kernel, as a site that
    runs the backports kernel has it; dpkg in the root builds its initrd."""
    from rdmaprov.lab import mirror  # the mirror resolves packages against images: it imports this module

    log(f"lab: installing the {release.kernel_suite} kernel into the {release.codename} image")
    debs = image.root / "kernel-debs"
    mirror.install_into(image.rootfs, image, release, [f"linux-image-amd64/{release.kernel_suite}"], debs, log)
    shutil.rmtree(debs)


def _kernel_version(path: Path) -> tuple:
    """`vmlinuz-6.12.117+deb13-amd64` → (6, 12, 117, ...): 6.9 sorts before 6.12."""
    version = path.name.split("-", 1)[1]
    return tuple(int(part) if part.isdigit() else part for part in re.split(r"[.+-]", version))


def newest_kernel(boot: Path) -> tuple[Path, Path]:
    """The newest kernel under `boot` and its own initrd."""
    for kernel in sorted(boot.glob("vmlinuz-*"), key=_kernel_version, reverse=True):
        initrd = boot / kernel.name.replace("vmlinuz-", "initrd.img-", 1)
        if initrd.exists():
            return kernel, initrd
    raise UserError(f"the image has no kernel with its initrd under {boot}: installing linux-image-amd64 failed")


def ensure_image(release: Release, log=print) -> Image:
    """Return the release's cached image for the current recipe, building it first if needed."""
    image = Image(image_dir(release))
    make_once(image.root, image.root / "complete", lambda: _build(image, release, log), log)
    return image


def _build(image: Image, release: Release, log) -> None:
    """Debootstrap the release, configure it and leave its kernel, initrd and disk in image.root."""
    require("debootstrap", "mke2fs", "qemu-img")
    free = shutil.disk_usage(cache_root().parent if cache_root().parent.exists() else Path("/")).free
    if free < 6 * 1024**3:
        raise UserError(
            f"building the lab image needs about 6 GiB free under {cache_root()}, only {free // 1024**3} GiB left: "
            "free some disk or set XDG_CACHE_HOME to a larger disk"
        )
    building = image.root.with_name(image.root.name + ".building")
    shutil.rmtree(building, ignore_errors=True)
    building.mkdir(parents=True)
    rootfs = building / "rootfs"
    started = time.monotonic()
    log(f"lab: building the {release.title} image (debootstrap, a few minutes) in {image.root}")
    run(
        [
            "debootstrap",
            "--variant=minbase",
            f"--include={','.join(INCLUDE)}",
            release.codename,
            str(rootfs),
            DEBIAN_MIRROR,
        ],
        "debootstrap",
        timeout=1800,
    )
    if release.kernel_suite:
        _install_kernel(Image(building), release, log)
    _configure_rootfs(rootfs, release)
    kernel, initrd = newest_kernel(rootfs / "boot")
    shutil.copy(kernel, building / "vmlinuz")
    shutil.copy(initrd, building / "initrd.img")
    raw = building / "disk.raw"
    run(["mke2fs", "-q", "-t", "ext4", "-d", str(rootfs), "-L", "rdmaprov", str(raw), DISK_SIZE], "mke2fs")
    run(["qemu-img", "convert", "-O", "qcow2", str(raw), str(building / "disk.qcow2")], "qemu-img convert")
    raw.unlink()
    (building / "complete").write_text(f"{time.monotonic() - started:.1f}\n")
    shutil.rmtree(image.root, ignore_errors=True)
    building.rename(image.root)
    log(f"lab: {release.title} image built in {time.monotonic() - started:.0f}s")
