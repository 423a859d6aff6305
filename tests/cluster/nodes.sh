# shellcheck shell=bash
# tests/cluster/nodes.sh — the tier's nodes, one set of steps for every node. Node 1 is this
# machine's root netns; node 2 and on (TERN_CLUSTER_NODES) are privileged podman containers, whose
# own parts (the container, its root filesystem and PID 1, its cabling) are container.sh's. A step
# takes the node's number N; a node comes up in one order, in two halves:
#   node_runtime_up N  its kubelet certificates, its files (the CNI dirs with what a node's
#                      `kubernetes-cni` package brings, containerd's configuration, the kubelet's
#                      configuration and command), its runtime (node 2 and on: the container)
#   node_kubelet_up N  the guard (inet tern_kt_guard), the kubelet, until the Node has registered
#                      and been given a podCIDR of each family
# with node 1's images imported between the two (import_images, conformance_images). Also here:
# the files tern's DaemonSet writes on a node and the refusal to run over another install.
# Sourced by tests/cluster/lib.sh after its variables.

CNI_BIN=/opt/cni/bin
CNI_NET=/etc/cni/net.d
CGROUP_ROOT=/tern-kube
# Node 1's address: kubelets refuse a loopback node IP, so it is on a veth of its own (local
# traffic only), and in dual stack an IPv6 one beside it (no duplicate address detection).
NODE_IP=10.99.219.1
NODE_LINK=kt-node0
# A test network of the node (a veth pair) for the fake Nodes of the node-routes case.
NR_LINK=kt-nr0
NODES="${TERN_CLUSTER_NODES:-1}"
TWO_NODES=0
[ "$NODES" -lt 2 ] || TWO_NODES=1
# host-gw (the nodes on one switch) or vxlan (each container node on a subnet of its own, behind
# the router netns)
NODE_ROUTES="${TERN_CLUSTER_NODE_ROUTES:-host-gw}"
NODE_NET=10.99.219.0/24
NODE_NET6="${NODE_IP6:+fd99:219::/64}"
# NODE_NETS*: the node networks as nft set elements (node 1's subnet, and with vxlan each
# container node's)
NODE_NETS=$NODE_NET NODE_NETS6=$NODE_NET6

# N_*[N]: node N's name and addresses (node 2 and on: 10.99.219.N and fd99:219::N on node 1's
# subnet, or with vxlan 10.99.(220-N).N and fd99:(220-N)::N on a /24 and /64 of their own); N_FS its
# filesystem as this machine sees it, N_ETC where its configuration is (as the node names it),
# N_SOCK its CRI socket.
N_NAME=([1]="$NODE") N_IP=([1]="$NODE_IP") N_IP6=([1]="$NODE_IP6") N_FS=([1]='')
N_ETC=([1]="$KT/etc") N_SOCK=([1]="$CRI_SOCK")
for ((n = 2; n <= (NODES > 2 ? NODES : 2); n++)); do
    sub=219
    if [ "$NODE_ROUTES" = vxlan ]; then
        sub=$((220 - n))
        NODE_NETS+=", 10.99.$sub.0/24"
        NODE_NETS6+="${NODE_IP6:+, fd99:$sub::/64}"
    fi
    N_NAME[n]=tern-node$n N_IP[n]=10.99.$sub.$n N_IP6[n]=${NODE_IP6:+fd99:$sub::$n}
    N_FS[n]=$KT/node$n/rootfs N_ETC[n]=/etc/tern-node N_SOCK[n]=/run/containerd/containerd.sock
done
unset n sub

node_ips() { echo "${N_IP[$1]}${N_IP6[$1]:+,${N_IP6[$1]}}"; }

# node_exec N COMMAND...: COMMAND on node N (node 2 and on: in its container); node_net N
# COMMAND...: this machine's COMMAND in node N's netns.
node_exec() { if [ "$1" = 1 ]; then "${@:2}"; else node_podman "$1" exec "$(node_ctr "$1")" "${@:2}"; fi; }
node_net() { if [ "$1" = 1 ]; then "${@:2}"; else nsenter -t "$(node_pid "$1")" -n "${@:2}"; fi; }

# node_crictl N ARGS...: crictl against node N's runtime.
node_crictl() {
    local n=$1
    shift
    node_exec "$n" "$GOBIN_DIR/cri-tools/crictl" --runtime-endpoint "unix://${N_SOCK[$n]}" \
        --image-endpoint "unix://${N_SOCK[$n]}" --timeout 30s --config /dev/null "$@"
}
crictl() { node_crictl 1 "$@"; }

