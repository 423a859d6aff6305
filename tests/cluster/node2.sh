# shellcheck shell=bash disable=SC2153
# (SC2153: NODE_IP, CLUSTER_CIDR and the rest are lib.sh's)
# tests/cluster/node2.sh — a second kubelet node on this machine for the real-cluster tier
# (TERN_CLUSTER_NODES=2; scripts/two-nodes brings the tier up with it and checks it).
#
# Sourced by tests/cluster/lib.sh (always: `down` removes a node 2 whatever the variable says);
# uses its KT, GOBIN_DIR, K8S_BIN, API, PAUSE_IMAGE, TERN_IMAGE, CLUSTER_CIDR*, SERVICE_CIDR*,
# NODE_IP* and its log, start, stop, wait_for, cert and kubeconfig.
#
# Node 2 is a privileged podman container (../shared/reference/k8s-network-conformance.md, 5.2,
# verified on this kernel), chosen over a hand-made network + mount namespace because podman
# gives it a mount, PID and cgroup namespace of its own in one step: its /etc/cni/net.d,
# /opt/cni/bin, /run/tern, /var/lib/kubelet and containerd's state are private by construction,
# its processes die with it, and its cgroups sit under one parent.
# - Root filesystem: Debian bookworm minbase by mmdebstrap (runc, iproute2, iptables, nftables,
#   ...), cached as a tarball under $TERN_GO_CACHE/node2 (keyed by the package list) and unpacked
#   fresh under $KT/node2/rootfs for each run (so containerd's overlayfs sits on the host's ext4,
#   not on an overlay); node 1's Debian `loopback` and `host-local` in its /opt/cni/bin, as a
#   node's `kubernetes-cni` package brings them.
# - The programs: the tier's static Go binaries, $GOBIN_DIR bind-mounted read-only at the same
#   path; runc is Debian's from the root filesystem. PID 1 is /usr/local/sbin/tern-node2-init
#   (below): cgroup root, forwarding, then containerd and the kubelet (and kube-proxy, with node
#   1's configuration, when node 1 runs one: tests/conformance/lib.sh), logs in the root
#   filesystem's /var/log/tern-node2 (readable from the host at $KT/node2/rootfs/var/log/...).
# - podman: `--cgroup-manager cgroupfs --events-backend file`, its own root, runroot, tmpdir and
#   empty --cni-config-dir under $KT/node2/podman (nothing in the machine's /var/lib/containers or
#   /etc/cni/net.d), the vfs driver (no image is used: --rootfs), `--network none`,
#   `--cgroupns=private`, cgroup parent /tern-kube2, `--ulimit nofile=20000:20000 --ulimit
#   nproc=32768:32768` (without them runc fails "error setting rlimit": no CAP_SYS_RESOURCE here).
# - Network: node 1's 10.99.219.1/24 (fd99:219::1/64 in dual stack) is on lib.sh's veth kt-node0
#   (a /24 here, not its /32), whose peer kt-node1 is cabled outside node 1's netns, as a NIC to
#   a switch (bridge_address: never a bridge in node 1's netns, where br_netfilter would run node
#   1's conntrack and NAT on bridged frames). host-gw: the peer is a port of the bridge kt-br0 in
#   the switch netns kt-switch; node 2 is 10.99.219.2/24 (fd99:219::2/64) on a veth into its netns
#   (eth0; the host end kt-n2h another port of kt-br0), default routes via node 1, so
#   the nodes share one L2 segment and tern-agent's host-gw routes (`--node-routes`) connect them.
#   With TERN_CLUSTER_NODE_ROUTES=vxlan node 2 sits on another subnet, 10.99.218.2/24
#   (fd99:218::2/64), behind a router netns kt-router (10.99.219.254 on kt-node1, 10.99.218.254
#   on node 2's veth; no default route, so it forwards between the two subnets and nothing else):
#   the nodes share no L2 segment, host-gw cannot reach, and tern-agent runs with
#   `--node-routes=vxlan` (tests/conformance/lib.sh install_tern).
#   The guard (tests/conformance/lib.sh, inet tern_kt_guard) runs in node 2's netns too, and node
#   1's rejects what comes from the node network for anywhere off the cluster: node 2's traffic
#   leaves through node 1, and no test traffic leaves the machine.
# - Identity: client certificate system:node:tern-node2 (system:nodes, so the Node authorizer and
#   NodeRestriction apply) and a serving certificate for 10.99.219.2, from the tier's CA
#   ($KT/pki, bind-mounted read-only at the same path); the kubelet on the standard 10250 of its
#   own address.
# - Images: a local registry (distribution, the critest case's program) on 10.99.219.1:15000
#   holds node 1's images (the pause image, tern's; the e2e images in conformance mode), pushed
#   from node 1's containerd; node 2's containerd sends
#   every registry there (certs.d/_default/hosts.toml `server`), so the DaemonSet's image and the
#   sandbox image are pulled, never copied by hand.
# - Teardown (node2_down, first thing in lib.sh's `down`): the kubelet stopped, the pods' sandboxes
#   stopped and removed through node 2's CRI (tern's DEL on node 2), the container removed, the
#   veth, router netns, bridge, cgroups under /tern-kube2, mounts and files under $KT/node2 gone. lib.sh's own
#   teardown removes node 1's routes into the pod ranges, node routes included.

