#!/usr/bin/env bash
# tests/cluster/bench.sh — the pod-start row of scripts/bench (`scripts/bench --cluster`): on the
# real one-node cluster of tests/cluster, the time from a pod's creation to the API reporting it
# Ready, for tern's deployed chain and for the reference chains (ptp + host-local + tuning with the
# same keepalive sysctls: the current release v1.10, and Debian's 1.1.1), in one run. Every chain
# does the same work: the reference chains end, as the deployed one does, with the portmap and
# bandwidth tern installed (v1.10.0, the same capabilities; --bare-reference leaves them out, the
# rows before 2026-12-05).
#
# Method: rounds; each round creates one pod per chain, in rotating order, one at a time (pods
# started one after another, as a node sees most of the time). A chain is chosen by its conflist:
# the reference chains' conflists sort before tern's (05-*), and containerd takes the first one;
# it re-reads the directory on change, which the bench waits for by a probe pod. Timed: from
# `kubectl create` returning to `kubectl wait --for=condition=Ready` returning (both kubectl
# start-ups are in every sample of every chain alike). Prints p50 and p90 per chain and the ratios.
# Not a test: exits 0 whatever the figures (non-zero only when the run itself fails).
#
# Density (--density 30,100): per size and chain (rotating order), that many pods created in one
# `kubectl create` and timed until the last is Ready, each pod's Ready stamped on receipt by a
# pod watch started before (`kubectl get -w`: its create -> Ready, p50 / p99 / max), and the
# kubelet's own histograms over the batch, read through the API server's node proxy before and
# after: sum / count of kubelet_runtime_operations_duration_seconds{operation_type="run_podsandbox"}
# (the CRI RunPodSandbox, which runs the chain's ADD) and of kubelet_pod_start_sli_duration_seconds
# (the kubelet's pod start SLI): exact means, no bucket rounding. Evented PLEG (alpha in v1.34) is
# not used: the tier keeps the kubelet's default relist, so per-pod Ready comes in relist steps,
# and the sandbox mean is the figure that shows the chain's share. --rounds R repeats the sizes R
# times, the chains' order rotated by one each round.
#
# Usage (root, after scripts/setup and scripts/build-go): bash tests/cluster/bench.sh [--pods N]
#   [--density N[,N...]] [--rounds R] [--bare-reference] (--pods 0: the density batches alone)
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
KT=/tmp/tern-cluster-bench
# shellcheck source=lib.sh
. "$ROOT/tests/cluster/lib.sh"

# pod_manifest NAME: a busybox pod that sleeps (the tier's test pod, tests/cluster/src/pods.rs).
pod_manifest() {
    cat <<EOF
apiVersion: v1
kind: Pod
metadata: {name: $1, namespace: default, labels: {app: tern-test}}
spec:
  terminationGracePeriodSeconds: 1
  containers:
  - name: main
    image: $PAUSE_IMAGE
    imagePullPolicy: Never
    securityContext: {capabilities: {add: [NET_RAW]}}
EOF
}

pods=30 densities="" rounds=1 bare_reference=false
while [ "$#" -gt 0 ]; do
    case "$1" in
        --pods) pods=$2; shift ;;
        --density) densities=${2//,/ }; shift ;;
        --rounds) rounds=$2; shift ;;
        --bare-reference) bare_reference=true ;;
        *) echo "tests/cluster/bench.sh: unknown argument $1" >&2; exit 2 ;;
    esac
    shift
done

ref_bins=$(mktemp -d)
trap 'rm -rf "$ref_bins"; down' EXIT
# The cluster up and tern installed by the tier's own `install` case (node.sh up, then deploy/
# applied as an operator does), kept running for the rounds.
# The tier installs the release binaries of this tree (scripts/setup builds them for the tests).
log "building the release binaries (cargo build --release --workspace)"
(cd "$ROOT" && cargo build --release -q --workspace)
log "bringing up the cluster under $KT and installing tern (the tier's install case)"
(cd "$ROOT" && KT="$KT" TERN_CLUSTER_KEEP=1 cargo test -q -p tern-cluster --test cluster -- --exact cluster::install)

# The reference chains' plugins under names of their own, so both releases sit in one bin dir.
declare -A src=([v110]="$GOBIN_DIR/plugins" [deb]=/usr/lib/cni)
for rel in v110 deb; do
    for p in ptp host-local tuning; do
        cp "${src[$rel]}/$p" "$CNI_BIN/$p-$rel"
        echo "$CNI_BIN/$p-$rel" >>"$KT/created"
    done
    echo "$CNI_NET/05-ref-$rel.conflist" >>"$KT/created"
