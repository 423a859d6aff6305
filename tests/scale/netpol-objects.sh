# tests/scale/netpol-objects.sh — the cluster scripts/netpol-scale gives its tern-agent: Pods with
# no kubelet behind them (spec.nodeName set at creation, status.podIP(s) and phase Running written
# by the script through the status subresource), Namespaces and NetworkPolicies, from a seeded
# generator (bash's RANDOM: one seed, one cluster).
#
# Shape, for PODS pods of which LOCAL are on NP_NODE (the agent's node) and C changes of each kind:
# - namespaces ns-0 .. ns-9, labels team=t(k%4) and env=prod|dev, plus np-free (team=free), where
#   only the change fixtures live; each with its `default` ServiceAccount (no controller-manager
#   makes one, and the ServiceAccount admission refuses a pod without it);
# - the change fixtures, local pods in np-free: move-c (app=move; phase 2 adds moved=yes, which
#   the policy `move-in` selects), newpol-c (app=newpol, idx=c; phase 2 creates and then deletes
#   a policy newpol-c selecting it) and late-c (app=late, selected by the policy `late`; no
#   address until phase 2 writes one). Nothing else selects a pod of np-free;
# - the other pods, LOCAL - 3C on NP_NODE and PODS - LOCAL on peer-0 .. peer-9, spread at random
#   over ns-0 .. ns-9 with labels app=a0..a19, tier=web|db|cache|api, version=v0..v2, container
#   ports named http (8080) and metrics (9090), one in four also dns (53/UDP);
# - addresses: the k-th local pod 10.200.(k/250).(k%250+1) (the fixtures first: move-c is k=c,
#   newpol-c k=C+c, late-c k=2C+c), the k-th other pod 10.201.(k/250).(k%250+1); in the
#   annotation scale.tern.dev/ip, with scale.tern.dev/pending on the late-c pods;
# - POLICIES policies: `move-in` and `late` in np-free; in ns-k a baseline (even k: deny all
#   ingress; odd k: allow from the same namespace); the rest spread at random over ns-0 .. ns-9
#   in six shapes: pod selector + ports and a port range; namespace selector + named port;
#   ipBlocks with except + port; egress only, to a pod selector in every namespace by named port
#   and to an ipBlock on UDP/TCP 53; namespace and pod selector together + named TCP and UDP
#   ports; matchExpressions (In, NotIn, Exists) with ingress and egress to 0.0.0.0/0 except
#   private ranges and to a pod selector on a port.
# shellcheck shell=bash

NP_NODE=netpol-node

# np_local_ip K / np_remote_ip K: the address of the K-th local / other pod.
np_local_ip() { echo "10.200.$(($1 / 250)).$(($1 % 250 + 1))"; }
np_remote_ip() { echo "10.201.$(($1 / 250)).$(($1 % 250 + 1))"; }

# np_pod NS NAME NODE IP LABELS PORTS [PENDING]: one Pod's YAML (LABELS a flow map's body, PORTS
# a flow list's body).
np_pod() {
    printf -- '---\napiVersion: v1\nkind: Pod\nmetadata:\n  name: %s\n  namespace: %s\n  labels: {%s}\n' "$2" "$1" "$5"
    printf '  annotations: {scale.tern.dev/ip: "%s"%s}\n' "$4" "${7:+, scale.tern.dev/pending: \"true\"}"
    printf 'spec:\n  nodeName: %s\n  automountServiceAccountToken: false\n' "$3"
    printf '  containers: [{name: main, image: localhost/none:1, ports: [%s]}]\n' "$6"
}

# np_policy NS NAME SPEC: one NetworkPolicy's YAML (SPEC in JSON, which YAML reads).
np_policy() {
    printf -- '---\napiVersion: networking.k8s.io/v1\nkind: NetworkPolicy\nmetadata: {name: %s, namespace: %s}\nspec: %s\n' "$2" "$1" "$3"
}

