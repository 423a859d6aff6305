# shellcheck shell=bash disable=SC2153
# (SC2153: NODE_IP, CLUSTER_CIDR and the rest are lib.sh's)
# tests/cluster/node2.sh — a second kubelet node on this machine for the real-cluster tier
# (TERN_CLUSTER_NODES=2: node.sh two_nodes_up for the Rust tier's two-node cases,
# tests/cluster/tests/cluster/two_nodes/; tests/conformance/lib.sh conformance_up for
# `scripts/conformance multinode`).
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
# the address node 2 moves to in the two-node tier's `node2_readdressed` case (in its serving certificate)
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
# shellcheck source=node2_net.sh
. "$(dirname "${BASH_SOURCE[0]}")/node2_net.sh"
# shellcheck source=node2_files.sh
. "$(dirname "${BASH_SOURCE[0]}")/node2_files.sh"

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
