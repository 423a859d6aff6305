# tests/scale/lib.sh — the bring-up `tern-bench netpol-scale` and `tern-bench scale` share
# (bench/src/cluster): the real-cluster tier's etcd and kube-apiserver (tests/cluster/lib.sh,
# v1.34.4, its ports: hence the host-tests lock) bound to HUB on a bridge in the root netns,
# deploy/'s RBAC, and real tern-agents each in a network namespace of its own on that bridge.
# What is read of them (CPU, memory, metrics) is read in Rust.
#
# Sourced after tests/cluster/lib.sh, with HUB (an address of a /16 that nothing else on the
# machine routes), KT and agent_bin (the tern-agent binary) set by the caller.
# shellcheck shell=bash disable=SC2154

# hub_up BRIDGE: the bridge in the root netns, holding HUB/16 (the API server binds there).
hub_up() {
    ip link add "$1" type bridge
    ip link set "$1" up
    ip addr add "$HUB/16" dev "$1"
}

# control_plane_up: PKI (the API server's certificate naming HUB too: lib.sh's names 127.0.0.1
# and the tier's node address), etcd, kube-apiserver with 1 h service-account tokens, and
# deploy/'s namespace, service accounts and RBAC (not the DaemonSet: no kubelet here).
control_plane_up() {
    make_pki
    cert apiserver kube-apiserver "" "IP:127.0.0.1,IP:$HUB,DNS:localhost,DNS:kubernetes"
    start_etcd
    start_apiserver --service-account-max-token-expiration 1h
    kubectl apply -f "$ROOT/deploy/00-namespace.yaml" -f "$ROOT/deploy/serviceaccounts.yaml" \
        -f "$ROOT/deploy/rbac.yaml" >/dev/null
}

# agent_netns NETNS LINK BRIDGE ADDR: NETNS with lo up and eth0 holding ADDR/16, the other end
# LINK of its veth on BRIDGE.
agent_netns() {
    local ns=$1 link=$2 bridge=$3 addr=$4
    ip netns add "$ns"
    ip link add "$link" type veth peer name eth0 netns "$ns"
    ip link set "$link" master "$bridge" up
    ip -n "$ns" link set lo up
    ip -n "$ns" link set eth0 up
    ip -n "$ns" addr add "$addr/16" dev eth0
}

# start_agent_in NETNS DIR NODE [FLAG...]: `tern-agent run` as node NODE in NETNS, with a token
# of tern/tern-agent from `kubectl create token` in DIR/sa, its kubeconfig and sockets in DIR,
# FLAG... added; its pid in DIR/pid (the agent's own: `ip netns exec` execs it), its log DIR/log,
# the time of its exec (epoch seconds) in DIR/started.
# No descriptor of the caller's but the log reaches it (the host-tests lock's, see lib.sh start).
start_agent_in() {
    local ns=$1 d=$2 node=$3
    shift 3
    mkdir -p "$d/sa"
    kubectl -n tern create token tern-agent --duration 1h >"$d/sa/token"
    cp "$KT/pki/ca.crt" "$d/sa/ca.crt"
    echo tern >"$d/sa/namespace"
    (
        for fd in /proc/self/fd/*; do
            fd=${fd##*/}
            if [ "$fd" -gt 2 ]; then eval "exec $fd>&-" 2>/dev/null || true; fi
        done
        date +%s.%N >"$d/started"
        exec ip netns exec "$ns" env TERN_LOG=info "$agent_bin" run --api-server "https://$HUB:$API_PORT" \
            --sa-dir "$d/sa" --namespace tern --kubeconfig "$d/kubeconfig" --socket "$d/agent.sock" \
            --metrics-socket "$d/metrics.sock" --node-name "$node" "$@"
    ) >"$d/log" 2>&1 &
    echo $! >"$d/pid"
}