# np_newpol_json C IP: the body of the policy newpol-C that phase 2 creates (selects newpol-C,
# allows 443 from an ipBlock with an except).
np_newpol_json() {
    printf '{"apiVersion":"networking.k8s.io/v1","kind":"NetworkPolicy","metadata":{"name":"newpol-%s","namespace":"np-free"},"spec":{"podSelector":{"matchLabels":{"app":"newpol","idx":"%s"}},"ingress":[{"from":[{"ipBlock":{"cidr":"172.16.%s.0/24","except":["172.16.%s.128/25"]}}],"ports":[{"port":443}]}]}}' "$1" "$1" "$1" "$1"
}

# np_spec SHAPE: the spec of one generated policy into NP_SPEC (not printed: RANDOM is drawn here,
# and a command substitution's subshell would draw from a reseeded generator).
np_spec() {
    local a="a$((RANDOM % 20))" b="a$((RANDOM % 20))" t="t$((RANDOM % 4))" v="v$((RANDOM % 3))" q=$((RANDOM % 4))
    case $1 in
        0) NP_SPEC="{\"podSelector\": {\"matchLabels\": {\"app\": \"$a\"}}, \"ingress\": [{\"from\": [{\"podSelector\": {\"matchLabels\": {\"tier\": \"web\"}}}], \"ports\": [{\"port\": 80}, {\"port\": 8000, \"endPort\": 8100}]}]}" ;;
        1) NP_SPEC="{\"podSelector\": {\"matchLabels\": {\"tier\": \"db\", \"app\": \"$a\"}}, \"ingress\": [{\"from\": [{\"namespaceSelector\": {\"matchLabels\": {\"team\": \"$t\"}}}], \"ports\": [{\"port\": \"http\"}]}]}" ;;
        2) NP_SPEC="{\"podSelector\": {\"matchExpressions\": [{\"key\": \"app\", \"operator\": \"In\", \"values\": [\"$a\", \"$b\"]}]}, \"ingress\": [{\"from\": [{\"ipBlock\": {\"cidr\": \"10.0.0.0/8\", \"except\": [\"10.200.$q.0/24\", \"10.201.$q.0/24\"]}}, {\"ipBlock\": {\"cidr\": \"192.168.0.0/16\", \"except\": [\"192.168.$q.0/24\"]}}], \"ports\": [{\"port\": 443}]}]}" ;;
        3) NP_SPEC="{\"podSelector\": {\"matchLabels\": {\"app\": \"$a\"}}, \"policyTypes\": [\"Egress\"], \"egress\": [{\"to\": [{\"namespaceSelector\": {}, \"podSelector\": {\"matchLabels\": {\"tier\": \"cache\"}}}], \"ports\": [{\"port\": \"http\"}]}, {\"to\": [{\"ipBlock\": {\"cidr\": \"10.96.0.10/32\"}}], \"ports\": [{\"port\": 53, \"protocol\": \"UDP\"}, {\"port\": 53}]}]}" ;;
        4) NP_SPEC="{\"podSelector\": {\"matchLabels\": {\"app\": \"$a\", \"version\": \"$v\"}}, \"ingress\": [{\"from\": [{\"namespaceSelector\": {\"matchLabels\": {\"env\": \"prod\"}}, \"podSelector\": {\"matchLabels\": {\"tier\": \"api\"}}}], \"ports\": [{\"port\": \"metrics\"}, {\"port\": \"dns\", \"protocol\": \"UDP\"}]}]}" ;;
        *) NP_SPEC="{\"podSelector\": {\"matchExpressions\": [{\"key\": \"tier\", \"operator\": \"In\", \"values\": [\"db\", \"api\"]}, {\"key\": \"version\", \"operator\": \"NotIn\", \"values\": [\"$v\"]}, {\"key\": \"app\", \"operator\": \"In\", \"values\": [\"$a\", \"$b\"]}]}, \"policyTypes\": [\"Ingress\", \"Egress\"], \"ingress\": [{\"from\": [{\"podSelector\": {\"matchExpressions\": [{\"key\": \"app\", \"operator\": \"Exists\"}]}}]}], \"egress\": [{\"to\": [{\"ipBlock\": {\"cidr\": \"0.0.0.0/0\", \"except\": [\"10.0.0.0/8\", \"172.16.0.0/12\", \"169.254.169.254/32\"]}}]}, {\"to\": [{\"podSelector\": {\"matchLabels\": {\"tier\": \"db\"}}}], \"ports\": [{\"port\": 5432}]}]}" ;;
    esac
}

