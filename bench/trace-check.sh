#!/usr/bin/env bash
# bench/trace-check.sh — what `tern-agent trace`'s kernel check reads (docs/decisions/0048)
# against a whole listing, on a table of fleet size in a throwaway network namespace: SETS peer
# sets (default 200) of ELEMENTS addresses each (default 2,000: 400,000 elements, the size
# decision 0031 lists in 3 s), half of them interval sets, a verdict map and one pod chain naming
# every set. Runs once each read the check makes (the verdict map, a plain and an interval set,
# the limit: `nft -j list`; a chain: `nft -s list chain`), `nft get element` (which the check
# does not use) and the whole listing, and prints each one's wall and CPU time and max RSS.
# Usage: sudo [SETS=200] [ELEMENTS=2000] bash bench/trace-check.sh. Needs root, nft, bc
# and GNU time (/usr/bin/time).
set -euo pipefail
sets="${SETS:-200}"
elements="${ELEMENTS:-2000}"
ns="tern-bench-trace-$$"
script="$(mktemp /tmp/tern-bench-trace.XXXXXX)"
trap 'ip netns del "$ns" 2>/dev/null || true; rm -f "$script"' EXIT
ip netns add "$ns"
{
    echo "table inet tern_netpol {"
    for s in $(seq 1 "$sets"); do
        if [ $((s % 2)) -eq 0 ]; then flags="flags interval; "; else flags=""; fi
        printf '\tset p4_%04d { type ipv4_addr; %selements = { ' "$s" "$flags"
        # Distinct /32s, every other address: an interval set keeps each as its own range.
        seq 0 $((elements - 1)) | awk -v s="$s" '{a=$1*2; printf "%s10.%d.%d.%d", (NR>1?", ":""), s%250, int(a/256), a%256} END {print " } }"}'
    done
    printf '\tchain in_0 {\n'
    for s in $(seq 1 "$sets"); do printf '\t\tip saddr @p4_%04d tcp dport 80 accept\n' "$s"; done
    printf '\t\tdrop\n\t}\n'
    printf '\tlimit log_denied { rate 100/second burst 100 packets }\n'
    printf '\tmap ingress4 { type ipv4_addr : verdict; elements = { 10.255.0.5 : jump in_0 } }\n}\n'
} >"$script"
ip netns exec "$ns" nft -f "$script"
n=(ip netns exec "$ns" nft)
# measure WHAT ARGS...: one run of nft ARGS in the netns; prints WHAT, wall s, CPU s, max RSS MB.
measure() {
    local what="$1" t
    shift
    t=$( { /usr/bin/time -f "%e %U %S %M" "${n[@]}" "$@" >/dev/null; } 2>&1 | tail -1)
    read -r wall user sys kb <<<"$t"
    printf '%-34s wall %5.2f s  cpu %5.2f s  max RSS %4d MB\n' "$what" "$wall" \
        "$(echo "$user + $sys" | bc)" $((kb / 1024))
}
echo "table: $sets sets x $elements elements = $((sets * elements)) elements, a $sets-rule chain"
measure "verdict map (-j list map)" -j list map inet tern_netpol ingress4
measure "plain set (-j list set)" -j list set inet tern_netpol p4_0001
measure "interval set (-j list set)" -j list set inet tern_netpol p4_0002
measure "limit (-j list limit)" -j list limit inet tern_netpol log_denied
measure "chain (-s list chain)" -s list chain inet tern_netpol in_0
measure "one element (get element)" get element inet tern_netpol p4_0001 '{ 10.1.0.2 }'
measure "whole table (-s list table)" -s list table inet tern_netpol
