#!/usr/bin/env bash
# bench/libcni.sh — `scripts/bench --libcni`: the chains timed the way containerd and CRI-O call
# them, through libcni in one long-lived process (tests/cnitool's `bench`: AddNetworkList, then
# DelNetworkList, per pod), beside the direct figures of `scripts/bench` (tern-bench exec'ing the
# same plugins itself). Through libcni tern's chain once came out at 0.40-0.49x the reference
# chains where the direct bench says 0.25-0.28x; this shows where the difference goes.
#
# Chains, all cniVersion 1.0.0, the same three keepalive sysctls, rotating order every round:
#   noop         tern-noop twice (a static plugin that does no work): libcni's floor for two execs
#   tern         tern (tern-ipam in-process) + tern-tuning, libcni's result cache on this disk
#   tern/tmpfs   the same chain with the result cache on a tmpfs: the cache write's share
#   ref-deb      ptp + host-local + tuning, Debian's 1.1.1 (/usr/lib/cni)
#   ref-v1.10    the same of v1.10.0 (scripts/build-go plugins), when built
# Per chain and parallelism: ADD and DEL p50 / p99 (ms), the ratios tern / reference, and the
# noop and cache rows as differences. Not a test: exits 0 whatever the figures.
#
# Everything runs in a throwaway host netns (tlb-host-<pid>) with one fresh pod netns per pod,
# made and deleted outside the timed region; the work dir is removed at exit.
#
# Usage (root; scripts/bench --libcni builds the binaries): bash bench/libcni.sh BIN_DIR CNITOOL
#   [--pods N] [--rounds R] [--parallel 1,8]
set -euo pipefail

bins=$1 cnitool=$2
shift 2
pods=200 rounds=4 parallel="1 8"
while [ "$#" -gt 0 ]; do
    case "$1" in
        --pods) pods=$2 ;;
        --rounds) rounds=$2 ;;
        --parallel) parallel=${2//,/ } ;;
        *) echo "bench/libcni.sh: unknown argument $1" >&2; exit 2 ;;
    esac
    shift 2
done
ref_deb=/usr/lib/cni ref_new=${TERN_REF_NEW:-/var/cache/tern-build/bin/plugins}

work=$(mktemp -d /var/tmp/tern-libcni-bench.XXXXXX)
host=tlb-host-$$
cleanup() {
    set +e
    for ns in $(ip netns list | awk -v p="tlb-$$-" 'index($1, p) == 1 { print $1 }'); do ip netns del "$ns"; done
    ip netns del "$host" 2>/dev/null
    umount "$work/tmpfs" "$work/run" 2>/dev/null
    rm -rf "$work"
}
trap cleanup EXIT
ip netns add "$host"
ip -n "$host" link set lo up
mkdir -p "$work/net.d" "$work/bin" "$work/tmpfs" "$work/cache" "$work/run"
mount -t tmpfs -o size=64m tern-libcni-bench "$work/tmpfs"
mount -t tmpfs -o size=64m tern-libcni-bench-run "$work/run" # tern's stateDir and tuning's dataDir, as on a node (/run)
for p in tern tern-tuning tern-ipam tern-noop; do ln -s "$bins/$p" "$work/bin/$p"; done
for p in ptp host-local tuning; do
    ln -s "$ref_deb/$p" "$work/bin/$p-deb"
    [ ! -x "$ref_new/$p" ] || ln -s "$ref_new/$p" "$work/bin/$p-v1.10"
done