NODE2=tern-node2
NODE_NET=10.99.219.0/24
NODE_NET6="${NODE_IP6:+fd99:219::/64}"
# host-gw (node 2 on node 1's bridge) or vxlan (node 2 on its own subnet behind kt-router)
NODE_ROUTES="${TERN_CLUSTER_NODE_ROUTES:-host-gw}"
ROUTER_NS=kt-router
SWITCH_NS=kt-switch
# NODE_NETS*: the node networks as nft set elements (one subnet with host-gw, two with vxlan)
if [ "$NODE_ROUTES" = vxlan ]; then
    NODE2_IP=10.99.218.2
    NODE2_IP6="${NODE_IP6:+fd99:218::2}"
    NODE2_NET=10.99.218.0/24
    NODE2_NET6="${NODE_IP6:+fd99:218::/64}"
    NODE_NETS="$NODE_NET, $NODE2_NET"
    NODE_NETS6="${NODE_IP6:+$NODE_NET6, $NODE2_NET6}"
    # the router's address on each subnet: node 1's route to node 2's and node 2's default
    ROUTER_IP1=10.99.219.254
    ROUTER_IP1_6=fd99:219::fe
    ROUTER_IP2=10.99.218.254
    ROUTER_IP2_6=fd99:218::fe
else
    NODE2_IP=10.99.219.2
    NODE2_IP6="${NODE_IP6:+fd99:219::2}"
    NODE_NETS=$NODE_NET
    NODE_NETS6=$NODE_NET6
fi
NODE2_IPS="$NODE2_IP${NODE2_IP6:+,$NODE2_IP6}"
# the address node 2 moves to in scripts/two-nodes' readdress case (in its serving certificate)
NODE2_IP_NEXT="${NODE2_IP%.*}.3"
BRIDGE=kt-br0
NODE2_VETH=kt-n2h
NODE2_CTR=tern-kt-node2
NODE2_CGROUP=/tern-kube2
# on node 1's address (lib.sh's NODE_IP, defined after this file is sourced)
NODE2_REGISTRY=10.99.219.1:15000
NODE2_PACKAGES=iproute2,iptables,nftables,runc,ca-certificates,procps,iputils-ping,conntrack
NODE2_CACHE="${TERN_GO_CACHE:-/var/cache/tern-build}/node2"
TWO_NODES=0
[ "${TERN_CLUSTER_NODES:-1}" != 2 ] || TWO_NODES=1

# node2_podman ARGS...: podman with node 2's private state (nothing in the machine's own).
node2_podman() {
    local p="$KT/node2/podman"
    podman --root "$p/root" --runroot "$p/run" --tmpdir "$p/tmp" --storage-driver vfs \
        --cgroup-manager cgroupfs --events-backend file --cni-config-dir "$p/cni" "$@"
}

