"""A container image made on a lab VM from its own root file system, with no registry: the perftest
programs, a shell, the verbs providers and every library they load, imported into podman or
docker. What a site's training image holds of RDMA, at a few MB (the VM's whole /usr is 1.2 GB)."""

from __future__ import annotations

IMAGE = "localhost/rdmaprov-rdma:lab"

_SCRIPT = r"""set -e
root=$(mktemp -d /var/tmp/rdmaprov-image.XXXXXX)
mkdir -p "$root/usr/bin" "$root/usr/lib" "$root/usr/lib64" "$root/etc" "$root/dev" "$root/proc" "$root/sys" "$root/tmp"
ln -s usr/bin "$root/bin"; ln -s usr/lib "$root/lib"; ln -s usr/lib64 "$root/lib64"; ln -s bin "$root/usr/sbin"
programs="/usr/bin/sh /usr/bin/dash /usr/bin/env /usr/bin/ls /usr/bin/ibv_devices"
programs="$programs /usr/bin/ib_write_bw /usr/bin/ib_write_lat"
providers=$(ls /usr/lib/x86_64-linux-gnu/libibverbs/*.so)
libs=$(ldd $programs $providers 2>/dev/null | awk '$2 == "=>" && $3 ~ /^\// {print $3} $1 ~ /^\/.*[^:]$/ {print $1}')
for f in $programs $providers $(echo "$libs" | sort -u); do
  mkdir -p "$root$(dirname "$f")"; cp -L "$f" "$root$f"
done
cp -a /etc/libibverbs.d "$root/etc/"
tar -C "$root" -c . | {importer} {image}
rm -rf "$root"
"""


def image_script(runtime: str = "podman") -> str:
    """The shell script that builds IMAGE on a VM where the runtime and perftest are installed."""
    importer = "docker import - >/dev/null" if runtime == "docker" else "podman import -q -"
    return _SCRIPT.replace("{importer}", importer).replace("{image}", IMAGE)
