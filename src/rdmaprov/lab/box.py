"""`rdmaprov lab box`: a Vagrant libvirt box made from the lab's own image, for machines that
cannot download one (air-gapped, or CI).

A libvirt box is a tar of box.img (qcow2), metadata.json and a Vagrantfile. The lab image boots
with a kernel and initrd handed to QEMU, which a box cannot rely on (libvirt's QEMU runs as
another user and cannot read them from the box directory), so the box's disk boots by itself:
an MBR partition table, GRUB's boot.img in the MBR and its core.img in the gap before the first
partition (written here, as grub-bios-setup would, which refuses a disk image file), and a
grub.cfg that loads /vmlinuz and /initrd.img: Debian keeps those links pointing at the newest
kernel, so a kernel upgrade inside the box is booted too. No loop device and no mount: the ext4
file system is made from a directory with mke2fs at the partition's offset.

Inside: the lab image (systemd, openssh-server, python3, the stock kernel with rdma_rxe) plus
what Vagrant expects: a `vagrant` user with passwordless sudo and Vagrant's well-known insecure
public key (read from the installed Vagrant), which Vagrant replaces at the first `vagrant up`;
DHCP on eth0 (Vagrant's management network); SSH host keys made at first boot, so that no two
machines share one.
"""

from __future__ import annotations

import glob
import hashlib
import json
import shutil
import struct
import tarfile
import time
from pathlib import Path

from rdmaprov.errors import UserError
from rdmaprov.lab import mirror
from rdmaprov.lab.image import Image, ensure_image
from rdmaprov.lab.paths import cache_root, make_once
from rdmaprov.lab.proc import require, run
from rdmaprov.lab.releases import Release

DISK_GIB = 8
LABEL = "rdmaprovbox"
PART_START = 2048  # sectors: the partition starts at 1 MiB, leaving room for GRUB's core.img
GRUB_DIR = Path("/usr/lib/grub/i386-pc")
GRUB_MODULES = ["biosdisk", "part_msdos", "ext2", "normal", "linux", "configfile", "echo", "test"]
# Vagrant's insecure public key, from its Debian package or HashiCorp's.
VAGRANT_KEYS = (
    "/usr/share/rubygems-integration/all/gems/vagrant-*/keys/vagrant.pub",
    "/opt/vagrant/embedded/gems/gems/vagrant-*/keys/vagrant.pub",
    "/opt/vagrant/embedded/gems/*/gems/vagrant-*/keys/vagrant.pub",
)

GRUB_CFG = f"""set timeout=1
set default=0
menuentry "Debian (rdmaprov box)" {{
  linux /vmlinuz root=LABEL={LABEL} ro console=tty0 console=ttyS0,115200 net.ifnames=0
  initrd /initrd.img
}}
"""

HOSTKEYS_UNIT = """[Unit]
Description=SSH host keys of this machine, made at its first boot
Before=ssh.service
ConditionPathExists=!/etc/ssh/ssh_host_ed25519_key

[Service]
Type=oneshot
ExecStart=/usr/bin/ssh-keygen -A

[Install]
WantedBy=multi-user.target
"""

# eth0 is Vagrant's management network (libvirt's DHCP); Vagrant writes the private networks' files.
ETH0_NETWORK = "[Match]\nName=eth0\n\n[Network]\nDHCP=ipv4\n"

BOX_VAGRANTFILE = """# Made by `rdmaprov lab box` from rdmaprov's lab image (libvirt provider).
Vagrant.configure("2") do |config|
  config.vm.provider :libvirt do |lv|
    lv.disk_bus = "virtio"
  end
end
"""


def vagrant_public_key() -> str:
    for pattern in VAGRANT_KEYS:
        found = sorted(glob.glob(pattern))
        if found:
            return Path(found[-1]).read_text()
    raise UserError(
        "a Vagrant box carries Vagrant's insecure public key, read from the installed Vagrant, and none was found: "
        "apt-get install vagrant"
    )


def _recipe(image: Image, key: str) -> str:
    parts = [image.root.name, GRUB_CFG, HOSTKEYS_UNIT, ETH0_NETWORK, BOX_VAGRANTFILE, key, str(DISK_GIB), "v1"]
    return hashlib.sha256(json.dumps(parts).encode()).hexdigest()[:12]


def _write_files(rootfs: Path, key: str) -> None:
    """The lab's first-boot unit out, Vagrant's needs in."""
    (rootfs / "etc/systemd/system/multi-user.target.wants/rdmaprov-lab-init.service").unlink(missing_ok=True)
    (rootfs / "etc/systemd/system/rdmaprov-lab-init.service").unlink(missing_ok=True)
    (rootfs / "usr/local/sbin/rdmaprov-lab-init").unlink(missing_ok=True)
    (rootfs / "etc/systemd/system/rdmaprov-box-hostkeys.service").write_text(HOSTKEYS_UNIT)
    (rootfs / "etc/systemd/system/multi-user.target.wants/rdmaprov-box-hostkeys.service").symlink_to(
        "/etc/systemd/system/rdmaprov-box-hostkeys.service"
    )
    (rootfs / "etc/systemd/network").mkdir(parents=True, exist_ok=True)
    (rootfs / "etc/systemd/network/10-box-eth0.network").write_text(ETH0_NETWORK)
    (rootfs / "etc/hostname").write_text("debian\n")
    (rootfs / "etc/hosts").write_text("127.0.0.1 localhost\n127.0.1.1 debian\n")
    (rootfs / "etc/fstab").write_text(f"LABEL={LABEL} / ext4 defaults,errors=remount-ro 0 1\n")
    grub = rootfs / "boot/grub"
    (grub / "i386-pc").mkdir(parents=True, exist_ok=True)
    for module in [*GRUB_DIR.glob("*.mod"), *GRUB_DIR.glob("*.lst")]:
        shutil.copy(module, grub / "i386-pc" / module.name)
    (grub / "grub.cfg").write_text(GRUB_CFG)
    sudoers = rootfs / "etc/sudoers.d/vagrant"
    sudoers.write_text("vagrant ALL=(ALL) NOPASSWD: ALL\n")
    sudoers.chmod(0o440)
    ssh = rootfs / "home/vagrant/.ssh"
    ssh.mkdir(mode=0o700, parents=True, exist_ok=True)
    (ssh / "authorized_keys").write_text(key)
    (ssh / "authorized_keys").chmod(0o600)


