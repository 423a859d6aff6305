#!/usr/bin/env bash
# tests/cluster/node.sh — the real-cluster tier's node, as shell: bring-up, teardown and the
# component functions the cases call (restart the API server, stop the kubelet, ...).
#
# Usage (root): bash tests/cluster/node.sh up | down | vars | FUNCTION [ARG ...]
#   up       tears down a previous instance under $KT, refuses to run over another tern install
#            (check_node_clean), then brings up the control plane and the node (cluster_up)
#   down     tears everything down (lib.sh's `down`) when $KT exists
#   vars     prints the layout as KEY=VALUE lines (what the cases in tests/cluster/tests read)
#   FUNCTION a function of lib.sh, pki.sh or crio.sh with its arguments (e.g. start_apiserver
#            --service-account-max-token-expiration 1h)
# The Rust cases (tests/cluster/tests/cluster) run it; nothing else in this tier is shell.
#
# Every command runs under errexit, and nothing here calls a function behind `||`, `&&`, `!` or
# `if` (bash turns errexit off inside such a call): a failing step fails the whole call.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
# shellcheck source=lib.sh
. "$ROOT/tests/cluster/lib.sh"

# cluster_up: the control plane, the runtime and the kubelet (lib.sh), until the node has
# registered and been given its podCIDRs (one per family).
cluster_up() {
    make_pki
    start_etcd
    start_apiserver
    start_controller_manager
    start_scheduler
    start_runtime
    import_images
    node_address
    start_kubelet
    wait_for 120 "node $NODE registered" kubectl get node "$NODE"
    wait_for_pod_cidrs
}

[ "$#" -gt 0 ] || { echo "usage: node.sh up | down | vars | FUNCTION [ARG ...]" >&2; exit 2; }
cmd=$1
shift
case "$cmd" in
    up)
        if [ -d "$KT" ]; then down; fi
        check_node_clean
        mkdir -p "$KT"
        cluster_up
        ;;
    down)
        # nothing under $KT: nothing of this instance to remove (down would also take tern's
        # files from the node's CNI dirs, which then belong to someone else)
        if [ -d "$KT" ]; then down; fi
        ;;
    vars)
        for v in ROOT KT GOBIN_DIR K8S_BIN NODE NODE_IP API_PORT API CLUSTER_CIDR SERVICE_CIDR \
            IP_FAMILY NODE_IP6 CLUSTER_CIDR6 SERVICE_CIDR6 PAUSE_IMAGE TERN_IMAGE CRITEST_REGISTRY RUNTIME CRI_SOCK CNI_BIN CNI_NET NR_LINK; do
            printf '%s=%s\n' "$v" "${!v}"
        done
        ;;
    *) "$cmd" "$@" ;;
esac
