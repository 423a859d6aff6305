# tests/cluster/cases.sh — the real-cluster tier's cases up to rbac, run in order by
# tests/cluster/run.sh; the day-two cases (agent_restart onwards) are in cases_day2.sh.
#
# Each case_NAME runs with errexit in its own subshell: any failing command fails the case.
# `fail MESSAGE` fails it with a message. Cases build on each other in the order of ALL_CASES
# (install first), as an operator's day does.

ALL_CASES=(install pods critest node_routes rbac sandbox_recreated token_revoked max_token_expiration
    agent_restart apiserver_down signing_key_rotated rollout network_not_ready uninstall)

fail() { echo "FAIL: $*" >&2; return 1; }

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
    wait_for 60 "node $NODE podCIDR" bash -c "[ -n \"\$($K8S_BIN/kubectl --kubeconfig $KT/pki/admin.kubeconfig get node $NODE -o jsonpath='{.spec.podCIDR}')\" ]"
}

node_ready() {
    [ "$(kubectl get node "$NODE" -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}')" = True ]
}

# pod_manifest NAME: a busybox pod that sleeps, allowed to ping (NET_RAW).
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

pod_ip() { kubectl get pod "$1" -o jsonpath='{.status.podIP}'; }

# in_pod POD COMMAND...: runs COMMAND in the pod's container (kubectl exec through the kubelet).
in_pod() { local p=$1; shift; kubectl exec "$p" -c main -- "$@"; }

# ip_in_cidr IP CIDR (IPv4)
ip_in_cidr() {
    python3 -c 'import ipaddress,sys; sys.exit(0 if ipaddress.ip_address(sys.argv[1]) in ipaddress.ip_network(sys.argv[2]) else 1)' "$1" "$2"
}

# wired IP: IP's lease and tern state are where nothing_left looks, so its checks can fail.
wired() {
    local ip=$1
    [ -e "/var/lib/cni/networks/tern/$ip" ] || fail "no lease file /var/lib/cni/networks/tern/$ip for a running pod"
    grep -rl "\"$ip/" /run/cni/tern 2>/dev/null | has . || fail "no tern state for $ip under /run/cni/tern"
}

# nat_table_has TEXT: the node's egress NAT table holds TEXT.
nat_table_has() { nft -s list table inet tern_nat 2>/dev/null | has -F "$1"; }

# nothing_left IP: no host route, IPAM lease or tern state for IP.
nothing_left() {
    local ip=$1
    if ip route show | has "^$ip "; then fail "host route to $ip left: $(ip route show | grep "^$ip ")"; fi
    if [ -e "/var/lib/cni/networks/tern/$ip" ]; then fail "lease file /var/lib/cni/networks/tern/$ip left"; fi
    if grep -rl "\"$ip/" /run/cni/tern 2>/dev/null | has .; then fail "tern state for $ip left"; fi
}

case_install() {
    # The namespace first, on its own: the ConfigMap below must exist before the DaemonSet starts.
    kubectl apply -f "$ROOT/deploy/00-namespace.yaml"
    # No kube-proxy here: the agent reaches the API server at its real address, as on any
    # kube-proxy-less cluster (the DaemonSet reads this ConfigMap when it exists).
    kubectl -n tern create configmap kubernetes-services-endpoint \
        --from-literal=KUBERNETES_SERVICE_HOST=127.0.0.1 --from-literal=KUBERNETES_SERVICE_PORT="$API_PORT"
    # As an operator does: the egress NAT's cluster ranges set to this cluster's before applying.
    rm -rf "$KT/deploy" && cp -r "$ROOT/deploy" "$KT/deploy"
    sed -i "s|TERN_CLUSTER_CIDRS: .*|TERN_CLUSTER_CIDRS: \"$CLUSTER_CIDR,$SERVICE_CIDR\"|" "$KT/deploy/configmap.yaml"
    grep -q "TERN_CLUSTER_CIDRS: \"$CLUSTER_CIDR,$SERVICE_CIDR\"" "$KT/deploy/configmap.yaml" || fail "cannot set TERN_CLUSTER_CIDRS"
    kubectl apply -f "$KT/deploy/"
    kubectl -n tern rollout status daemonset/tern-agent --timeout=120s
    for f in $(node_files); do [ -e "$f" ] || fail "$f not installed"; done
    [ "$(stat -c %a "$CNI_NET/tern-kubeconfig")" = 600 ] || fail "kubeconfig mode $(stat -c %a "$CNI_NET/tern-kubeconfig")"
    # The conflist's ranges are the node's podCIDR, read by the install from the real Node.
    local cidr
    cidr=$(kubectl get node "$NODE" -o jsonpath='{.spec.podCIDR}')
    grep -q "\"$cidr\"" "$CNI_NET/10-tern.conflist" || fail "conflist lacks the node's podCIDR $cidr: $(cat "$CNI_NET/10-tern.conflist")"
    # The agent's egress NAT: this node's podCIDR masqueraded outside the cluster's ranges.
    wait_for 30 "egress NAT table" nat_table_has "ip saddr $cidr ip daddr != { $CLUSTER_CIDR, $SERVICE_CIDR, 224.0.0.0/4 } masquerade"
    wait_for 90 "node Ready" node_ready
}