# The files tern's DaemonSet writes on a node.
tern_node_files() {
    # tern-uninstalling: the uninstall's mark, left when a case stopped while tern was draining
    echo "$CNI_NET/10-tern.conflist" "$CNI_NET/tern-kubeconfig" "$CNI_NET/tern-uninstalling" /run/tern/agent.sock /run/tern/metrics.sock
    for p in tern tern-tuning tern-ipam tern-lookup portmap bandwidth .tern-reference-plugins; do echo "$CNI_BIN/$p"; done
}

# check_node_clean: refuses to run over another tern install on this machine.
check_node_clean() {
    local f
    for f in $CNI_NET/10-tern.conflist $CNI_NET/tern-kubeconfig; do
        if [ -e "$f" ]; then
            log "$f exists: another tern install is on this machine; remove it or run elsewhere"
            return 1
        fi
    done
    mkdir -p "$KT/aside"
    # Another network's conflist (podman's 87-podman-bridge.conflist on these machines) would make
    # the node Ready before tern is installed: set aside for the run, put back by `down`.
    for f in $CNI_NET/*.conf $CNI_NET/*.conflist $CNI_NET/*.json; do
        [ -e "$f" ] && mv "$f" "$KT/aside/"
    done
    ls -d $CNI_BIN/* $CNI_NET/* 2>/dev/null >"$KT/preexisting" || true
    nft list table inet tern_nat >/dev/null 2>&1 && touch "$KT/nat-preexisting"
    nft list table inet tern_netpol >/dev/null 2>&1 && touch "$KT/netpol-preexisting"
    ip link show tern.vxlan >/dev/null 2>&1 && touch "$KT/vxlan-preexisting"
    # tern's ADD turns IPv6 forwarding on for a pod with an IPv6 address (as ptp does): `down` puts
    # the machine's value back
    sysctl -n net.ipv6.conf.all.forwarding >"$KT/ipv6-forwarding" 2>/dev/null || true
    return 0
}

# node_address: node 1's address on kt-node0, before the API server that binds it: a /32 with its
# peer up beside it, or with container nodes a /24 on the node network (container.sh
# bridge_address).
node_address() {
    if [ "$TWO_NODES" = 1 ]; then
        bridge_address
        return
    fi
    ip link show "$NODE_LINK" >/dev/null 2>&1 || ip link add "$NODE_LINK" type veth peer name "${NODE_LINK%0}1"
    ip addr replace "$NODE_IP/32" dev "$NODE_LINK"
    [ -z "$NODE_IP6" ] || ip addr replace "$NODE_IP6/128" dev "$NODE_LINK" nodad
    ip link set "$NODE_LINK" up
    ip link set "${NODE_LINK%0}1" up
}

# node_pki N: node N's kubelet client certificate (system:nodes, so the Node authorizer and
# NodeRestriction apply) with its kubeconfig, and its serving certificate (node 2 and on: also for
# the address the `node2_readdressed` case moves it to, .N+1).
node_pki() {
    local n=$1 c=kubelet next=''
    [ "$n" = 1 ] || c=kubelet$n next="IP:${N_IP[$n]%.*}.$((n + 1)),"
    cert "$c" "system:node:${N_NAME[$n]}" system:nodes
    cert "$c-serving" "system:node:${N_NAME[$n]}" system:nodes \
        "IP:${N_IP[$n]},$next${N_IP6[$n]:+IP:${N_IP6[$n]},}IP:127.0.0.1,DNS:${N_NAME[$n]}"
    kubeconfig "$c"
}

# node_runtime_up N: node N's certificates, filesystem (container nodes) and files, then its
# runtime, until its CRI answers.
node_runtime_up() {
    node_pki "$1"
    if [ "$1" != 1 ]; then container_fs "$1"; fi
    node_files "$1"
    if [ "$1" = 1 ]; then start_runtime; else container_up "$1"; fi
    wait_for 60 "${N_NAME[$1]}'s CRI" node_crictl "$1" version
}

# node_kubelet_up N: the guard, then node N's kubelet, until its Node has registered and has a
# podCIDR of each family.
node_kubelet_up() {
    local n=$1 want=1 t0=$SECONDS
    guard_up "$n"
    kubelet_start "$n"
    wait_for 120 "node ${N_NAME[$n]} registered" kubectl get node "${N_NAME[$n]}"
    [ -z "$CLUSTER_CIDR6" ] || want=2
    wait_for 60 "node ${N_NAME[$n]} podCIDRs ($want)" bash -c "[ \"\$($K8S_BIN/kubectl --kubeconfig $KT/pki/admin.kubeconfig get node ${N_NAME[$n]} -o jsonpath='{.spec.podCIDRs[*]}' | wc -w)\" = $want ]"
    log "node $n (${N_NAME[$n]}, $(node_ips "$n")) registered in $((SECONDS - t0))s"
}

# kubelet_start N [NODE_IPS]: node N's kubelet, with --node-ip NODE_IPS when given (a kubelet
# registers its Node only when it starts); kubelet_stop N stops it, its pods left running.
kubelet_start() {
    local n=$1 h
    if [ "$n" = 1 ]; then
        # the cgroupRoot in every v1 hierarchy (node 2 and on: their PID 1 makes theirs)
        for h in /sys/fs/cgroup/*/; do
            if [ -f "$h/cgroup.procs" ]; then mkdir -p "$h${CGROUP_ROOT#/}"; fi
        done
        # Its root a shared mount point before it starts: else the kubelet bind-mounts it onto
        # itself (MakeRShared) while its podresources listener renames a socket into it, a rename
        # that straddles the mount fails with EXDEV and the kubelet exits (CI, 2026-12-07).
        mkdir -p "$KT/kubelet/root"
        mountpoint -q "$KT/kubelet/root" || mount --bind "$KT/kubelet/root" "$KT/kubelet/root"
        mount --make-rshared "$KT/kubelet/root"
        TERN_NODE_IPS="${2:-}" start kubelet "${N_ETC[1]}/kubelet"
    else
        # the same shared root in node N's container (its / is a private mount)
        # shellcheck disable=SC2016 # expanded in the node
        node_podman "$n" exec -d -e TERN_NODE_IPS="${2:-}" "$(node_ctr "$n")" sh -c \
            'r=/var/lib/kubelet; mkdir -p $r; grep -q " $r " /proc/self/mountinfo || mount --bind $r $r; mount --make-rshared $r
             echo $$ >/run/kubelet.pid; exec /etc/tern-node/kubelet >>/var/log/tern-node/kubelet.log 2>&1'
    fi
}
kubelet_stop() {
    # shellcheck disable=SC2016 # expanded in the node
    if [ "$1" = 1 ]; then stop kubelet; else node_exec "$1" sh -c 'p=$(cat /run/kubelet.pid) && kill $p && while kill -0 $p 2>/dev/null; do sleep 0.2; done'; fi
}
kubelet_restart() {
    kubelet_stop "$1"
    kubelet_start "$@"
}