# node2_exec COMMAND...: COMMAND inside node 2 (its namespaces, its root filesystem).
node2_exec() { node2_podman exec "$NODE2_CTR" "$@"; }

# node2_crictl ARGS...: crictl against node 2's containerd.
node2_crictl() {
    node2_exec "$GOBIN_DIR/cri-tools/crictl" --runtime-endpoint unix:///run/containerd/containerd.sock \
        --image-endpoint unix:///run/containerd/containerd.sock --timeout 30s --config /dev/null "$@"
}

# node2_rootfs: prints the path of node 2's root filesystem tarball, building it (mmdebstrap,
# 63-78 s here) when the package list changed. Called in a command substitution, where errexit
# does not hold: each step's failure returns.
node2_rootfs() {
    local key out
    key=$(printf '%s' "$NODE2_PACKAGES" | sha256sum | cut -c1-16)
    out="$NODE2_CACHE/rootfs-$key.tar"
    if [ ! -f "$out" ]; then
        mkdir -p "$NODE2_CACHE"
        rm -rf "$NODE2_CACHE"/rootfs-*.tar "$NODE2_CACHE"/rootfs-*.tar.tmp
        log "node 2: mmdebstrap bookworm ($NODE2_PACKAGES)"
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

# bridge_address: node 1's address on the node network (lib.sh's node_address in two-node mode),
# on the veth kt-node0 whose peer is cabled outside node 1's netns, as an operator's NIC is to a
# switch or router that is not the node. host-gw: the peer is a port of the bridge kt-br0 in the
# switch netns kt-switch, where node 2's veth is another port. vxlan: the peer is the router's
# port on node 1's subnet, in the router netns. Never a bridge in node 1's netns: br_netfilter
# (bridge-nf-call-iptables, on here) would run node 1's conntrack, kube-proxy's NAT and tern's
# egress NAT a second time on the frames it bridges, and a pod's connection to the other node's
# NodePort was lost (docs/DESIGN.md, "The two-node tier").
bridge_address() {
    local peer=${NODE_LINK%0}1 ns=$SWITCH_NS
    [ "$NODE_ROUTES" != vxlan ] || ns=$ROUTER_NS
    local p=(ip netns exec "$ns")
    if [ "$NODE_ROUTES" = vxlan ]; then
        router_netns
    else
        switch_netns
    fi
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

# node2_pki: node 2's kubelet client certificate and kubeconfig, and its serving certificate.
node2_pki() {
    cert kubelet2 "system:node:$NODE2" system:nodes
    cert kubelet2-serving "system:node:$NODE2" system:nodes "IP:$NODE2_IP,IP:$NODE2_IP_NEXT,${NODE2_IP6:+IP:$NODE2_IP6,}IP:127.0.0.1,DNS:$NODE2"
    kubeconfig kubelet2
}

# node2_guard_rules: the extra rules of node 1's guard in two-node mode: what comes from the
# node network (node 2 itself, or its pods after its egress NAT) may reach the cluster's ranges
# and the node network, nothing else; pods may reach node 2's address.
node2_guard_rules() {
    nft insert rule inet tern_kt_guard forward ip saddr "$CLUSTER_CIDR" ip daddr "{ $NODE_NETS }" accept
    nft add rule inet tern_kt_guard forward ip saddr "{ $NODE_NETS }" ip daddr != "{ $CLUSTER_CIDR, $NODE_NETS, $SERVICE_CIDR }" counter reject
    if [ -n "$NODE_NET6" ]; then
        nft insert rule inet tern_kt_guard forward ip6 saddr "$CLUSTER_CIDR6" ip6 daddr "{ $NODE_NETS6 }" accept
        nft add rule inet tern_kt_guard forward ip6 saddr "{ $NODE_NETS6 }" ip6 daddr != "{ $CLUSTER_CIDR6, $NODE_NETS6, $SERVICE_CIDR6 }" counter reject
    fi
}

# node2_registry: the local registry on node 1's address, with node 1's images pushed from its
# containerd, under their paths without the registry host (containerd asks a mirror for
# /v2/<path>/manifests/<tag>?ns=<registry>).
node2_registry() {
    local r="$KT/registry" img
    mkdir -p "$r/data"
    cat >"$r/config.yml" <<YAML
version: 0.1
log:
  level: warn
storage:
  filesystem:
    rootdirectory: $r/data
http:
  addr: $NODE2_REGISTRY
YAML
    start registry "$GOBIN_DIR/registry/registry" serve "$r/config.yml"
    wait_for 30 "the local registry at $NODE2_REGISTRY" curl -sf "http://$NODE2_REGISTRY/v2/"
    # every named image of node 1's (the tier's and, in conformance mode, the e2e ones), under its
    # path without the registry host: localhost/tern-pause:test -> tern-pause:test,
    # ghcr.io/tern-cni/tern:0.1.0 -> tern-cni/tern:0.1.0
    for img in $(ctr -n k8s.io images ls -q); do
        case "$img" in *@*|sha256:*) continue ;; esac
        ctr -n k8s.io images push --plain-http "$NODE2_REGISTRY/${img#*/}" "$img" >&2
    done
}

# node2_files DIR: node 2's configuration in its root filesystem DIR: containerd's (registry
# mirror), the kubelet's, and PID 1.
node2_files() {
    local fs=$1 e=/etc/tern-node2
    mkdir -p "$fs$e/certs.d/_default" "$fs/opt/cni/bin" "$fs/etc/cni/net.d" "$fs/var/log/tern-node2"
    # what a node's kubernetes-cni package brings (as on node 1)
    cp /usr/lib/cni/loopback /usr/lib/cni/host-local "$fs/opt/cni/bin/"
    cat >"$fs$e/certs.d/_default/hosts.toml" <<TOML
# every registry (ghcr.io, localhost, registry.k8s.io) from the tier's local one, never upstream
server = "http://$NODE2_REGISTRY"
[host."http://$NODE2_REGISTRY"]
  capabilities = ["pull", "resolve"]
TOML
    containerd_config /var/lib/containerd /run/containerd /run/containerd/containerd.sock "$e/certs.d" \
        /opt/cni/bin /etc/cni/net.d >"$fs$e/containerd.toml"
    cat >"$fs$e/kubelet.yaml" <<YAML
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: $NODE2_IP
port: 10250
healthzBindAddress: 127.0.0.1
healthzPort: 10248
readOnlyPort: 0
cgroupDriver: cgroupfs
cgroupRoot: /kubelet
containerRuntimeEndpoint: unix:///run/containerd/containerd.sock
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: false}
  x509: {clientCAFile: $KT/pki/ca.crt}
authorization: {mode: AlwaysAllow}
tlsCertFile: $KT/pki/kubelet2-serving.crt
tlsPrivateKeyFile: $KT/pki/kubelet2-serving.key
YAML
    kubelet_config_common >>"$fs$e/kubelet.yaml"
    [ -z "$CLUSTER_DNS" ] || printf 'clusterDNS: [%s]\nclusterDomain: cluster.local\n' "$CLUSTER_DNS" >>"$fs$e/kubelet.yaml"
    # kube-proxy when node 1 runs one (tests/conformance/lib.sh start_kube_proxy): the same
    # configuration for node 2, in its netns (healthz and metrics on its own loopback)
    if [ -f "$KT/kube-proxy/config.yaml" ]; then
        sed -e "s|^hostnameOverride: .*|hostnameOverride: $NODE2|" \
            -e "s|^nodePortAddresses: .*|nodePortAddresses: [\"$NODE2_IP/32\"${NODE2_IP6:+, \"$NODE2_IP6/128\"}]|" \
            "$KT/kube-proxy/config.yaml" >"$fs$e/kube-proxy.yaml"
    fi
    # the kubelet, on its own so that a check can restart it (node2_restart_kubelet)
    cat >"$fs/usr/local/sbin/tern-node2-kubelet" <<KUBELET
#!/bin/sh
exec $K8S_BIN/kubelet --config $e/kubelet.yaml --kubeconfig $KT/pki/kubelet2.kubeconfig \\
    --root-dir /var/lib/kubelet --hostname-override $NODE2 --node-ip \${NODE2_IPS:-$NODE2_IPS} --v=1 >>/var/log/tern-node2/kubelet.log 2>&1
KUBELET
    chmod 0755 "$fs/usr/local/sbin/tern-node2-kubelet"
    # PID 1: the variables are expanded here, the rest in node 2
    cat >"$fs/usr/local/sbin/tern-node2-init" <<INIT
#!/bin/bash
# node 2's PID 1 (written by tests/cluster/node2.sh): waits for its address (the host moves the
# veth in after the start), then runs containerd and the kubelet until one of them exits.
set -u
log=/var/log/tern-node2
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
    ip -o addr show dev eth0 2>/dev/null | grep -q " $NODE2_IP/" && break
    sleep 0.25
done
export PATH="$GOBIN_DIR/containerd:\$PATH"
containerd --config $e/containerd.toml --log-level warn >>\$log/containerd.log 2>&1 &
echo \$! >/run/containerd.pid
for _ in \$(seq 1 120); do [ -S /run/containerd/containerd.sock ] && break; sleep 0.25; done
/usr/local/sbin/tern-node2-kubelet &
echo \$! >/run/kubelet.pid
if [ -f $e/kube-proxy.yaml ]; then
    $GOBIN_DIR/e2e/kube-proxy --config $e/kube-proxy.yaml --v=1 >>\$log/kube-proxy.log 2>&1 &
fi
trap 'kill \$(cat /run/kubelet.pid /run/containerd.pid) 2>/dev/null; exit 0' TERM INT
# a component that exits ends node 2, but for the kubelet stopped by node2_down (/run/draining):
# containerd stays for the pods' teardown through the CRI
while :; do
    wait -n
    [ -e /run/draining ] && kill -0 "\$(cat /run/containerd.pid)" 2>/dev/null || break
done
echo "tern-node2-init: a component exited" >>\$log/init.log
INIT
    chmod 0755 "$fs/usr/local/sbin/tern-node2-init"
}