done
cidr=$(kubectl get node "$NODE" -o jsonpath='{.spec.podCIDR}')
# ref_conflist REL: ptp + host-local + tuning of release REL on the node's podCIDR, then the
# deployed chain's own portmap and bandwidth entries (the binaries tern installed in $CNI_BIN), so
# that each chain runs the same plugins after its interface and IPAM (not with --bare-reference).
ref_conflist() {
    jq -n --arg rel "$1" --arg cidr "$cidr" --arg dir "$KT/ref-ipam-$1" --argjson bare "$bare_reference" '{
        cniVersion: "1.0.0", name: ("ref-" + $rel), plugins: ([
          {type: ("ptp-" + $rel), ipMasq: false, mtu: 1500,
           ipam: {type: ("host-local-" + $rel), ranges: [[{subnet: $cidr}]], dataDir: $dir,
                  routes: [{dst: "0.0.0.0/0"}]}},
          {type: ("tuning-" + $rel), sysctl: {"net.ipv4.tcp_keepalive_time": "600",
           "net.ipv4.tcp_keepalive_intvl": "60", "net.ipv4.tcp_keepalive_probes": "5"}}]
          + if $bare then [] else [
          {type: "portmap", capabilities: {portMappings: true}, snat: true},
          {type: "bandwidth", capabilities: {bandwidth: true}}] end)}'
}
# The deployed chain's portmap and bandwidth entries must be the ones the reference chains get.
if [ "$bare_reference" = false ]; then
    jq -e '[.plugins[] | select(.type == "portmap" or .type == "bandwidth")]
        == [{type: "portmap", capabilities: {portMappings: true}, snat: true},
            {type: "bandwidth", capabilities: {bandwidth: true}}]' "$CNI_NET"/10-tern.conflist >/dev/null ||
        { log "the deployed conflist's portmap and bandwidth differ from the reference chains' (ref_conflist)"; exit 1; }
fi

# pod_ip NAME: the pod's (first) address.
pod_ip() { kubectl get pod "$1" -o jsonpath='{.status.podIP}'; }

# use_chain NAME: makes NAME the chain new sandboxes get (tern = the deployed 10-tern.conflist).
use_chain() {
    rm -f "$CNI_NET"/05-ref-*.conflist
    [ "$1" = tern ] || ref_conflist "$1" >"$CNI_NET/05-ref-$1.conflist"
    # containerd reloads on change: a probe pod shows which network it now uses
    local want=$1 n=0
    while :; do
        n=$((n + 1))
        pod_manifest "probe-$n" | kubectl apply -f - >/dev/null
        kubectl wait --for=condition=Ready "pod/probe-$n" --timeout=60s >/dev/null
        local ip got=no
        ip=$(pod_ip "probe-$n")
        # which chain wired the probe: tern's host veth, or the reference release's own lease dir
        if [ "$want" = tern ]; then
            ip route show | has "^$ip dev tern" && got=yes
        else
            [ -e "$KT/ref-ipam-$want/ref-$want/$ip" ] && got=yes
        fi
        kubectl delete pod "probe-$n" --wait=true >/dev/null
        [ "$got" = no ] || return 0
        [ "$n" -lt 20 ] || { log "containerd did not switch to chain $want"; return 1; }
        sleep 0.5
    done
}

