# shellcheck shell=bash
# tests/cluster/down.sh — the tier's teardown (`down`): the container nodes, the agent's and the tier's
# processes, tables, routes, links, cgroups, mounts and files, then a check that nothing is left.
# Sourced by tests/cluster/lib.sh.

# --- teardown ----------------------------------------------------------------------------------

down() {
    log "tearing down $KT"
    # the container nodes first (their podman state is under $KT), whether or not
    # TERN_CLUSTER_NODES is set now, then the switch or router between them; node 1 drained
    local n
    for ((n = 2; n <= ${#N_NAME[@]}; n++)); do container_down "$n"; done
    ip netns del "$ROUTER_NS" 2>/dev/null || true
    ip netns del "$SWITCH_NS" 2>/dev/null || true
    ip link del "$BRIDGE" 2>/dev/null || true
    if [ -S "$CRI_SOCK" ]; then node_drain 1; fi
    for c in kube-proxy kubelet scheduler controller-manager apiserver containerd crio etcd registry; do stop "$c"; done
    crio_down
    # shims and pod processes left by a killed containerd: by their cgroup under $CGROUP_ROOT
    local pids
    pids=$(cat /sys/fs/cgroup/pids$CGROUP_ROOT/cgroup.procs /sys/fs/cgroup/pids$CGROUP_ROOT/*/cgroup.procs \
        /sys/fs/cgroup/pids$CGROUP_ROOT/*/*/cgroup.procs /sys/fs/cgroup/pids$CGROUP_ROOT/*/*/*/cgroup.procs 2>/dev/null || true)
    [ -z "$pids" ] || kill -KILL $pids 2>/dev/null || true
    pkill -KILL -f "containerd-shim-runc-v2 .*-address $KT/" 2>/dev/null || true
    sleep 0.5
    { grep -o " $KT[^ ]*" /proc/mounts || true; } | sort -r | while read -r m; do umount -l "$m" 2>/dev/null || true; done
    for h in /sys/fs/cgroup/*/; do
        [ ! -d "$h${CGROUP_ROOT#/}" ] || find "$h${CGROUP_ROOT#/}" -depth -type d -exec rmdir {} + 2>/dev/null || true
    done
    # only tern's files and what the tier copied, never a file that was there before the run
    local f
    for f in $(tern_node_files) $(cat "$KT/created" 2>/dev/null); do
        grep -qxF "$f" "$KT/preexisting" 2>/dev/null || rm -f "$f"
    done
    rm -f /run/tern/agent.sock /run/tern/metrics.sock && rmdir /run/tern 2>/dev/null || true
    # tern's state and lease of a sandbox of this tier whose DEL never ran (a case that stopped
    # midway; the conflist already gone): the next run's uninstall would count it as a tern pod
    local st id
    for st in /run/cni/tern/tern/*.json; do
        grep -qF "\"$KT/" "$st" 2>/dev/null || continue
        id=$(sed -n 's/^ *"containerId": *"\([0-9a-f]*\)".*/\1/p' "$st")
        rm -f "$st"
        # a lease is `<containerID>\r\n<ifname>` (host-local's format)
        [ -z "$id" ] || { grep -lxE "$id"$'\r?' /var/lib/cni/networks/tern/* 2>/dev/null || true; } | xargs -r rm -f
    done
    for f in "$KT"/aside/*; do if [ -e "$f" ]; then mv "$f" "$CNI_NET/"; fi; done
    ip link del "$NODE_LINK" 2>/dev/null || true
    # the agent's egress NAT table, unless the machine had one before the run
    [ -e "$KT/nat-preexisting" ] || nft delete table inet tern_nat 2>/dev/null || true
    # and its NetworkPolicy table: it outlives the agent by design, and its verdict maps name this
    # run's pod addresses, which the next run's pods may get
    [ -e "$KT/netpol-preexisting" ] || nft delete table inet tern_netpol 2>/dev/null || true
    ip link del "$NR_LINK" 2>/dev/null || true
    # the agent's VXLAN device (TERN_CLUSTER_NODE_ROUTES=vxlan): it outlives the agent, as the
    # node routes do; its routes, neighbour and FDB entries go with it
    [ -e "$KT/vxlan-preexisting" ] || ip link del tern.vxlan 2>/dev/null || true
    # kube-proxy's tables (it leaves them when stopped) and the guard, when this tier made them
    if [ -d "$KT/kube-proxy" ]; then
        "$GOBIN_DIR/e2e/kube-proxy" --cleanup >/dev/null 2>&1 || true
        nft delete table ip kube-proxy 2>/dev/null || true
        nft delete table ip6 kube-proxy 2>/dev/null || true
    fi
    [ ! -e "$KT/guard" ] || nft delete table inet tern_kt_guard 2>/dev/null || true
    ip -o route show | awk '/^10\.99\.21[01]\./ {print $1}' | while read -r r; do ip route del "$r" 2>/dev/null || true; done
    ip -o -6 route show | awk '/^fd99:210:/ {print $1}' | while read -r r; do ip -6 route del "$r" 2>/dev/null || true; done
    # IPv6 forwarding, which tern's ADD turned on for the pods' IPv6 addresses, back as it was
    [ ! -s "$KT/ipv6-forwarding" ] || sysctl -qw net.ipv6.conf.all.forwarding="$(cat "$KT/ipv6-forwarding")" || true
    # the conntrack CLOSE_WAIT timeout, which the conformance tier's kube-proxy set
    [ ! -s "$KT/conntrack-close-wait" ] || sysctl -qw net.netfilter.nf_conntrack_tcp_timeout_close_wait="$(cat "$KT/conntrack-close-wait")" || true
    rm -rf "$KT"
}
