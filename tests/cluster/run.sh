#!/usr/bin/env bash
# tests/cluster/run.sh — the real-cluster tier: tern installed with `kubectl apply -f deploy/` on a
# real one-node Kubernetes (etcd, kube-apiserver with service-account signing keys and
# --api-audiences, controller-manager, scheduler, kubelet over containerd 2's CRI), pods started by
# the kubelet. See tests/cluster/lib.sh for the layout and README.md ("The real-cluster tier").
#
# Usage (root, after scripts/setup and scripts/build-go): bash tests/cluster/run.sh [CASE ...]
# Each case prints `test cluster::NAME ... ok|FAILED` (its log under $KT/cases/ is printed on
# failure); the last line is a cargo-format summary, which scripts/test adds to its own.
# TERN_CLUSTER_RUNTIME=crio runs the node on CRI-O instead (tests/cluster/crio.sh; cases print
# `test cluster-crio::NAME`). TERN_CLUSTER_KEEP=1 leaves the cluster running for a look (tear down with `KT=... bash -c
# '. tests/cluster/lib.sh; down'`).
set -uo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
# shellcheck source=lib.sh
. "$ROOT/tests/cluster/lib.sh"
# shellcheck source=cases.sh
. "$ROOT/tests/cluster/cases.sh"
# shellcheck source=cases_day2.sh
. "$ROOT/tests/cluster/cases_day2.sh"
# shellcheck source=critest.sh
. "$ROOT/tests/cluster/critest.sh"

summary() {
    printf 'test result: %s. %d passed; %d failed; 0 ignored; 0 measured; %d filtered out; finished in %d.00s\n' \
        "$1" "$pass" "$fail" 0 "$((SECONDS - t0))"
}
t0=$SECONDS pass=0 fail=0
# The cases' prefix: cluster (containerd) or cluster-crio (TERN_CLUSTER_RUNTIME=crio).
TIER=cluster
[ "$RUNTIME" = crio ] && TIER=cluster-crio
[ "$(id -u)" -eq 0 ] || { log "needs root"; summary FAILED; exit 1; }
for b in "$K8S_BIN/kube-apiserver" "$K8S_BIN/kubelet" "$K8S_BIN/kubectl" "$GOBIN_DIR/etcd/etcd" \
    "$GOBIN_DIR/containerd/containerd" "$GOBIN_DIR/cri-tools/crictl" "$GOBIN_DIR/cri-o/crio" \
    "$GOBIN_DIR/cri-tools/critest" "$GOBIN_DIR/registry/registry" "$GOBIN_DIR/plugins/portmap"; do
    [ -x "$b" ] || { log "$b missing: bash scripts/build-go"; summary FAILED; exit 1; }
done

if [ -d "$KT" ]; then (down) || true; fi
check_node_clean || { summary FAILED; exit 1; }
[ "${TERN_CLUSTER_KEEP:-0}" = 1 ] || trap 'down' EXIT

# run_case NAME: runs case_NAME with errexit in a subshell, its output to $KT/cases/NAME.log.
run_case() {
    local name=$1 log="$KT/cases/$1.log" t=$SECONDS
    mkdir -p "$KT/cases"
    printf 'test %s::%s ... ' "$TIER" "$name"
    (set -e; "case_$name") >"$log" 2>&1
    if [ $? -eq 0 ]; then
        pass=$((pass + 1)); echo "ok ($((SECONDS - t))s)"
    else
        fail=$((fail + 1)); echo "FAILED ($((SECONDS - t))s)"
        sed 's/^/    | /' "$log" | tail -40
    fi
}

log "bringing up the control plane and the node under $KT"
# on a line of its own: behind `||` the subshell's `set -e` would be off
(set -e; cluster_up) >"$KT/up.log" 2>&1
if [ $? -ne 0 ]; then
    echo "test $TIER::up ... FAILED"
    sed 's/^/    | /' "$KT/up.log" | tail -40
    for c in etcd apiserver containerd crio kubelet; do
        [ -f "$KT/$c/log" ] && { echo "    --- $c log:"; tail -15 "$KT/$c/log" | sed 's/^/    | /'; }
    done
    fail=1
    summary FAILED
    exit 1
fi
log "cluster up in $((SECONDS - t0))s"

cases=("$@")
[ "${#cases[@]}" -gt 0 ] || cases=("${ALL_CASES[@]}")
for c in "${cases[@]}"; do run_case "$c"; done

if [ "$fail" -eq 0 ]; then summary ok; exit 0; fi
summary FAILED
exit 1
