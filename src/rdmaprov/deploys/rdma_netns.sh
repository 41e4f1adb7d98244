#!/bin/sh
# Managed by rdmaprov (containers, on nodes in netns_mode exclusive). Gives a network namespace
# (a container's own) a netdev and the RDMA device on it, so that a job in that namespace can use
# RDMA: in exclusive mode a namespace sees only the RDMA devices moved into it.
#
#   rdmaprov-rdma-netns NETNS NETDEV [--address CIDR] [--rdma DEVICE] [--name NAME]
#
# NETNS: a name under /run/netns, made if absent (podman: --network ns:/run/netns/NETNS), or a
# running container's (`ip netns attach NETNS PID` first: docker run --network none). NETDEV:
# what the namespace sends on, an SR-IOV VF or a macvlan, never the node's own link (refused
# where it has addresses in the host's namespace). The RDMA device: --rdma (hardware), else the
# one on NETDEV; a SoftRoCE one is made in the namespace (NAME, default rxe_NETNS), since the kernel
# deletes an rxe device whose netdev changes namespace. Undo: `ip netns delete NETNS` (hardware
# devices go back to the host's namespace; SoftRoCE's and a macvlan go away).
#
# A step that fails undoes the ones before it and says which; it prints the device's name.
set -eu
export LC_ALL=C
me=rdmaprov-rdma-netns

die() { echo "$me: $*" >&2; exit 1; }
usage() { die "usage: $me NETNS NETDEV [--address CIDR] [--rdma DEVICE] [--name NAME]"; }

[ $# -ge 2 ] || usage
netns=$1 netdev=$2
shift 2
address='' rdma='' name=''
while [ $# -gt 0 ]; do
    [ $# -ge 2 ] || usage
    case $1 in
        --address) address=$2 ;;
        --rdma) rdma=$2 ;;
        --name) name=$2 ;;
        *) usage ;;
    esac
    shift 2
done
name=${name:-rxe_$netns}
for word in "$netns" "$netdev" "$rdma" "$name"; do
    case $word in *[!A-Za-z0-9_.-]*) die "$word: use letters, digits, '_', '.' or '-' only" ;; esac
done

mode=$(rdma system show 2>&1) || die "rdma system show failed (${mode}): no RDMA core (ib_core) here"
case $mode in
    *"netns exclusive"*) ;;
    *) die "every namespace here shares the RDMA devices (rdma system show: ${mode}): nothing to move;" \
        "set netns_mode: exclusive in the inventory and apply" ;;
esac
ip link show dev "$netdev" >/dev/null 2>&1 || die "no netdev $netdev in the host's namespace"
# A netdev with addresses here is the host's: moving it would cut off whatever uses them (SSH).
in_use=$(ip -o addr show dev "$netdev" scope global | awk '{print $4}' | tr '\n' ' ')
if [ -n "$in_use" ]; then
    die "$netdev has addresses in the host's namespace (${in_use% }): moving it would cut them off;" \
        "give the namespace an SR-IOV VF, or a macvlan on it" \
        "(ip link add NAME link $netdev type macvlan mode bridge)"
fi
if [ -n "$rdma" ] && [ ! -e "/sys/class/infiniband/$rdma" ]; then
    die "no RDMA device $rdma in the host's namespace (rdma dev lists those there)"
fi
if [ -n "$rdma" ] && [ ! -e "/sys/class/infiniband/$rdma/device" ]; then
    die "$rdma is a software device (SoftRoCE), which cannot follow a netdev into a namespace: leave out" \
        "--rdma, and one is made on $netdev inside it"
fi
# The RDMA device on NETDEV, as `rdma link` names it: "link mlx5_2/1 state ACTIVE ... netdev X".
if [ -z "$rdma" ]; then
    rdma=$(rdma link show | awk -v dev="$netdev" \
        '$NF == dev && $(NF-1) == "netdev" {sub("/.*", "", $2); print $2; exit}')
fi
soft=''
if [ -z "$rdma" ] || [ ! -e "/sys/class/infiniband/$rdma/device" ]; then
    soft=1  # no device, or one with no hardware under it: SoftRoCE, made in the namespace
    modprobe rdma_rxe 2>/dev/null ||
        die "no RDMA device on $netdev, and no SoftRoCE (rdma_rxe) to make one: name the VF's with --rdma"
fi

err=$(mktemp)
trap 'rm -f "$err"' EXIT
made_ns='' made_rxe=''
# Every step that can fail comes before the RDMA device moves, the last one: undoing never has
# to fetch a device back out of a namespace.
undo() {
    echo "$me: $1 (undone: $netdev is back in the host's namespace)" >&2
    [ -z "$made_rxe" ] || rdma link delete "$name" >/dev/null 2>&1 || true
    ip -n "$netns" link set "$netdev" netns 1 >/dev/null 2>&1 || true
    [ -z "$made_ns" ] || ip netns delete "$netns" >/dev/null 2>&1 || true
    exit 1
}

if [ ! -e "/run/netns/$netns" ]; then
    ip netns add "$netns" || die "could not make the namespace $netns"
    made_ns=1
fi
ip link set "$netdev" netns "$netns" 2>"$err" || undo "moving $netdev: $(cat "$err")"
if [ -n "$address" ]; then
    ip -n "$netns" addr add "$address" dev "$netdev" 2>"$err" || undo "address $address: $(cat "$err")"
fi
ip -n "$netns" link set lo up
ip -n "$netns" link set "$netdev" up 2>"$err" || undo "bringing $netdev up: $(cat "$err")"
if [ -n "$soft" ]; then
    # made from inside the namespace, it is still registered in the host's: moved like any other
    ip netns exec "$netns" rdma link add "$name" type rxe netdev "$netdev" 2>"$err" ||
        undo "making $name on $netdev: $(cat "$err")"
    made_rxe=1 rdma=$name
fi
if ! rdma dev set "$rdma" netns "$netns" 2>"$err"; then
    why=$(cat "$err")
    case $why in *"not supported"*)
        why="$why: this kernel ($(uname -r)) cannot move $rdma between namespaces"
        why="$why (SoftRoCE can from Linux 7.3, Debian 13's backports kernel; not in 6.1 or 6.12)" ;;
    esac
    undo "moving $rdma: $why"
fi
echo "$rdma"
