# tests/cluster/lib.sh — a real Kubernetes on this machine, for the real-cluster tier: its settings,
# the helpers every step uses and the control plane. Sourced by tests/cluster/node.sh (and read by
# `tern-bench pod-start`); the nodes are nodes.sh's, node_files.sh's and container.sh's, the PKI
# pki.sh's, the teardown down.sh's. docs/TESTING.md ("The real-cluster tier", its layout) says why.
#
# Invariants:
# - Everything lives under $KT (default /tmp/tern-cluster): PKI, etcd's data, each component's
#   configuration, log and pid file, containerd's root, state and sockets, the kubelet's root;
#   the programs are scripts/build-go's, from pinned modules.
# - Every component listens on loopback or on the node's address, on ports no default install
#   uses (etcd 23790/23800, apiserver 16443, kubelet 10350, controller-manager 10357, scheduler
#   10359); tern-agent's /metrics is on 0.0.0.0:9413 as deploy/ sets it. TERN_CLUSTER_API_ADDR
#   makes the API server bind and advertise that address (the lease endpoint reconciler, as
#   operators run it); TERN_CLUSTER_DNS gives the kubelets that clusterDNS.
# - Pod ranges 10.99.210.0/23 and fd99:210::/56, services 10.99.220.0/24 and fd99:220::/112,
#   node 1 10.99.219.1 and fd99:219::1 (dual stack, the default; TERN_CLUSTER_IP_FAMILY=ipv4);
#   cgroups under the cgroupfs parent /tern-kube; no registry (the images are OCI archives built
#   here and imported) but the critest case's and the container nodes'.
# - deploy/ is applied as it is, so the node's CNI paths are the real ones: the tier refuses to
#   start over another tern install, and `down` removes only what the tier or the DaemonSet put
#   there (files present before are listed in $KT/preexisting and kept), with the routes, links,
#   nft tables, sysctls and cgroups the run made.
# - TERN_CLUSTER_RUNTIME=crio puts a private CRI-O (crio.sh) in containerd's place on node 1.

KT="${KT:-/tmp/tern-cluster}"
GOBIN_DIR="${TERN_GO_CACHE:-/var/cache/tern-build}/bin"
K8S_BIN="${TERN_K8S_BIN:-$GOBIN_DIR/kubernetes}"
# The Node's name (TERN_CLUSTER_NODE_NAME: scripts/conformance sets the machine's hostname with two
# nodes, as the 2-node specs compare what a hostNetwork pod on node 1 answers with its Node's name).
NODE="${TERN_CLUSTER_NODE_NAME:-tern-node}"
API_PORT=16443
# Container nodes (TERN_CLUSTER_NODES=2 or more) reach the API server at node 1's address, so it
# binds that address unless told otherwise.
API_ADDR=127.0.0.1
[ "${TERN_CLUSTER_NODES:-1}" -lt 2 ] || API_ADDR=10.99.219.1
API_ADDR="${TERN_CLUSTER_API_ADDR:-$API_ADDR}"
# The kubelet's port on the node's address (TERN_CLUSTER_KUBELET_PORT; scripts/conformance sets the
# standard 10250, which "Proxy ... on node with explicit kubelet port" hard-codes).
KUBELET_PORT="${TERN_CLUSTER_KUBELET_PORT:-10350}"
API="https://$API_ADDR:$API_PORT"
CLUSTER_DNS="${TERN_CLUSTER_DNS:-}"
CLUSTER_CIDR=10.99.210.0/23
SERVICE_CIDR=10.99.220.0/24
# Dual stack (the default), as operators run it: IPv6 pod and service ranges beside the IPv4 ones
# (the Node gets a podCIDR of each family, Services may take both), the node's InternalIP in both
# families. fd99::/16 is a ULA range clear of this machine's own fd00::/64.
# TERN_CLUSTER_IP_FAMILY=ipv4 brings up the IPv4-only cluster (the *6 variables then empty).
IP_FAMILY="${TERN_CLUSTER_IP_FAMILY:-dual}"
case "$IP_FAMILY" in
    dual)
        CLUSTER_CIDR6=fd99:210::/56
        SERVICE_CIDR6=fd99:220::/112
        NODE_IP6=fd99:219::1
        ;;
    ipv4) CLUSTER_CIDR6='' SERVICE_CIDR6='' NODE_IP6='' ;;
    *) echo "TERN_CLUSTER_IP_FAMILY=$IP_FAMILY: dual or ipv4" >&2; exit 1 ;;
