# shellcheck shell=bash disable=SC2153
# (SC2153: KT, NODE_IP and the rest are lib.sh's and nodes.sh's)
# tests/cluster/container.sh — what is a container node's own (node 2 and on, TERN_CLUSTER_NODES):
# the privileged podman container (its own mount, PID and cgroup namespaces: its CNI dirs,
# /run/tern, kubelet root and containerd state private by construction, its processes dying with
# it), its Debian root filesystem and PID 1, the registry it pulls node 1's images from, and its
# cabling (host-gw: one switch for every node; vxlan: each container node on a subnet of its own
# behind a router). The steps every node shares are nodes.sh's; docs/TESTING.md ("Two nodes") has
# the layout and why. Sourced by tests/cluster/lib.sh (always: `down` removes container nodes
# whatever TERN_CLUSTER_NODES says).

NODE2_REGISTRY=$NODE_IP:15000
NODE2_PACKAGES=iproute2,iptables,nftables,runc,ca-certificates,procps,iputils-ping,conntrack
NODE2_CACHE="${TERN_GO_CACHE:-/var/cache/tern-build}/node2"
BRIDGE=kt-br0
SWITCH_NS=kt-switch
ROUTER_NS=kt-router
ROUTER_IP1='' ROUTER_IP1_6=''
[ "$NODE_ROUTES" != vxlan ] || ROUTER_IP1=10.99.219.254 ROUTER_IP1_6=${NODE_IP6:+fd99:219::fe}
# node 2 as the two-node cases and checks name it
NODE2=${N_NAME[2]} NODE2_IP=${N_IP[2]} NODE2_IP6=${N_IP6[2]} NODE2_IP_NEXT="${N_IP[2]%.*}.3"
NODE2_CTR=tern-kt-node2 NODE2_CGROUP=/tern-kube2

node_ctr() { echo "tern-kt-node$1"; }
node_pid() { node_podman "$1" inspect -f '{{.State.Pid}}' "$(node_ctr "$1")"; }

# node_podman N ARGS...: podman with node N's private state (nothing in the machine's own).
node_podman() {
    local p="$KT/node$1/podman"
    shift
    podman --root "$p/root" --runroot "$p/run" --tmpdir "$p/tmp" --storage-driver vfs \
        --cgroup-manager cgroupfs --events-backend file --cni-config-dir "$p/cni" "$@"
}

# container_rootfs: prints the path of the root filesystem tarball (Debian bookworm minbase),
# building it (mmdebstrap, 63-78 s here) when the package list changed. Called in a command
# substitution, where errexit does not hold: each step's failure returns.
container_rootfs() {
    local key out
    key=$(printf '%s' "$NODE2_PACKAGES" | sha256sum | cut -c1-16)
    out="$NODE2_CACHE/rootfs-$key.tar"
    if [ ! -f "$out" ]; then
        mkdir -p "$NODE2_CACHE"
        rm -rf "$NODE2_CACHE"/rootfs-*.tar "$NODE2_CACHE"/rootfs-*.tar.tmp
        log "mmdebstrap bookworm ($NODE2_PACKAGES)"
        # shellcheck disable=SC2016 # "$1" is the hook's argument, expanded by mmdebstrap's shell
        mmdebstrap --quiet --variant=minbase --format=tar --include="$NODE2_PACKAGES" \
            --dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-exclude=/usr/share/man/*' \
            --dpkgopt='path-exclude=/usr/share/locale/*' --dpkgopt='path-exclude=/usr/share/info/*' \
            --customize-hook='rm -rf "$1"/var/cache/apt/archives/*.deb "$1"/var/lib/apt/lists/*' \
            bookworm "$out.tmp" http://deb.debian.org/debian >&2 || { rm -f "$out.tmp"; return 1; }
        mv "$out.tmp" "$out" || return 1
    fi
    echo "$out"
}

# container_registry: the local registry on node 1's address (once), with node 1's images pushed
# from its containerd under their paths without the registry host (containerd asks a mirror for
# /v2/<path>/manifests/<tag>?ns=<registry>): localhost/tern-pause:test -> tern-pause:test.
container_registry() {
    local r="$KT/registry" img
    [ ! -f "$r/pid" ] || return 0
    mkdir -p "$r/data"
    printf 'version: 0.1\nlog:\n  level: warn\nstorage:\n  filesystem:\n    rootdirectory: %s\nhttp:\n  addr: %s\n' \
        "$r/data" "$NODE2_REGISTRY" >"$r/config.yml"
    start registry "$GOBIN_DIR/registry/registry" serve "$r/config.yml"
    wait_for 30 "the local registry at $NODE2_REGISTRY" curl -sf "http://$NODE2_REGISTRY/v2/"
    for img in $(ctr -n k8s.io images ls -q); do
        case "$img" in *@*|sha256:*) continue ;; esac
        ctr -n k8s.io images push --plain-http "$NODE2_REGISTRY/${img#*/}" "$img" >&2
    done
}