# np_objects SEED PODS LOCAL POLICIES C: every object, as one YAML stream.
np_objects() {
    local seed=$1 pods=$2 local_n=$3 policies=$4 c=$5 k i ns labels ports tiers=(web db cache api)
    RANDOM=$seed
    for k in $(seq 0 9) free; do
        if [ "$k" = free ]; then
            ns=np-free labels="team: free"
        else
            ns="ns-$k" labels="team: t$((k % 4)), env: $([ $((k % 2)) = 0 ] && echo prod || echo dev)"
        fi
        printf -- '---\napiVersion: v1\nkind: Namespace\nmetadata: {name: %s, labels: {%s}}\n' "$ns" "$labels"
        printf -- '---\napiVersion: v1\nkind: ServiceAccount\nmetadata: {name: default, namespace: %s}\n' "$ns"
    done
    local http='{name: http, containerPort: 8080}, {name: metrics, containerPort: 9090}'
    for i in $(seq 0 $((c - 1))); do
        np_pod np-free "move-$i" "$NP_NODE" "$(np_local_ip "$i")" "app: move, idx: \"$i\"" "$http"
        np_pod np-free "newpol-$i" "$NP_NODE" "$(np_local_ip $((c + i)))" "app: newpol, idx: \"$i\"" "$http"
        np_pod np-free "late-$i" "$NP_NODE" "$(np_local_ip $((2 * c + i)))" "app: late, idx: \"$i\"" "$http" pending
    done
    for i in $(seq $((3 * c)) $((pods - 1))); do
        ports=$http
        [ $((RANDOM % 4)) != 0 ] || ports="$http, {name: dns, containerPort: 53, protocol: UDP}"
        labels="app: a$((RANDOM % 20)), tier: ${tiers[RANDOM % 4]}, version: v$((RANDOM % 3))"
        if [ "$i" -lt "$local_n" ]; then
            np_pod "ns-$((RANDOM % 10))" "pod-$i" "$NP_NODE" "$(np_local_ip "$i")" "$labels" "$ports"
        else
            np_pod "ns-$((RANDOM % 10))" "pod-$i" "peer-$((i % 10))" "$(np_remote_ip $((i - local_n)))" "$labels" "$ports"
        fi
    done
    np_policy np-free move-in '{"podSelector": {"matchLabels": {"moved": "yes"}}, "ingress": [{"from": [{"podSelector": {}}], "ports": [{"port": 8080}]}]}'
    np_policy np-free late '{"podSelector": {"matchLabels": {"app": "late"}}, "ingress": [{"from": [{"namespaceSelector": {"matchLabels": {"team": "t0"}}}], "ports": [{"port": "http"}]}]}'
    for k in $(seq 0 9); do
        if [ $((k % 2)) = 0 ]; then
            np_policy "ns-$k" deny-ingress '{"podSelector": {}, "policyTypes": ["Ingress"]}'
        else
            np_policy "ns-$k" same-namespace '{"podSelector": {}, "ingress": [{"from": [{"podSelector": {}}]}]}'
        fi
    done
    for i in $(seq 12 $((policies - 1))); do
        np_spec $((RANDOM % 6))
        np_policy "ns-$((RANDOM % 10))" "pol-$i" "$NP_SPEC"
    done
}