# router_netns: with vxlan, the router between the two node subnets (netns kt-router), made once:
# forwarding on, no default route, and a guard that forwards only between the two node subnets.
router_netns() {
    [ ! -e "/run/netns/$ROUTER_NS" ] || return 0
    local r=(ip netns exec "$ROUTER_NS")
    ip netns add "$ROUTER_NS"
    "${r[@]}" ip link set lo up
    "${r[@]}" sysctl -qw net.ipv4.ip_forward=1
    [ -z "$NODE2_IP6" ] || "${r[@]}" sysctl -qw net.ipv6.conf.all.forwarding=1
    local v6=''
    [ -z "$NODE2_IP6" ] || v6="
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

# node2_router: with vxlan, node 2's veth (the host end, $NODE2_VETH) moved into the router netns
# (router_netns, which node 1's link already reaches), and node 1's route to node 2's subnet
# through it.
node2_router() {
    local r=(ip netns exec "$ROUTER_NS")
    router_netns
    ip link set "$NODE2_VETH" netns "$ROUTER_NS"
    "${r[@]}" ip addr add "$ROUTER_IP2/24" dev "$NODE2_VETH"
    [ -z "$NODE2_IP6" ] || "${r[@]}" ip addr add "$ROUTER_IP2_6/64" dev "$NODE2_VETH" nodad
    "${r[@]}" ip link set "$NODE2_VETH" up
    ip route replace "$NODE2_NET" via "$ROUTER_IP1"
    [ -z "$NODE2_IP6" ] || ip -6 route replace "$NODE2_NET6" via "$ROUTER_IP1_6"
}

# node2_network PID: the veth into node 2's netns (PID's), its addresses and default routes, and
# the guard in its netns. With host-gw the host end is on node 1's bridge and node 1 is the
# default gateway; with vxlan it is in the router netns, the gateway.
node2_network() {
    local pid=$1 gw=$NODE_IP gw6=$NODE_IP6
    ip link add "$NODE2_VETH" type veth peer name kt-n2c
    if [ "$NODE_ROUTES" = vxlan ]; then
        node2_router
        gw=$ROUTER_IP2 gw6=$ROUTER_IP2_6
    else
        switch_netns
        ip link set "$NODE2_VETH" netns "$SWITCH_NS"
        ip netns exec "$SWITCH_NS" ip link set "$NODE2_VETH" master "$BRIDGE" up
    fi
    ip link set kt-n2c netns "$pid"
    nsenter -t "$pid" -n ip link set kt-n2c name eth0
    nsenter -t "$pid" -n ip addr add "$NODE2_IP/24" dev eth0
    [ -z "$NODE2_IP6" ] || nsenter -t "$pid" -n ip addr add "$NODE2_IP6/64" dev eth0 nodad
    nsenter -t "$pid" -n ip link set eth0 up
    nsenter -t "$pid" -n ip link set lo up
    nsenter -t "$pid" -n ip route add default via "$gw"
    [ -z "$NODE2_IP6" ] || nsenter -t "$pid" -n ip -6 route add default via "$gw6"
    # the guard in node 2's netns: its pods reach the cluster and the node networks, nothing else
    local v6=''
    if [ -n "$NODE_NET6" ]; then
        v6="
        ip6 saddr $CLUSTER_CIDR6 ip6 daddr { $CLUSTER_CIDR6, $NODE_NETS6 } accept
        ip6 saddr $CLUSTER_CIDR6 counter reject
        ip6 daddr $SERVICE_CIDR6 counter reject"
    fi
    nsenter -t "$pid" -n nft -f - <<NFT
table inet tern_kt_guard {
    chain forward {
        type filter hook forward priority filter; policy accept;
        ip saddr $CLUSTER_CIDR ip daddr { $CLUSTER_CIDR, $NODE_NETS } accept
        ip saddr $CLUSTER_CIDR counter reject
        ip daddr $SERVICE_CIDR counter reject$v6
    }
}
NFT
}

# node2_up: node 2 from nothing to a registered Node with its podCIDRs (node 1's control plane,
# bridge and images must be up: cluster_up or conformance_up with TERN_CLUSTER_NODES=2).
node2_up() {
    local n="$KT/node2" tarball pid t0=$SECONDS
    [ "$TWO_NODES" = 1 ] || { log "node2_up: TERN_CLUSTER_NODES=2 is not set"; return 1; }
    [ "$API" = "https://$NODE_IP:$API_PORT" ] || { log "node2_up: the API server must bind $NODE_IP (TERN_CLUSTER_API_ADDR)"; return 1; }
    mkdir -p "$n/rootfs" "$n/podman/cni" "$n/podman/tmp"
    if [ ! -f "$KT/pki/kubelet2.crt" ]; then node2_pki; fi
    node2_registry
    tarball=$(node2_rootfs)
    tar -xf "$tarball" -C "$n/rootfs"
    node2_files "$n/rootfs"
    node2_podman run -d --name "$NODE2_CTR" --hostname "$NODE2" --privileged --cgroupns=private \
        --cgroup-parent "$NODE2_CGROUP" --network none \
        --ulimit nofile=20000:20000 --ulimit nproc=32768:32768 -e container=podman \
        --tmpfs /run -v "$GOBIN_DIR:$GOBIN_DIR:ro" -v "$KT/pki:$KT/pki:ro" \
        --rootfs "$n/rootfs" /usr/local/sbin/tern-node2-init >"$n/container-id"
    pid=$(node2_podman inspect -f '{{.State.Pid}}' "$NODE2_CTR")
    node2_network "$pid"
    wait_for 120 "node $NODE2 registered" kubectl get node "$NODE2"
    local want=1
    [ -z "$CLUSTER_CIDR6" ] || want=2
    wait_for 60 "node $NODE2 podCIDRs ($want)" bash -c "[ \"\$($K8S_BIN/kubectl --kubeconfig $KT/pki/admin.kubeconfig get node $NODE2 -o jsonpath='{.spec.podCIDRs[*]}' | wc -w)\" = $want ]"
    log "node 2 ($NODE2, $NODE2_IPS) registered in $((SECONDS - t0))s"
}

# node2_restart_kubelet [NODE_IPS]: node 2's kubelet stopped and started again (PID 1 keeps
# containerd, as for node2_down), with --node-ip NODE_IPS when given; a kubelet registers its
# Node only when it starts.
node2_restart_kubelet() {
    # shellcheck disable=SC2016 # expanded in node 2
    node2_exec sh -c 'touch /run/draining; kill $(cat /run/kubelet.pid); while kill -0 $(cat /run/kubelet.pid) 2>/dev/null; do sleep 0.2; done'
    # shellcheck disable=SC2016 # expanded in node 2
    node2_podman exec -d -e NODE2_IPS="${1:-$NODE2_IPS}" "$NODE2_CTR" sh -c 'echo $$ >/run/kubelet.pid; exec /usr/local/sbin/tern-node2-kubelet'
}

# node2_down: node 2 and its network gone; nothing of it left on the machine.
node2_down() {
    local n="$KT/node2" ids id h
    if [ -d "$n/podman" ] && node2_podman container exists "$NODE2_CTR" 2>/dev/null; then
        # the kubelet first (it would restart the pods), then each sandbox through the CRI: tern's
        # DEL on node 2, as a node's drain would run it
        # shellcheck disable=SC2016 # expanded in node 2
        node2_exec sh -c 'touch /run/draining; kill $(cat /run/kubelet.pid) 2>/dev/null' || true
        ids=$(node2_crictl pods -q 2>/dev/null || true)
        for id in $ids; do
            node2_crictl stopp "$id" >/dev/null 2>&1 || true
            node2_crictl rmp -f "$id" >/dev/null 2>&1 || true
        done
        node2_podman rm -f -t 5 "$NODE2_CTR" >/dev/null 2>&1 || true
    fi
    ip link del "$NODE2_VETH" 2>/dev/null || true
    # the router (vxlan) or the switch with its bridge (host-gw), and the veths into them (node
    # 1's kt-node0 with its peer); node 1's routes through them go with them
    ip netns del "$ROUTER_NS" 2>/dev/null || true
    ip netns del "$SWITCH_NS" 2>/dev/null || true
    ip link del "$BRIDGE" 2>/dev/null || true
    # conmon (podman's monitor) can outlive `podman rm` by a moment: its cgroup is only removable
    # once empty (seen here: an empty conmon cgroup left under /tern-kube2); what is still in node
    # 2's cgroups after 10 s is killed
    local procs end=$((SECONDS + 10))
    while procs=$(find "/sys/fs/cgroup/pids$NODE2_CGROUP" -name cgroup.procs -exec cat {} + 2>/dev/null) && [ -n "$procs" ]; do
        if [ "$SECONDS" -ge "$end" ]; then
            # shellcheck disable=SC2086 # one pid a word
            kill -KILL $procs 2>/dev/null || true
            sleep 0.5
            break
        fi
        sleep 0.2
    done
    for h in /sys/fs/cgroup/*/; do
        [ ! -d "$h${NODE2_CGROUP#/}" ] || find "$h${NODE2_CGROUP#/}" -depth -type d -exec rmdir {} + 2>/dev/null || true
    done
    if [ -d "$n" ]; then
        { grep -o " ${n}[^ ]*" /proc/mounts || true; } | sort -r | while read -r m; do umount -l "$m" 2>/dev/null || true; done
        rm -rf "$n"
    fi
}