esac
# The comma-separated lists the components take (IPv4 first: the primary family).
CLUSTER_CIDRS="$CLUSTER_CIDR${CLUSTER_CIDR6:+,$CLUSTER_CIDR6}"
SERVICE_CIDRS="$SERVICE_CIDR${SERVICE_CIDR6:+,$SERVICE_CIDR6}"
SA_ISSUER="https://kubernetes.default.svc.cluster.local"
PAUSE_IMAGE="localhost/tern-pause:test"
TERN_IMAGE="${TERN_IMAGE:-ghcr.io/tern-cni/tern:0.1.0}"
CRITEST_REGISTRY=127.0.0.1:15000 # the critest case's local registry (tests/cluster/tests/cluster/critest.rs)
RUNTIME="${TERN_CLUSTER_RUNTIME:-containerd}"
case "$RUNTIME" in
    containerd) CRI_SOCK="$KT/containerd/containerd.sock" ;;
    crio) CRI_SOCK="$KT/crio/crio.sock" ;;
    *) echo "TERN_CLUSTER_RUNTIME=$RUNTIME: containerd or crio" >&2; exit 1 ;;
esac

# shellcheck source=crio.sh
. "$(dirname "${BASH_SOURCE[0]}")/crio.sh"

log() { printf '[cluster] %s\n' "$*" >&2; }

kubectl() { "$K8S_BIN/kubectl" --kubeconfig "$KT/pki/admin.kubeconfig" "$@"; }
ctr() { "$GOBIN_DIR/containerd/ctr" --address "$KT/containerd/containerd.sock" "$@"; }
crictl() {
    "$GOBIN_DIR/cri-tools/crictl" --runtime-endpoint "unix://$CRI_SOCK" \
        --image-endpoint "unix://$CRI_SOCK" --timeout 30s --config /dev/null "$@"
}

# wait_for SECONDS DESCRIPTION COMMAND...: retries COMMAND every 0.5 s until it succeeds.
wait_for() {
    local secs=$1 what=$2
    shift 2
    local end=$((SECONDS + secs))
    until "$@" >/dev/null 2>&1; do
        if [ "$SECONDS" -ge "$end" ]; then
            log "timed out after ${secs}s waiting for: $what"
            return 1
        fi
        sleep 0.5
    done
}

# start NAME COMMAND...: runs COMMAND in the background with its log and pid under $KT/NAME, with
# no descriptor of the caller's but stdin and the log: a component outlives the run with
# TERN_CLUSTER_KEEP=1, and one that inherited the descriptor of the caller's `flock` on the
# host-tests lock held that lock until someone killed it (seen 2026-12-03: every later run waited).
start() {
    local name=$1
    shift
    mkdir -p "$KT/$name"
    (
        for fd in /proc/self/fd/*; do
            fd=${fd##*/}
            if [ "$fd" -gt 2 ]; then eval "exec $fd>&-" 2>/dev/null || true; fi
        done
        exec "$@"
    ) >>"$KT/$name/log" 2>&1 &
    echo $! >"$KT/$name/pid"
}

# stop NAME [SIGNAL]: SIGNAL (default TERM), then SIGKILL after 10 s, the process whose pid file is
# $KT/NAME/pid.
stop() {
    local pidf="$KT/$1/pid" pid
    [ -f "$pidf" ] || return 0
    pid=$(cat "$pidf")
    rm -f "$pidf"
    kill -"${2:-TERM}" "$pid" 2>/dev/null || return 0
    for _ in $(seq 1 40); do
        kill -0 "$pid" 2>/dev/null || return 0
        sleep 0.25
    done
    kill -KILL "$pid" 2>/dev/null || true
}

# shellcheck source=pki.sh
. "$(dirname "${BASH_SOURCE[0]}")/pki.sh"
# shellcheck source=nodes.sh
. "$(dirname "${BASH_SOURCE[0]}")/nodes.sh"
# shellcheck source=node_files.sh
. "$(dirname "${BASH_SOURCE[0]}")/node_files.sh"
# shellcheck source=container.sh
. "$(dirname "${BASH_SOURCE[0]}")/container.sh"

# --- control plane -----------------------------------------------------------------------------

# etcd's client port (TERN_CLUSTER_ETCD_PORT) and peer port (+10): the API server's address is the
# tier's own, so a bench's bring-up on other etcd ports runs beside the tier.
ETCD_PORT="${TERN_CLUSTER_ETCD_PORT:-23790}"
start_etcd() {
    local c="http://127.0.0.1:$ETCD_PORT" p="http://127.0.0.1:$((ETCD_PORT + 10))"
    start etcd "$GOBIN_DIR/etcd/etcd" --name tern-test --data-dir "$KT/etcd/data" \
        --listen-client-urls "$c" --advertise-client-urls "$c" \
        --listen-peer-urls "$p" --initial-advertise-peer-urls "$p" \
        --initial-cluster "tern-test=$p" --log-level warn
    wait_for 30 "etcd health" curl -sf "$c/health"
}