case_pods() {
    local cidr a b ipa ipb
    cidr=$(kubectl get node "$NODE" -o jsonpath='{.spec.podCIDR}')
    pod_manifest pod-a | kubectl apply -f -
    pod_manifest pod-b | kubectl apply -f -
    kubectl wait --for=condition=Ready pod/pod-a pod/pod-b --timeout=90s
    ipa=$(pod_ip pod-a) ipb=$(pod_ip pod-b)
    echo "pod-a $ipa pod-b $ipb (node podCIDR $cidr)"
    ip_in_cidr "$ipa" "$cidr" || fail "pod-a IP $ipa not in $cidr"
    ip_in_cidr "$ipb" "$cidr" || fail "pod-b IP $ipb not in $cidr"
    in_pod pod-a ping -c 2 -W 2 "$ipb"
    in_pod pod-b ping -c 2 -W 2 "$ipa"
    # the host (the node's root netns), through the pod's link-local gateway
    in_pod pod-a ping -c 2 -W 2 "$(ip -4 -o addr show scope global | awk '{split($4,a,"/"); print a[1]; exit}')"
    [ "$(in_pod pod-a cat /proc/sys/net/ipv4/tcp_keepalive_time)" = 600 ] || fail "keepalive_time not 600 in pod-a"
    [ "$(in_pod pod-a cat /proc/sys/net/ipv4/tcp_keepalive_intvl)" = 60 ] || fail "keepalive_intvl not 60"
    [ "$(in_pod pod-a cat /proc/sys/net/ipv4/tcp_keepalive_probes)" = 5 ] || fail "keepalive_probes not 5"
    ip route show | has "^$ipa dev tern" || fail "no host route to $ipa through a tern veth"
    wired "$ipa"
    wired "$ipb"
    kubectl delete pod pod-a pod-b --wait=true --timeout=60s
    # the kubelet removes the sandbox (and so runs DEL) right after the pod is gone
    wait_for 60 "sandboxes of pod-a and pod-b removed" bash -c "! $GOBIN_DIR/cri-tools/crictl --runtime-endpoint unix://$CRI_SOCK pods --name 'pod-[ab]' -q | grep -q ."
    nothing_left "$ipa"
    nothing_left "$ipb"
    # What Prometheus scrapes, where the pod's annotations say: tern's verbs counted by the agent
    # from the plugins' reports (at least these two pods' ADDs and DELs, by tern and tern-tuning).
    local port path m p v n
    port=$(kubectl -n tern get daemonset tern-agent -o jsonpath='{.spec.template.metadata.annotations.prometheus\.io/port}')
    path=$(kubectl -n tern get daemonset tern-agent -o jsonpath='{.spec.template.metadata.annotations.prometheus\.io/path}')
    m=$(curl -sf "http://127.0.0.1:$port$path") || fail "no metrics on port $port path $path"
    echo "$m" | has '^tern_build_info{version="' || fail "no tern_build_info"
    for p in tern tern-tuning; do
        for v in ADD DEL; do
            n=$(echo "$m" | awk -v k="tern_cni_verb_total{plugin=\"$p\",verb=\"$v\",code=\"0\"}" '$1 == k {print $2}')
            [ "${n:-0}" -ge 2 ] || fail "tern_cni_verb_total $p $v code 0 is ${n:-absent}, want >= 2: $(echo "$m" | grep '^tern_cni_verb')"
        done
    done
}

