#!/usr/bin/env bash
# tests/cluster/node.sh — the real-cluster tier's node, as shell: bring-up, teardown and the
# component functions the cases call (restart the API server, stop the kubelet, ...).
#
# Usage (root): bash tests/cluster/node.sh up | down | vars | FUNCTION [ARG ...]
#   up [conformance]
#            tears down a previous instance under $KT, refuses to run over another tern install
#            (check_node_clean), then brings up the control plane and the nodes (cluster_up:
#            TERN_CLUSTER_NODES=2 for two); `up conformance` the whole conformance tier instead
#            (tests/conformance/lib.sh conformance_up)
#   down     tears everything down (lib.sh's `down`) when $KT exists
#   vars     prints the layout as KEY=VALUE lines (what the cases in tests/cluster/tests read)
#   FUNCTION a function of tests/cluster/*.sh or tests/conformance/lib.sh with its arguments
#            (e.g. start_apiserver --service-account-max-token-expiration 1h, node_crictl 2 pods
#            -q, install_tern)
# The Rust harnesses (tests/cluster/tests/cluster and tests/conformance) run it; nothing else in
# these tiers is shell.
#
# Every command runs under errexit, and nothing here calls a function behind `||`, `&&`, `!` or
# `if` (bash turns errexit off inside such a call): a failing step fails the whole call.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
# shellcheck source=lib.sh
. "$ROOT/tests/cluster/lib.sh"

# cluster_up: the control plane, then each node in nodes.sh's order (node 1's images between its
# runtime and its kubelet), until every Node has registered and been given its podCIDRs; with
# TERN_CLUSTER_NODES=2 the container node too (the two-node cases, `cluster-2node::NAME`: tern is
# installed by their first case, `install_tern`, as scripts/conformance installs it). No
# kube-proxy, no CoreDNS: conformance_up adds them in the same order.
cluster_up() {
    control_plane_up
    node_runtime_up 1
    import_images
    node_kubelet_up 1
    container_nodes_up
}

# install_tern and conformance_up
# shellcheck source=../conformance/lib.sh
. "$ROOT/tests/conformance/lib.sh"

[ "$#" -gt 0 ] || { echo "usage: node.sh up | down | vars | FUNCTION [ARG ...]" >&2; exit 2; }
cmd=$1
shift
case "$cmd" in
    up)
        if [ -d "$KT" ]; then down; fi
        check_node_clean
        mkdir -p "$KT"
        if [ "${1:-}" = conformance ]; then conformance_up
        else cluster_up; fi
        ;;
    down)
        # nothing under $KT: nothing of this instance to remove (down would also take tern's
        # files from the node's CNI dirs, which then belong to someone else)
        if [ -d "$KT" ]; then down; fi
        ;;
    vars)
        for v in ROOT KT GOBIN_DIR K8S_BIN NODE NODE_IP API_PORT API CLUSTER_CIDR SERVICE_CIDR \
            IP_FAMILY NODE_IP6 CLUSTER_CIDR6 SERVICE_CIDR6 PAUSE_IMAGE TERN_IMAGE CRITEST_REGISTRY RUNTIME CRI_SOCK CNI_BIN CNI_NET NR_LINK \
            API_ADDR TWO_NODES NODE_ROUTES NODE2 NODE2_IP NODE2_IP6 NODE2_IP_NEXT NODE2_CTR NODE2_CGROUP \
            NODE2_REGISTRY ROUTER_IP1; do
            printf '%s=%s\n' "$v" "${!v-}"
        done
        ;;
    *) "$cmd" "$@" ;;
esac
