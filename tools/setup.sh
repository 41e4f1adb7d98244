#!/usr/bin/env bash
# Set up a fresh Debian 12 machine for rdmaprov: tools/setup.sh [--python]
#   (no option, as root) the system tools the lab and the end-to-end tests use (the test hosts share
#   this machine's root: the build tests compile with its gcc and probe sources with its curl;
#   `rdmaprov lab mpi` builds Open MPI with gcc and make from an xz tarball; zstd, that the lab's
#   package pool is compressed again with; Vagrant on libvirt, and GRUB's BIOS files for the box
#   `rdmaprov lab box` makes; promtool in /usr/local/bin, taken out of Debian's prometheus package
#   without installing its server, that the unit tests lint the exporter's and the textfile's
#   metrics with; chromium, that the unit tests render the readiness report with, headless, as a
#   person would see it; Slurm 22.05 and munge, that the GPU twin's test runs on its test hosts as
#   a site's own Slurm), then the virtualenv below
#   --python  only the virtualenv in .venv: rdmaprov installed from this checkout (editable) with
#             its test extra, at the versions CI tested (constraints/tested.txt); no root needed
# Nothing is started here: the Vagrant test starts libvirtd itself when none runs (CI machines
# have no systemd to do it), and stops it afterwards.
set -euo pipefail
cd "$(dirname "$0")/.."

APT_PACKAGES=(
  openssh-client openssh-server iproute2 procps psmisc
  qemu-system-x86 qemu-utils debootstrap systemd-container e2fsprogs
  dpkg-dev apt-utils gnupg python3-venv ca-certificates
  gcc libc6-dev curl make xz-utils zstd
  vagrant vagrant-libvirt libvirt-daemon-system dnsmasq-base grub-pc-bin debian-archive-keyring
  chromium
  slurmctld slurmd slurm-client munge
)
if [[ "${1:-}" != --python ]]; then
  missing=()
  for pkg in "${APT_PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
  done
  if ((${#missing[@]})); then
    if [[ $EUID -ne 0 ]]; then
      echo "setup: missing system packages: ${missing[*]} (run as root, or apt-get install them)" >&2
      exit 1
    fi
    echo "setup: installing ${missing[*]}"
    apt-get update -q
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}"
  fi
  if ! command -v promtool >/dev/null; then
    if [[ $EUID -ne 0 ]]; then
      echo "setup: promtool missing: run as root, or put Debian's prometheus package's promtool on PATH" >&2
      exit 1
    fi
    unpack=$(mktemp -d) && chmod 755 "$unpack"  # apt downloads as _apt
    (cd "$unpack" && { apt-get download -q prometheus || { apt-get update -q && apt-get download -q prometheus; }; })
    dpkg-deb --fsys-tarfile "$unpack"/prometheus_*.deb | tar -x -C "$unpack" ./usr/bin/promtool
    install -m 755 "$unpack/usr/bin/promtool" /usr/local/bin/promtool
    rm -rf "$unpack"
    echo "setup: promtool in /usr/local/bin"
  fi
fi

if [[ ! -x .venv/bin/python ]]; then
  python3 -m venv .venv || {
    echo "setup: python3 cannot make a virtualenv: apt-get install python3-venv (as root)" >&2
    exit 1
  }
fi
.venv/bin/python -m pip install -q --upgrade pip
.venv/bin/python -m pip install -q -c constraints/tested.txt -e '.[test]'
# Commit subjects of at most 72 characters (docs/contributing.md): the hook in .githooks/ checks.
if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
  git config core.hooksPath .githooks
fi
echo "setup: ready (.venv/bin/rdmaprov)"