# node_drain N: the kubelet stopped (it would restart the pods), then each sandbox stopped and
# removed through node N's CRI: tern's DEL, as a node's drain runs it.
node_drain() {
    local id
    kubelet_stop "$1" || true
    for id in $(node_crictl "$1" pods -q 2>/dev/null || true); do
        node_crictl "$1" stopp "$id" >/dev/null 2>&1 || true
        node_crictl "$1" rmp -f "$id" >/dev/null 2>&1 || true
    done
}

# guard_up N: the nftables table that keeps pods' traffic on the machine, in node N's netns.
# kube-proxy DNATs service addresses before the forward hook, so traffic to a Service with
# endpoints passes as pod traffic; what is rejected is traffic to anything else (the internet, the
# host's resolver, services with no endpoints). Pods reach the pod ranges and the node (with
# container nodes: the node networks). Node 1, the node network's gateway, also rejects what
# comes from the node network for anywhere off the cluster, and what it sends to the service range.
guard_up() {
    local n=$1 to=$NODE_IP to6=$NODE_IP6 v6='' out='' from=''
    [ "$TWO_NODES" = 0 ] || to=$NODE_NETS to6=$NODE_NETS6
    if [ -n "$CLUSTER_CIDR6" ]; then
        v6="
        ip6 saddr $CLUSTER_CIDR6 ip6 daddr { $CLUSTER_CIDR6, $to6 } accept
        ip6 saddr $CLUSTER_CIDR6 counter reject
        ip6 daddr $SERVICE_CIDR6 counter reject"
    fi
    if [ "$n" = 1 ]; then
        touch "$KT/guard"
        if [ "$TWO_NODES" = 1 ]; then
            from="
        ip saddr { $NODE_NETS } ip daddr != { $CLUSTER_CIDR, $NODE_NETS, $SERVICE_CIDR } counter reject"
            [ -z "$NODE_NET6" ] || from+="
        ip6 saddr { $NODE_NETS6 } ip6 daddr != { $CLUSTER_CIDR6, $NODE_NETS6, $SERVICE_CIDR6 } counter reject"
        fi
        out="
    chain output {
        type filter hook output priority filter; policy accept;
        ip daddr $SERVICE_CIDR counter reject${SERVICE_CIDR6:+
        ip6 daddr $SERVICE_CIDR6 counter reject}
    }"
    fi
    node_net "$n" nft -f - <<NFT
table inet tern_kt_guard {
    chain forward {
        type filter hook forward priority filter; policy accept;
        ip saddr $CLUSTER_CIDR ip daddr { $CLUSTER_CIDR, $to } accept
        ip saddr $CLUSTER_CIDR counter reject
        ip daddr $SERVICE_CIDR counter reject$v6$from
    }$out
}
NFT
}