# --- node routes: fake Nodes on a test network of the node ---------------------------------------

# nr_node NAME PODCIDR INTERNALIP: a Node with no kubelet behind it (tainted, labelled), its
# InternalIP set through the status subresource as a kubelet sets it.
nr_node() {
    kubectl create -f - <<EOF
apiVersion: v1
kind: Node
metadata: {name: $1, labels: {tern-test: fake-node}}
spec:
  podCIDR: $2
  podCIDRs: [$2]
  taints: [{key: tern-test/fake-node, effect: NoSchedule}]
EOF
    nr_ip "$1" "$3"
}
nr_ip() {
    kubectl patch node "$1" --subresource=status --type=merge \
        -p "{\"status\":{\"addresses\":[{\"type\":\"InternalIP\",\"address\":\"$2\"}]}}"
}
# nr_route CIDR: tern's route to CIDR as "CIDR via GW dev LINK" (empty when none).
nr_route() { ip -4 route show "$1" proto 116 | awk '{print $1, $2, $3, $4, $5}'; }
# nr_route_is CIDR [GW]: tern's route to CIDR is via GW on the test link (none without GW).
nr_route_is() { [ "$(nr_route "$1")" = "${2:+$1 via $2 dev $NR_LINK}" ]; }
nr_tern_routes() { ip -4 route show proto 116; }
nr_cleanup() {
    kubectl delete node -l tern-test=fake-node --wait=true --timeout=60s >/dev/null 2>&1 || true
    ip link del "$NR_LINK" 2>/dev/null || true
}