# container_fs N: node N's root filesystem, unpacked fresh (so containerd's overlayfs sits on the
# host's ext4, not on an overlay), before node_files writes into it.
container_fs() {
    local tarball
    [ "$API" = "https://$NODE_IP:$API_PORT" ] || { log "container nodes: the API server must bind $NODE_IP (TERN_CLUSTER_API_ADDR)"; return 1; }
    mkdir -p "${N_FS[$1]}/var/log/tern-node" "$KT/node$1/podman/cni" "$KT/node$1/podman/tmp"
    tarball=$(container_rootfs)
    tar -xf "$tarball" -C "${N_FS[$1]}"
}

# container_up N: node N's container: the registry, PID 1, the container, its cabling. PID 1
# waits for its address, then runs containerd (and kube-proxy with node 1's configuration when
# node 1 runs one); the kubelet is nodes.sh's kubelet_start, as on node 1.
container_up() {
    local n=$1 fs=${N_FS[$1]} e=/etc/tern-node
    container_registry
    if [ -f "$KT/kube-proxy/config.yaml" ]; then
        sed -e "s|^hostnameOverride: .*|hostnameOverride: ${N_NAME[$n]}|" \
            -e "s|^nodePortAddresses: .*|nodePortAddresses: [\"${N_IP[$n]}/32\"${N_IP6[$n]:+, \"${N_IP6[$n]}/128\"}]|" \
            "$KT/kube-proxy/config.yaml" >"$fs$e/kube-proxy.yaml"
    fi
    # PID 1: the variables are expanded here, the rest in the node
    cat >"$fs$e/init" <<INIT
#!/bin/bash
set -u
log=/var/log/tern-node
# mounts made under the kubelet's root (projected tokens) must be seen by the runtime's mounts
mount --make-rshared /
# the kubelet's cgroupRoot /kubelet in every v1 hierarchy, cpuset's cpus and mems copied from the
# parent (a new cpuset cgroup starts empty)
for h in /sys/fs/cgroup/*/; do
    [ -f "\$h/cgroup.procs" ] || continue
    mkdir -p "\$h/kubelet"
    if [ -f "\$h/cpuset.cpus" ]; then
        cat "\$h/cpuset.cpus" >"\$h/kubelet/cpuset.cpus"
        cat "\$h/cpuset.mems" >"\$h/kubelet/cpuset.mems"
    fi
done
sysctl -qw net.ipv4.ip_forward=1
for _ in \$(seq 1 240); do
    ip -o addr show dev eth0 2>/dev/null | grep -q " ${N_IP[$n]}/" && break
    sleep 0.25
done
PATH="$GOBIN_DIR/containerd:\$PATH" containerd --config $e/containerd.toml --log-level warn >>\$log/containerd.log 2>&1 &
echo \$! >/run/containerd.pid
if [ -f $e/kube-proxy.yaml ]; then
    $GOBIN_DIR/e2e/kube-proxy --config $e/kube-proxy.yaml --v=1 >>\$log/kube-proxy.log 2>&1 &
fi
trap 'kill \$(cat /run/kubelet.pid /run/containerd.pid) 2>/dev/null; exit 0' TERM INT
# containerd or kube-proxy exiting ends the node
wait -n
echo "tern-node init: a component exited" >>\$log/init.log
INIT
    chmod 0755 "$fs$e/init"
    node_podman "$n" run -d --name "$(node_ctr "$n")" --hostname "${N_NAME[$n]}" --privileged \
        --cgroupns=private --cgroup-parent "/tern-kube$n" --network none \
        --ulimit nofile=20000:20000 --ulimit nproc=32768:32768 -e container=podman \
        --tmpfs /run -v "$GOBIN_DIR:$GOBIN_DIR:ro" -v "$KT/pki:$KT/pki:ro" \
        --rootfs "$fs" "$e/init" >"$KT/node$n/container-id"
    container_network "$n"
}

# bridge_address: node 1's address on the node network (nodes.sh node_address with container
# nodes): kt-node0 a /24, its peer kt-node1 a port of the switch's bridge (host-gw) or the router's
# port on node 1's subnet (vxlan).
bridge_address() {
    local peer=${NODE_LINK%0}1 ns=$SWITCH_NS
    [ "$NODE_ROUTES" != vxlan ] || ns=$ROUTER_NS
    local p=(ip netns exec "$ns")
    if [ "$NODE_ROUTES" = vxlan ]; then router_netns; else switch_netns; fi
    ip link show "$NODE_LINK" >/dev/null 2>&1 || ip link add "$NODE_LINK" type veth peer name "$peer" netns "$ns"
    if [ "$NODE_ROUTES" = vxlan ]; then
        "${p[@]}" ip addr replace "$ROUTER_IP1/24" dev "$peer"
        [ -z "$NODE_IP6" ] || "${p[@]}" ip addr replace "$ROUTER_IP1_6/64" dev "$peer" nodad
    else
        "${p[@]}" ip link set "$peer" master "$BRIDGE"
    fi
    "${p[@]}" ip link set "$peer" up
    ip addr replace "$NODE_IP/24" dev "$NODE_LINK"
    [ -z "$NODE_IP6" ] || ip addr replace "$NODE_IP6/64" dev "$NODE_LINK" nodad
    ip link set "$NODE_LINK" up
}

# switch_netns: with host-gw, the node network's switch (netns kt-switch, the bridge kt-br0 in
# it), made once; no netfilter of its own (bridge-nf-call-* off in it).
switch_netns() {
    [ ! -e "/run/netns/$SWITCH_NS" ] || return 0
    local w=(ip netns exec "$SWITCH_NS")
    ip netns add "$SWITCH_NS"
    "${w[@]}" ip link set lo up
    "${w[@]}" sysctl -qw net.bridge.bridge-nf-call-iptables=0 net.bridge.bridge-nf-call-ip6tables=0 2>/dev/null || true
    "${w[@]}" ip link add "$BRIDGE" type bridge
    "${w[@]}" ip link set "$BRIDGE" up
}

# router_netns: with vxlan, the router between the node subnets (netns kt-router), made once:
# forwarding on, no default route, and a guard that forwards only between the node subnets.
router_netns() {
    [ ! -e "/run/netns/$ROUTER_NS" ] || return 0
    local r=(ip netns exec "$ROUTER_NS") v6=''
    ip netns add "$ROUTER_NS"
    "${r[@]}" ip link set lo up
    "${r[@]}" sysctl -qw net.ipv4.ip_forward=1
    [ -z "$NODE_IP6" ] || "${r[@]}" sysctl -qw net.ipv6.conf.all.forwarding=1
    [ -z "$NODE_IP6" ] || v6="
        ip6 saddr { $NODE_NETS6 } ip6 daddr { $NODE_NETS6 } accept"
    "${r[@]}" nft -f - <<NFT
table inet tern_kt_guard {
    chain forward {
        type filter hook forward priority filter; policy accept;
        ip saddr { $NODE_NETS } ip daddr { $NODE_NETS } accept$v6
        counter reject
    }
}
NFT
}

# container_network N: the veth into node N's netns (kt-nNh this side, eth0 in it), its
# addresses and default routes: with host-gw the veth is a port of the switch and node 1 the
# gateway; with vxlan it is the router's port on node N's subnet, the router the gateway, and node
# 1 routes to that subnet through the router.
container_network() {
    local n=$1 pid h=kt-n$1h c=kt-n$1c sub=${N_IP[$1]%.*} sub6=${N_IP6[$1]%::*}
    local gw=$NODE_IP gw6=$NODE_IP6 r=(ip netns exec "$ROUTER_NS")
    pid=$(node_pid "$n")
    ip link add "$h" type veth peer name "$c"
    if [ "$NODE_ROUTES" = vxlan ]; then
        gw=$sub.254 gw6=$sub6::fe
        router_netns
        ip link set "$h" netns "$ROUTER_NS"
        "${r[@]}" ip addr add "$gw/24" dev "$h"
        [ -z "$NODE_IP6" ] || "${r[@]}" ip addr add "$gw6/64" dev "$h" nodad
        "${r[@]}" ip link set "$h" up
        ip route replace "$sub.0/24" via "$ROUTER_IP1"
        [ -z "$NODE_IP6" ] || ip -6 route replace "$sub6::/64" via "$ROUTER_IP1_6"
    else
        switch_netns
        ip link set "$h" netns "$SWITCH_NS"
        ip netns exec "$SWITCH_NS" ip link set "$h" master "$BRIDGE" up
    fi
    ip link set "$c" netns "$pid"
    local in=(nsenter -t "$pid" -n)
    "${in[@]}" ip link set "$c" name eth0
    "${in[@]}" ip addr add "${N_IP[$n]}/24" dev eth0
    [ -z "$NODE_IP6" ] || "${in[@]}" ip addr add "${N_IP6[$n]}/64" dev eth0 nodad
    "${in[@]}" ip link set eth0 up
    "${in[@]}" ip link set lo up
    "${in[@]}" ip route add default via "$gw"
    [ -z "$NODE_IP6" ] || "${in[@]}" ip -6 route add default via "$gw6"
}

# container_down N: node N and its veth gone (its pods' sandboxes removed through its CRI first:
# nodes.sh node_drain), its cgroups under /tern-kubeN, mounts and files under $KT/nodeN.
container_down() {
    local n=$1 d="$KT/node$1" cg=/tern-kube$1 procs h end=$((SECONDS + 10))
    if [ -d "$d/podman" ] && node_podman "$n" container exists "$(node_ctr "$n")" 2>/dev/null; then
        node_drain "$n"
        node_podman "$n" rm -f -t 5 "$(node_ctr "$n")" >/dev/null 2>&1 || true
    fi
    ip link del "kt-n${n}h" 2>/dev/null || true
    # conmon (podman's monitor) can outlive `podman rm` by a moment: its cgroup is only removable
    # once empty (seen here: an empty conmon cgroup left under /tern-kube2); what is still in the
    # node's cgroups after 10 s is killed
    while procs=$(find "/sys/fs/cgroup/pids$cg" -name cgroup.procs -exec cat {} + 2>/dev/null) && [ -n "$procs" ]; do
        if [ "$SECONDS" -ge "$end" ]; then
            # shellcheck disable=SC2086 # one pid a word
            kill -KILL $procs 2>/dev/null || true
            sleep 0.5
            break
        fi
        sleep 0.2
    done
    for h in /sys/fs/cgroup/*/; do
        [ ! -d "$h${cg#/}" ] || find "$h${cg#/}" -depth -type d -exec rmdir {} + 2>/dev/null || true
    done
    if [ -d "$d" ]; then
        { grep -o " ${d}[^ ]*" /proc/mounts || true; } | sort -r | while read -r m; do umount -l "$m" 2>/dev/null || true; done
        rm -rf "$d"
    fi
}