declare -A samples
chains=(tern v110 deb)
for ((r = 0; r < pods; r++)); do
    for ((k = 0; k < ${#chains[@]}; k++)); do
        c=${chains[$(((r + k) % ${#chains[@]}))]}
        use_chain "$c"
        name="bench-$c-$r"
        t0=$(date +%s%N)
        pod_manifest "$name" | kubectl create -f - >/dev/null
        kubectl wait --for=condition=Ready "pod/$name" --timeout=60s >/dev/null ||
            { log "$name (chain $c) not Ready in 60 s: $(kubectl get events --field-selector involvedObject.name=$name -o jsonpath='{.items[*].message}')"; exit 1; }
        t1=$(date +%s%N)
        samples[$c]+="$(((t1 - t0) / 1000)) "
        kubectl delete pod "$name" --wait=true >/dev/null
    done
done

pct() { tr ' ' '\n' | grep . | sort -n | awk -v q="$1" '{a[NR]=$1} END {i=int((NR-1)*q+0.5)+1; printf "%.1f", a[i]/1000}'; }
label_of() {
    case $1 in
        tern) echo "tern (deployed chain)" ;;
        v110) echo "reference v1.10.0" ;;
        deb) echo "reference Debian 1.1.1" ;;
    esac
}
# chain_legend: what each label's chain runs, printed above the tables.
chain_legend() {
    local tail=" + portmap + bandwidth (v1.10.0, tern's)"
    [ "$bare_reference" = false ] || tail=" (--bare-reference: no portmap, no bandwidth)"
    echo "chains: tern (deployed chain) = $(jq -r '[.plugins[].type] | join(" + ")' "$CNI_NET"/10-tern.conflist);"
    echo "        reference REL = ptp + host-local + tuning of REL$tail"
}

# kubelet_sum_count FILE METRIC [LABEL_MATCH]: "sum count" of a histogram in a /metrics dump.
kubelet_sum_count() {
    awk -v m="$2" -v l="${3:-}" '
        index($1, m "_sum") == 1 && index($1, l) { s += $2 }
        index($1, m "_count") == 1 && index($1, l) { c += $2 }
        END { printf "%.6f %d\n", s, c }' "$1"
}
kubelet_metrics() { kubectl get --raw "/api/v1/nodes/$NODE/proxy/metrics" >"$1"; }

# density CHAIN N ROUND: N pods created at once on chain CHAIN; prints one line of figures.
density() {
    local c=$1 n=$2 round=$3 sel="density=$1-$2-$3" w="$KT/density-$1-$2-$3"
    use_chain "$c"
    kubelet_metrics "$w.before"
    # every Ready transition, stamped on receipt (the watch opened before the pods exist)
    kubectl get pods -l "$sel" -w --output-watch-events -o json 2>/dev/null |
        jq --unbuffered -r 'select(.object.status.conditions // [] | any(.type == "Ready" and .status == "True"))
            | "\(now) \(.object.metadata.name)"' >"$w.ready" &
    local watcher=$!
    sleep 1
    local i t0 t1
    for ((i = 0; i < n; i++)); do
        pod_manifest "d-$c-$n-$round-$i" | sed "s/labels: {app: tern-test}/labels: {app: tern-test, density: $c-$n-$round}/"
        echo ---
    done >"$w.yaml"
    t0=$(date +%s.%N)
    kubectl create -f "$w.yaml" >/dev/null
    kubectl wait --for=condition=Ready pod -l "$sel" --timeout=600s >/dev/null ||
        { log "density $c $n: not all Ready in 600 s"; exit 1; }
    t1=$(date +%s.%N)
    sleep 2 # the watch's last events
    kill "$watcher" 2>/dev/null || true
    kubelet_metrics "$w.after"
    local per sb0 sb1 sli0 sli1
    # each pod's first Ready, minus t0, in ms
    per=$(awk -v t0="$t0" '!seen[$2]++ { printf "%d ", ($1 - t0) * 1000000 }' "$w.ready")
    read -r -a sb0 <<<"$(kubelet_sum_count "$w.before" kubelet_runtime_operations_duration_seconds 'operation_type="run_podsandbox"')"
    read -r -a sb1 <<<"$(kubelet_sum_count "$w.after" kubelet_runtime_operations_duration_seconds 'operation_type="run_podsandbox"')"
    read -r -a sli0 <<<"$(kubelet_sum_count "$w.before" kubelet_pod_start_sli_duration_seconds)"
    read -r -a sli1 <<<"$(kubelet_sum_count "$w.after" kubelet_pod_start_sli_duration_seconds)"
    printf '%-24s %5d %4d %9.2f %8s %8s %8s %5d %12s %12s\n' "$(label_of "$c")" "$round" "$n" "$(echo "$t1 - $t0" | bc)" \
        "$(echo "$per" | pct 0.5)" "$(echo "$per" | pct 0.99)" "$(echo "$per" | pct 1)" "$(echo "$per" | wc -w)" \
        "$(awk -v s="${sb1[0]}" -v t="${sb0[0]}" -v c="${sb1[1]}" -v d="${sb0[1]}" 'BEGIN { if (c > d) printf "%.1f (%d)", (s - t) * 1000 / (c - d), c - d; else print "-" }')" \
        "$(awk -v s="${sli1[0]}" -v t="${sli0[0]}" -v c="${sli1[1]}" -v d="${sli0[1]}" 'BEGIN { if (c > d) printf "%.1f (%d)", (s - t) * 1000 / (c - d), c - d; else print "-" }')"
    kubectl delete pod -l "$sel" --wait=true --timeout=600s >/dev/null
}

if [ -n "$densities" ]; then
    echo "pod start at density (load $(cut -d' ' -f1-3 /proc/loadavg)): N pods created in one kubectl create;"
    echo "all Ready: s; each pod create -> Ready (watch) p50 / p99 / max: ms, and pods seen; the kubelet's means over the batch: ms (count):"
    chain_legend
    printf '%-24s %5s %4s %9s %8s %8s %8s %5s %12s %12s\n' chain round N "all Ready" p50 p99 max seen "RunPodSandbox" "pod start SLI"
    for ((r = 1; r <= rounds; r++)); do
        for n in $densities; do
            for ((k = 0; k < ${#chains[@]}; k++)); do
                density "${chains[$(((n + r - 1 + k) % ${#chains[@]}))]}" "$n" "$r"
            done
        done
    done
fi
[ "$pods" -gt 0 ] || exit 0

echo "pod start on the real cluster (create -> Ready, ms; $pods pods per chain, one at a time; load $(cut -d' ' -f1-3 /proc/loadavg))"
chain_legend
printf '%-44s %8s %8s\n' chain p50 p90
declare -A p50
for c in "${chains[@]}"; do
    label=$(label_of "$c")
    p50[$c]=$(echo "${samples[$c]}" | pct 0.5)
    printf '%-44s %8s %8s\n' "$label" "${p50[$c]}" "$(echo "${samples[$c]}" | pct 0.9)"
done
awk -v t="${p50[tern]}" -v a="${p50[v110]}" -v b="${p50[deb]}" \
    'BEGIN { printf "ratio tern/v1.10 p50 %.2fx, tern/Debian p50 %.2fx\n", t / a, t / b }'
echo "(the kubelet sees a started sandbox on its PLEG relist, every 1 s: create -> Ready comes in"
echo " steps of about a second, which hides the chains' ADD difference; the CRI rows time it)"