def _customize(rootfs: Path, image: Image, release: Release, key: str, work: Path, log) -> None:
    mirror.install_into(rootfs, image, release, ["sudo"], work / "debs", log)
    run(
        ["chroot", str(rootfs), "useradd", "--create-home", "--shell", "/bin/bash", "--user-group", "vagrant"],
        "useradd",
    )
    _write_files(rootfs, key)
    run(["chroot", str(rootfs), "chown", "-R", "vagrant:vagrant", "/home/vagrant/.ssh"], "chown")


def _partition_table(raw: Path, size: int) -> None:
    """One bootable Linux partition from 1 MiB to the end (an MBR entry, LBA only)."""
    sectors = size // 512 - PART_START
    entry = struct.pack("<B3sB3sII", 0x80, b"\xfe\xff\xff", 0x83, b"\xfe\xff\xff", PART_START, sectors)
    with raw.open("r+b") as disk:
        disk.seek(446)
        disk.write(entry)
        disk.seek(510)
        disk.write(b"\x55\xaa")


def _install_grub(raw: Path, work: Path) -> None:
    """boot.img's code into the MBR (its partition table kept), core.img from sector 1: boot.img
    loads sector 1 and core.img's first sector the rest, from sector 2 on, by their defaults."""
    core = work / "core.img"
    run(
        ["grub-mkimage", "-O", "i386-pc", "-o", str(core), "-p", "(hd0,msdos1)/boot/grub", *GRUB_MODULES],
        "grub-mkimage",
    )
    if core.stat().st_size > (PART_START - 1) * 512:
        raise UserError(f"GRUB's core.img ({core.stat().st_size} B) does not fit before the partition")
    with raw.open("r+b") as disk:
        disk.write((GRUB_DIR / "boot.img").read_bytes()[:440])
        disk.seek(512)
        disk.write(core.read_bytes())


def _disk(rootfs: Path, work: Path) -> Path:
    raw = work / "disk.raw"
    size = DISK_GIB * 1024**3
    with raw.open("wb") as disk:
        disk.truncate(size)
    _partition_table(raw, size)
    fs_kib = (size - PART_START * 512) // 1024
    run(
        ["mke2fs", "-q", "-F", "-t", "ext4", "-L", LABEL, "-E", f"offset={PART_START * 512}", "-d", str(rootfs)]
        + [str(raw), f"{fs_kib}k"],
        "mke2fs",
    )
    _install_grub(raw, work)
    image = work / "box.img"
    run(["qemu-img", "convert", "-O", "qcow2", str(raw), str(image)], "qemu-img convert")
    raw.unlink()
    return image


def box_name(release: Release) -> str:
    """The name to add the box under: `vagrant box add --name rdmaprov/bookworm FILE`."""
    return f"rdmaprov/{release.name}"


def ensure_box(release: Release, log=print) -> Path:
    """The release's box file, made from its lab image once (cached beside the images)."""
    require("mke2fs", "qemu-img", "grub-mkimage", "chroot")
    if not (GRUB_DIR / "boot.img").exists():
        raise UserError(
            f"the box boots with GRUB, whose BIOS files ({GRUB_DIR}) are missing: apt-get install grub-pc-bin"
        )
    key = vagrant_public_key()
    image = ensure_image(release, log)
    done = cache_root() / "boxes" / f"{image.root.name}-{_recipe(image, key)}"
    box = done / f"rdmaprov-{release.name}.box"
    make_once(done, box, lambda: _make_box(image, release, key, done, box, log), log)
    return box


def _make_box(image: Image, release: Release, key: str, done: Path, box: Path, log) -> None:
    """Copy the image's root, make it a Vagrant machine, and pack disk and metadata into `box`."""
    started = time.monotonic()
    log(f"lab: making a Vagrant libvirt box of the {release.title} image in {done}")
    work = done.with_name(done.name + ".building")
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    rootfs = work / "rootfs"
    run(["cp", "-a", "--reflink=auto", str(image.rootfs), str(rootfs)], "copying the image's root")
    _customize(rootfs, image, release, key, work, log)
    disk = _disk(rootfs, work)
    shutil.rmtree(rootfs)
    (work / "metadata.json").write_text(
        json.dumps({"provider": "libvirt", "format": "qcow2", "virtual_size": DISK_GIB})
    )
    (work / "Vagrantfile").write_text(BOX_VAGRANTFILE)
    with tarfile.open(work / box.name, "w") as tar:
        for path in (disk, work / "metadata.json", work / "Vagrantfile"):
            tar.add(path, arcname=path.name)
    for path in work.iterdir():  # only the box file stays
        if path.is_dir():
            shutil.rmtree(path)
        elif path.name != box.name:
            path.unlink()
    shutil.rmtree(done, ignore_errors=True)
    work.rename(done)
    log(f"lab: box made in {time.monotonic() - started:.0f}s")
