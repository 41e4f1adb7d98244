#!/bin/sh
# Managed by rdmaprov (containers.cdi). Writes the CDI spec of this node's RDMA devices, so that
# a CDI runtime (podman 4.1+, Docker 25+ with CDI on, containerd 1.7+, CRI-O) gives a container
# one HCA (--device rdmaprov/rdma=mlx5_0) or all (--device rdmaprov/rdma=all).
#
# The uverbs/umad numbers are the kernel's, given in the order the drivers came up: they can
# change at a reboot or a driver reload. So the spec is made from sysfs whenever udev sees an
# RDMA character device come or go (rdmaprov's udev rule runs this), and by rdmaprov's apply.
#
#   rdmaprov-cdi-rdma [--check] [--sys DIR] [--out FILE] [--nccl-conf FILE]
#   --check: exit 1 (saying so) where FILE is not what sysfs gives now; write nothing.
set -eu
# udev runs this with no locale, an apply over SSH with the login's: the same order for both
# ("mlx5_1 uverbs1" sorts before "mlx5_10 uverbs10" in C, after it in en_US)
export LC_ALL=C

sys=/sys
out=/etc/cdi/rdmaprov-rdma.yaml
nccl_conf=/etc/nccl.conf
check=
while [ $# -gt 0 ]; do
    case $1 in
        --check) check=1 ;;
        --sys) sys=$2; shift ;;
        --out) out=$2; shift ;;
        --nccl-conf) nccl_conf=$2; shift ;;
        *) echo "rdmaprov-cdi-rdma: unknown argument: $1" >&2; exit 64 ;;
    esac
    shift
done

# "IBDEV NODE" for every RDMA character device of an HCA a job uses: its verbs and its MAD port
# (issmN is left out: it lets a container claim to be the fabric's subnet manager). A device
# that went away while being read is skipped; a name CDI would refuse (it must start and end
# with a letter or digit), or `all`, is left out rather than spoil the whole spec.
nodes() {
    for ibdev in "$sys"/class/infiniband_verbs/uverbs*/ibdev "$sys"/class/infiniband_mad/umad*/ibdev; do
        name=$(cat "$ibdev" 2>/dev/null) || continue
        node=$(basename "$(dirname "$ibdev")")
        case $name$node in *[!A-Za-z0-9_.-]*|'') continue ;; esac
        case $name in [!A-Za-z0-9]*|*[!A-Za-z0-9]|all) continue ;; esac
        echo "$name $node"
    done | sort
}

spec() {
    list=$(nodes)
    [ -n "$list" ] || return 0
    shared=
    # rdma_cm serves every HCA (RDMA-CM, NCCL's and perftest's -R): given with each device
    [ -e "$sys/class/misc/rdma_cm" ] && shared=rdma_cm
    echo "# Managed by rdmaprov (containers.cdi), from $sys/class/infiniband_verbs and"
    echo "# infiniband_mad: made again whenever udev sees an RDMA device come or go."
    echo 'cdiVersion: "0.3.0"'
    echo "kind: rdmaprov/rdma"
    echo "devices:"
    for name in $(echo "$list" | cut -d' ' -f1 | uniq) all; do
        echo "  - name: \"$name\""
        echo "    containerEdits:"
        echo "      deviceNodes:"
        echo "$list" | while read -r ibdev node; do
            [ "$name" = all ] || [ "$name" = "$ibdev" ] || continue
            echo "        - path: /dev/infiniband/$node"
        done
        [ -z "$shared" ] || echo "        - path: /dev/infiniband/$shared"
    done
    if [ -f "$nccl_conf" ]; then
        # NCCL reads /etc/nccl.conf itself: the node's settings reach the image's NCCL
        echo "containerEdits:"
        echo "  mounts:"
        echo "    - hostPath: $nccl_conf"
        echo "      containerPath: /etc/nccl.conf"
        echo "      options: [ro, bind]"
    fi
}

# udev starts one run per device at once at boot: one at a time, each reading sysfs under the
# lock, so the last to write read the latest
dir=$(dirname "$out")
if [ -z "$check" ]; then
    mkdir -p "$dir"
    exec 9<"$dir"
    flock 9
fi
wanted=$(spec)
if [ -f "$out" ]; then have=$(cat "$out"); else have=; fi
if [ "$wanted" = "$have" ] && { [ -n "$wanted" ] || [ ! -e "$out" ]; }; then
    exit 0
fi
if [ -n "$check" ]; then
    echo "$out is not what $sys gives now: run rdmaprov-cdi-rdma (or rdmaprov apply)"
    exit 1
fi
if [ -z "$wanted" ]; then  # no RDMA device: no spec
    rm -f "$out"
    exit 0
fi
temp=$(mktemp "$out.XXXXXX")
printf '%s\n' "$wanted" > "$temp"
chmod 644 "$temp"
mv -f "$temp" "$out"