# The DaemonSet's agent (--node-routes, as deploy/ sets it) on the real node routes the podCIDRs of
# Nodes whose InternalIPs are on a directly connected network (a veth of the node here), with protocol
# 116; moves a route when a Node's InternalIP changes; a podCIDR, immutable once set, changes only
# with the Node re-created: the old route goes, the new one comes; a deleted Node's route goes; a
# Node off every connected network gets none; the API server stopped changes no route.
case_node_routes() {
    trap nr_cleanup EXIT
    ip link add "$NR_LINK" type veth peer name "${NR_LINK%0}1"
    ip addr add 10.99.230.254/24 dev "$NR_LINK"
    ip link set "$NR_LINK" up
    ip link set "${NR_LINK%0}1" up
    nr_node nr-a 10.99.240.0/24 10.99.230.1
    nr_node nr-b 10.99.241.0/24 10.99.230.2
    # off every connected network of this machine (TEST-NET-2; checked, the machine's own could be)
    ip -4 -o addr show | awk '{print $4}' | python3 -c 'import ipaddress,sys; sys.exit(any(ipaddress.ip_address("198.51.100.9") in ipaddress.ip_interface(l.strip()).network for l in sys.stdin))' \
        || fail "198.51.100.9 is on a connected network here: pick another off-link address"
    nr_node nr-far 10.99.242.0/24 198.51.100.9
    wait_for 30 "routes to nr-a and nr-b" bash -c "[ \$(ip -4 route show proto 116 | wc -l) -ge 2 ]" \
        || fail "tern's routes: $(nr_tern_routes)"
    nr_route_is 10.99.240.0/24 10.99.230.1 || fail "nr-a: $(nr_route 10.99.240.0/24)"
    nr_route_is 10.99.241.0/24 10.99.230.2 || fail "nr-b: $(nr_route 10.99.241.0/24)"
    [ -z "$(ip route show 10.99.242.0/24)" ] || fail "off-link nr-far routed: $(ip route show 10.99.242.0/24)"
    [ "$(nr_tern_routes | wc -l)" = 2 ] || fail "tern's routes: $(nr_tern_routes)"
    kubectl -n tern logs daemonset/tern-agent -c agent | has 'not on a directly connected network' \
        || fail "nr-far not reported in the agent's log"

    nr_ip nr-a 10.99.230.3
    wait_for 30 "nr-a's route moved" nr_route_is 10.99.240.0/24 10.99.230.3 || fail "nr-a: $(nr_route 10.99.240.0/24)"
    if kubectl patch node nr-b --type=merge -p '{"spec":{"podCIDR":"10.99.243.0/24","podCIDRs":["10.99.243.0/24"]}}' 2>/dev/null; then
        fail "the API server let a podCIDR change"
    fi
    kubectl delete node nr-b --wait=true
    nr_node nr-b 10.99.243.0/24 10.99.230.2
    wait_for 30 "nr-b's new podCIDR routed" nr_route_is 10.99.243.0/24 10.99.230.2 || fail "nr-b: $(nr_route 10.99.243.0/24)"
    nr_route_is 10.99.241.0/24 || fail "nr-b's old podCIDR still routed: $(nr_route 10.99.241.0/24)"
    kubectl delete node nr-b --wait=true
    wait_for 30 "nr-b's route gone" nr_route_is 10.99.243.0/24 || fail "nr-b: $(nr_route 10.99.243.0/24)"

    local before
    before=$(nr_tern_routes)
    [ -n "$before" ] || fail "no route left to watch through the outage"
    stop_apiserver
    sleep 5
    [ "$(nr_tern_routes)" = "$before" ] || fail "routes changed with the API server down: $(nr_tern_routes)"
    start_apiserver
    sleep 2
    [ "$(nr_tern_routes)" = "$before" ] || fail "routes changed after the API server came back: $(nr_tern_routes)"
    kubectl delete node nr-a nr-far --wait=true
    wait_for 30 "every fake node's route gone" bash -c "[ -z \"\$(ip -4 route show proto 116)\" ]" \
        || fail "left: $(nr_tern_routes)"
    # The DaemonSet gave each fake node an agent pod that no kubelet will ever stop; remove them so
    # later cases see a DaemonSet of this one node.
    kubectl -n tern delete pod --field-selector "spec.nodeName!=$NODE" --grace-period=0 --force >/dev/null 2>&1 || true
    wait_for 60 "the DaemonSet back to one node" bash -c \
        "[ \"\$($K8S_BIN/kubectl --kubeconfig $KT/pki/admin.kubeconfig -n tern get pods -o name | wc -l)\" = 1 ]"
}

# can_i AS VERB RESOURCE [NAMESPACE [NAME [SUBRESOURCE]]]: yes/no as the real authorizer answers.
can_i() {
    local as=$1 verb=$2 res=$3 ns=${4:-} name=${5:-} sub=${6:-}
    [ -n "$name" ] && res="$res/$name"
    local args=(auth can-i "$verb" "$res" --as "system:serviceaccount:tern:$as")
    [ -n "$ns" ] && args+=(-n "$ns")
    [ -n "$sub" ] && args+=(--subresource "$sub")
    kubectl "${args[@]}" 2>/dev/null || true
}

expect() { # expect yes|no AS VERB RESOURCE [NS [NAME [SUBRESOURCE]]]
    local want=$1 got
    shift
    got=$(can_i "$@")
    [ "$got" = "$want" ] || fail "can-i $* = $got, want $want"
    echo "can-i $* = $got"
}

case_rbac() {
    # what tern does
    expect yes tern-agent create serviceaccounts tern tern-cni token
    expect yes tern-agent get nodes "" "$NODE"
    expect yes tern-cni get pods default
    expect yes tern-cni get nodes "" "$NODE"
    # what it must not do
    expect no tern-agent create serviceaccounts tern tern-agent token
    expect no tern-agent create serviceaccounts kube-system default token
    expect no tern-agent get secrets tern
    expect no tern-agent list secrets
    expect no tern-agent update nodes "" "$NODE"
    expect no tern-agent patch nodes "" "$NODE"
    expect no tern-agent delete pods default
    expect no tern-cni create serviceaccounts tern tern-cni token
    expect no tern-cni get secrets tern
    expect no tern-cni update pods default
    expect no tern-cni create pods default
    expect no tern-cni list pods
    expect no tern-cni list nodes
    expect no tern-cni patch nodes "" "$NODE"
}