sysctl='{"net.ipv4.tcp_keepalive_time": "600", "net.ipv4.tcp_keepalive_intvl": "60", "net.ipv4.tcp_keepalive_probes": "5"}'
conflist() { # conflist NAME PLUGINS_JSON
    printf '{"cniVersion": "1.0.0", "name": "%s", "plugins": %s}\n' "$1" "$2" >"$work/net.d/$1.conflist"
}
conflist noop '[{"type": "tern-noop"}, {"type": "tern-noop"}]'
for c in tern tern-tmpfs; do
    conflist "$c" "[{\"type\": \"tern\", \"mtu\": 1500, \"stateDir\": \"$work/run/state-$c\",
        \"ipam\": {\"type\": \"tern-ipam\", \"ranges\": [[{\"subnet\": \"10.131.0.0/16\"}]], \"dataDir\": \"$work/ipam-$c\"}},
        {\"type\": \"tern-tuning\", \"sysctl\": $sysctl, \"dataDir\": \"$work/run/tuning-$c\"}]"
done
chains=(noop tern tern-tmpfs ref-deb)
for rel in deb v1.10; do
    [ -e "$work/bin/ptp-$rel" ] || continue
    conflist "ref-$rel" "[{\"type\": \"ptp-$rel\", \"mtu\": 1500, \"ipMasq\": false,
        \"ipam\": {\"type\": \"host-local-$rel\", \"ranges\": [[{\"subnet\": \"10.132.0.0/16\"}]], \"dataDir\": \"$work/ipam-ref-$rel\"}},
        {\"type\": \"tuning-$rel\", \"sysctl\": $sysctl, \"dataDir\": \"$work/run/tuning-ref-$rel\"}]"
    [ "$rel" = deb ] || chains+=("ref-v1.10")
done

# run_chain CHAIN N PAR ROUND: N pods through CHAIN, PAR at once; appends "add ns" / "del ns"
# lines to $work/lat-CHAIN-PAR.
run_chain() {
    local c=$1 n=$2 par=$3 r=$4 cache="$work/cache" netns=() i
    [ "$c" != tern-tmpfs ] || cache="$work/tmpfs"
    for ((i = 0; i < n; i++)); do
        ip netns add "tlb-$$-$r-$i"
        netns+=("/run/netns/tlb-$$-$r-$i")
    done
    ip netns exec "$host" "$cnitool" -conf-dir "$work/net.d" -cni-path "$work/bin" -cache-dir "$cache" \
        -parallel "$par" bench "$c" "${netns[@]}" >"$work/out" ||
        { echo "chain $c failed: $(cat "$work/out")" >&2; exit 1; }
    jq -r '(.add_ns[] | "add \(.)"), (.del_ns[] | "del \(.)")' "$work/out" >>"$work/lat-$c-$par"
    for ((i = 0; i < n; i++)); do ip netns del "tlb-$$-$r-$i"; done
}

echo "libcni bench: ${pods} pods per chain per parallelism in ${rounds} rotating rounds; libcni of tests/cnitool (Debian's libcni 1.1); cache on $(df --output=fstype "$work/cache" | tail -1) and tmpfs"
for c in "${chains[@]}"; do run_chain "$c" 4 1 warm; done # page cache, first execs
rm -f "$work"/lat-*
for par in $parallel; do
    for ((r = 0; r < rounds; r++)); do
        n=$((pods / rounds + (r < pods % rounds ? 1 : 0)))
        for ((k = 0; k < ${#chains[@]}; k++)); do
            run_chain "${chains[$(((k + r) % ${#chains[@]}))]}" "$n" "$par" "$r"
        done
    done
done

# p VERB CHAIN PAR Q: the Q-quantile of VERB's durations, ms
p() {
    awk -v v="$1" '$1 == v { print $2 }' "$work/lat-$2-$3" | sort -n |
        awk -v q="$4" '{ a[NR] = $1 } END { i = int((NR - 1) * q + 0.5) + 1; printf "%.3f", a[i] / 1e6 }'
}
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2fx", a / b }'; }
diff_ms() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%+.3f", a - b }'; }
for par in $parallel; do
    printf '\nparallelism %s: chain ADD p50 / p99, DEL p50 / p99 (ms)\n' "$par"
    for c in "${chains[@]}"; do
        printf '  %-11s %8s / %8s   %8s / %8s\n' "$c" "$(p add "$c" "$par" 0.5)" "$(p add "$c" "$par" 0.99)" \
            "$(p del "$c" "$par" 0.5)" "$(p del "$c" "$par" 0.99)"
    done
    t=$(p add tern "$par" 0.5) td=$(p del tern "$par" 0.5)
    for ref in ref-deb ref-v1.10; do
        [ -e "$work/lat-$ref-$par" ] || continue
        echo "  tern / $ref: ADD $(ratio "$t" "$(p add "$ref" "$par" 0.5)"), DEL $(ratio "$td" "$(p del "$ref" "$par" 0.5)")"
    done
    echo "  libcni's result cache on disk vs tmpfs (tern - tern-tmpfs): ADD $(diff_ms "$t" "$(p add tern-tmpfs "$par" 0.5)") ms, DEL $(diff_ms "$td" "$(p del tern-tmpfs "$par" 0.5)") ms"
    echo "  the chain's work above two no-op execs (tern - noop): ADD $(diff_ms "$t" "$(p add noop "$par" 0.5)") ms, DEL $(diff_ms "$td" "$(p del noop "$par" 0.5)") ms"
done
echo "(direct figures of the same chains: scripts/bench, rows tt-chain/ti and ref-chain; the exec-chain floor there)"