# start_apiserver [EXTRA FLAG...]: the signing key is $KT/pki/sa.key unless SA_KEY names another.
# (A case that restarts it then waits for the control plane: tests/cluster/src/apiserver.rs.)
start_apiserver() {
    local d="$KT/pki" key="${SA_KEY:-sa}" reconciler=lease
    # Endpoints validation refuses loopback addresses: no reconciler when the server is on loopback
    [ "$API_ADDR" = 127.0.0.1 ] && reconciler=none
    start apiserver "$K8S_BIN/kube-apiserver" \
        --etcd-servers "http://127.0.0.1:$ETCD_PORT" \
        --bind-address "$API_ADDR" --advertise-address "$API_ADDR" --secure-port "$API_PORT" \
        --tls-cert-file "$d/apiserver.crt" --tls-private-key-file "$d/apiserver.key" \
        --client-ca-file "$d/ca.crt" \
        --kubelet-client-certificate "$d/apiserver-kubelet-client.crt" \
        --kubelet-client-key "$d/apiserver-kubelet-client.key" \
        --kubelet-certificate-authority "$d/ca.crt" --kubelet-preferred-address-types InternalIP \
        --service-account-issuer "$SA_ISSUER" --api-audiences "$SA_ISSUER" \
        --service-account-key-file "$d/$key.pub" --service-account-signing-key-file "$d/$key.key" \
        --service-cluster-ip-range "$SERVICE_CIDRS" \
        --authorization-mode Node,RBAC --enable-admission-plugins NodeRestriction \
        --endpoint-reconciler-type "$reconciler" \
        --allow-privileged=true --profiling=false --v=1 "$@"
    wait_for 90 "kube-apiserver /readyz" curl -sf --cacert "$d/ca.crt" --cert "$d/admin.crt" \
        --key "$d/admin.key" "$API/readyz"
}

# stop_apiserver: the API server killed, as in a crash. A SIGTERM'd kube-apiserver stops listening
# at once but outlived the 10 s grace here, and the longer the outage, the further the clients'
# list/watch retries back off (client-go: exponential from 0.8 s, capped at 30 s, with jitter).
stop_apiserver() { stop apiserver KILL; }

start_controller_manager() {
    local d="$KT/pki" mask=(--node-cidr-mask-size 24)
    # the per-family flags are refused on a single-stack cluster, the plain one on a dual-stack one
    [ -z "$CLUSTER_CIDR6" ] || mask=(--node-cidr-mask-size-ipv4 24 --node-cidr-mask-size-ipv6 64)
    start controller-manager "$K8S_BIN/kube-controller-manager" \
        --kubeconfig "$d/controller-manager.kubeconfig" \
        --authentication-kubeconfig "$d/controller-manager.kubeconfig" \
        --authorization-kubeconfig "$d/controller-manager.kubeconfig" \
        --bind-address 127.0.0.1 --secure-port 10357 --leader-elect=false \
        --allocate-node-cidrs --cluster-cidr "$CLUSTER_CIDRS" "${mask[@]}" \
        --service-cluster-ip-range "$SERVICE_CIDRS" \
        --service-account-private-key-file "$d/${SA_KEY:-sa}.key" --root-ca-file "$d/ca.crt" \
        --use-service-account-credentials --controllers '*,-cloud-node-lifecycle' --v=1
}

start_scheduler() {
    local d="$KT/pki"
    start scheduler "$K8S_BIN/kube-scheduler" --kubeconfig "$d/scheduler.kubeconfig" \
        --authentication-kubeconfig "$d/scheduler.kubeconfig" \
        --authorization-kubeconfig "$d/scheduler.kubeconfig" \
        --bind-address 127.0.0.1 --secure-port 10359 --leader-elect=false --v=1
}

# control_plane_up: the PKI, node 1's address (before the API server that binds it), etcd, the
# API server, the controller-manager and the scheduler.
control_plane_up() {
    make_pki
    node_address
    start_etcd
    start_apiserver
    start_controller_manager
    start_scheduler
}

# container_nodes_up: node 2 and on (TERN_CLUSTER_NODES), each in nodes.sh's order.
container_nodes_up() {
    local n
    for ((n = 2; n <= NODES; n++)); do
        node_runtime_up "$n"
        node_kubelet_up "$n"
    done
}

# shellcheck source=down.sh
. "$(dirname "${BASH_SOURCE[0]}")/down.sh"
