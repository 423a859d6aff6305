# tests/cluster/cases.sh — the real-cluster tier's cases, run in order by tests/cluster/run.sh.
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
    stop apiserver
    sleep 5
    [ "$(nr_tern_routes)" = "$before" ] || fail "routes changed with the API server down: $(nr_tern_routes)"
    start_apiserver
    sleep 2
    [ "$(nr_tern_routes)" = "$before" ] || fail "routes changed after the API server came back: $(nr_tern_routes)"
    kubectl delete node nr-a nr-far --wait=true
    wait_for 30 "every fake node's route gone" bash -c "[ -z \"\$(ip -4 route show proto 116)\" ]" \
        || fail "left: $(nr_tern_routes)"
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

# The agent pod killed: the plugin's token stays valid, pods start; the kubelet brings it back.
case_agent_restart() {
    local old
    old=$(kubectl -n tern get pods -l app.kubernetes.io/name=tern-agent -o jsonpath='{.items[0].metadata.name}')
    kubectl -n tern delete pod "$old" --wait=false
    pod_manifest pod-c | kubectl apply -f -
    kubectl wait --for=condition=Ready pod/pod-c --timeout=90s
    kubectl -n tern rollout status daemonset/tern-agent --timeout=120s
    kubectl delete pod pod-c --wait=true --timeout=60s
}

# The API server stopped: deleting a pod still completes (DEL never waits on the API), a new pod
# cannot start (the kubelet cannot even see it) and starts once the server is back.
case_apiserver_down() {
    local ip
    pod_manifest pod-d | kubectl apply -f -
    kubectl wait --for=condition=Ready pod/pod-d --timeout=90s
    ip=$(pod_ip pod-d)
    local sandbox
    sandbox=$(crictl pods --name pod-d -q)
    stop apiserver
    # the kubelet cannot learn of a deletion without the API: stop and remove the sandbox as the
    # kubelet would on eviction, through the CRI, which runs tern's DEL
    crictl stopp "$sandbox"
    crictl rmp "$sandbox"
    nothing_left "$ip"
    start_apiserver
    kubectl delete pod pod-d --wait=true --timeout=60s
    pod_manifest pod-e | kubectl apply -f -
    kubectl wait --for=condition=Ready pod/pod-e --timeout=90s
    kubectl delete pod pod-e --wait=true --timeout=60s
}

# The CNI token in the node's kubeconfig.
cni_token() { sed -n 's/^ *token: *//p' "$CNI_NET/tern-kubeconfig" | tr -d '"'; }

# jwt_claim TOKEN CLAIM: one numeric claim of a JWT's payload.
jwt_claim() {
    python3 -c 'import base64,json,sys; p=sys.argv[1].split(".")[1]; p+="="*(-len(p)%4); print(json.loads(base64.urlsafe_b64decode(p))[sys.argv[2]])' "$1" "$2"
}

# no_sandbox_failures POD: the kubelet's first sandbox for POD succeeded (no FailedCreatePodSandBox).
no_sandbox_failures() {
    local ev
    ev=$(kubectl get events --field-selector "involvedObject.name=$1,reason=FailedCreatePodSandBox" -o name)
    [ -z "$ev" ] || fail "sandbox creation of $1 failed first: $(kubectl get events --field-selector "involvedObject.name=$1" -o jsonpath='{.items[*].message}')"
}

# A pod whose sandbox dies is given a new one by the kubelet (tern's DEL, then ADD) and works.
case_sandbox_recreated() {
    local old new ip1 ip2
    pod_manifest pod-s | kubectl apply -f -
    pod_manifest pod-t | kubectl apply -f -
    kubectl wait --for=condition=Ready pod/pod-s pod/pod-t --timeout=90s
    ip1=$(pod_ip pod-s)
    old=$(crictl pods --name pod-s -q)
    crictl stopp "$old"
    wait_for 90 "a new sandbox for pod-s" bash -c "[ -n \"\$($GOBIN_DIR/cri-tools/crictl --config /dev/null --runtime-endpoint unix://$CRI_SOCK pods --name pod-s --state ready -q)\" ]"
    kubectl wait --for=condition=Ready pod/pod-s --timeout=90s
    new=$(crictl pods --name pod-s --state ready -q)
    [ "$new" != "$old" ] || fail "sandbox not recreated"
    wait_for 30 "pod-s's new IP reported" bash -c "[ -n \"\$($K8S_BIN/kubectl --kubeconfig $KT/pki/admin.kubeconfig get pod pod-s -o jsonpath='{.status.podIP}')\" ]"
    ip2=$(pod_ip pod-s)
    echo "sandbox $old ($ip1) -> $new ($ip2)"
    [ "$ip1" = "$ip2" ] || nothing_left "$ip1"
    in_pod pod-t ping -c 2 -W 2 "$ip2"
    in_pod pod-s ping -c 2 -W 2 "$(pod_ip pod-t)"
    kubectl delete pod pod-s pod-t --wait=true --timeout=60s
}

# The CNI token revoked (its service account recreated: every token bound to the old one is 401):
# the plugin's lookup gets 401, asks tern-agent for a refresh over its socket, and the pod's first
# sandbox succeeds with the new token.
case_token_revoked() {
    local before after
    before=$(cni_token)
    kubectl -n tern delete serviceaccount tern-cni
    kubectl apply -f "$ROOT/deploy/serviceaccounts.yaml"
    # the API server caches successful token reviews for up to 10 s
    sleep 11
    code=$(curl -s -o /dev/null -w '%{http_code}' --cacert "$KT/pki/ca.crt" \
        -H "Authorization: Bearer $before" "$API/api/v1/namespaces/default/pods/x")
    [ "$code" = 401 ] || fail "the old CNI token answers $code, not 401"
    pod_manifest pod-f | kubectl apply -f -
    kubectl wait --for=condition=Ready pod/pod-f --timeout=90s
    after=$(cni_token)
    [ "$before" != "$after" ] || fail "the kubeconfig's token was not refreshed"
    no_sandbox_failures pod-f
    kubectl delete pod pod-f --wait=true --timeout=60s
}

# --service-account-max-token-expiration at its minimum (1h): the agent's token is the server's
# (<= 1 h, not the 24 h asked for) and the agent plans its next refresh before it expires.
case_max_token_expiration() {
    local tok lifetime exp next
    stop apiserver
    start_apiserver --service-account-max-token-expiration 1h
    kubectl -n tern rollout restart daemonset/tern-agent
    kubectl -n tern rollout status daemonset/tern-agent --timeout=120s
    wait_for 60 "a token minted under the 1 h cap" bash -c \
        ". $ROOT/tests/cluster/lib.sh; . $ROOT/tests/cluster/cases.sh; t=\$(cni_token); [ \$((\$(jwt_claim \$t exp) - \$(jwt_claim \$t iat))) -le 3600 ]"
    tok=$(cni_token)
    lifetime=$(($(jwt_claim "$tok" exp) - $(jwt_claim "$tok" iat)))
    echo "CNI token lifetime ${lifetime}s"
    exp=$(curl -sf http://127.0.0.1:9412/metrics | awk '/^tern_agent_token_expiry_timestamp_seconds / {print int($2)}')
    next=$(curl -sf http://127.0.0.1:9412/metrics | awk '/^tern_agent_next_attempt_timestamp_seconds / {print int($2)}')
    echo "agent: token expires at $exp, next attempt at $next"
    [ -n "$exp" ] && [ -n "$next" ] || fail "agent metrics lack expiry or next attempt"
    [ "$next" -lt "$exp" ] || fail "next refresh $next is not before expiry $exp"
    # the agent refreshes at a quarter to a half of the granted lifetime
    [ $((next - $(jwt_claim "$tok" iat))) -le $((lifetime / 2 + 5)) ] || fail "next refresh later than half the lifetime"
    stop apiserver
    start_apiserver
}

# The signing key replaced with no overlap (every token, the agent's own included, is 401): a pod
# start fails with an error that says so; rolling the DaemonSet (the kubelet mints the new agent
# pod a token under the new key) brings the node back, and the waiting pod starts.
case_signing_key_rotated() {
    [ -f "$KT/pki/sa2.key" ] || sa_key sa2
    stop apiserver
    stop controller-manager
    SA_KEY=sa2 start_apiserver
    SA_KEY=sa2 start_controller_manager
    sleep 11
    pod_manifest pod-k | kubectl apply -f -
    wait_for 90 "pod-k's sandbox failure event" bash -c \
        "$K8S_BIN/kubectl --kubeconfig $KT/pki/admin.kubeconfig get events --field-selector involvedObject.name=pod-k,reason=FailedCreatePodSandBox -o name | grep -q ."
    msg=$(kubectl get events --field-selector involvedObject.name=pod-k,reason=FailedCreatePodSandBox -o jsonpath='{.items[0].message}')
    echo "pod-k: $msg"
    echo "$msg" | has -i "unauthorized\|401" || fail "the error does not say the token was refused"
    kubectl -n tern rollout restart daemonset/tern-agent
    kubectl -n tern rollout status daemonset/tern-agent --timeout=120s
    kubectl wait --for=condition=Ready pod/pod-k --timeout=180s
    kubectl delete pod pod-k --wait=true --timeout=60s
}

# The DaemonSet rolled to a new image: pods running through it keep their network.
case_rollout() {
    local ip
    pod_manifest pod-r | kubectl apply -f -
    pod_manifest pod-q | kubectl apply -f -
    kubectl wait --for=condition=Ready pod/pod-r pod/pod-q --timeout=90s
    ip=$(pod_ip pod-r)
    local next="${TERN_IMAGE%:*}:rollout-test"
    bash "$ROOT/scripts/image" --name "$next" --out "$KT/images/next.oci.tar"
    import_image "$KT/images/next.oci.tar" "$next"
    kubectl -n tern set image daemonset/tern-agent install="$next" agent="$next"
    kubectl -n tern rollout status daemonset/tern-agent --timeout=120s
    [ "$(kubectl -n tern get pods -l app.kubernetes.io/name=tern-agent -o jsonpath='{.items[0].spec.containers[0].image}')" = "$next" ]
    in_pod pod-q ping -c 2 -W 2 "$ip"
    ip route show | has "^$ip dev tern" || fail "host route to $ip lost in the rollout"
    kubectl delete pod pod-r pod-q --wait=true --timeout=60s
    nothing_left "$ip"
}

# --- the node's readiness through the runtime's CNI STATUS -------------------------------------

# agent_away: the DaemonSet's pod leaves the node (a nodeSelector no node matches).
agent_away() {
    kubectl -n tern patch daemonset tern-agent --type=merge \
        -p '{"spec":{"template":{"spec":{"nodeSelector":{"tern.test/nowhere":"true"}}}}}'
    wait_for 90 "tern-agent pod gone" bash -c "[ -z \"\$($K8S_BIN/kubectl --kubeconfig $KT/pki/admin.kubeconfig -n tern get pods -l app.kubernetes.io/name=tern-agent -o name)\" ]"
}

# agent_back: the nodeSelector removed; the init container reinstalls and mints a fresh token.
agent_back() {
    kubectl -n tern patch daemonset tern-agent --type=json \
        -p '[{"op":"remove","path":"/spec/template/spec/nodeSelector"}]'
    kubectl -n tern rollout status daemonset/tern-agent --timeout=120s
}

node_ready_status() { kubectl get node "$NODE" -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}'; }
node_ready_message() { kubectl get node "$NODE" -o jsonpath='{.status.conditions[?(@.type=="Ready")].message}'; }

# expire_token KUBECONFIG: rewrites the token's `exp` to a minute ago (its signature no longer
# matches either, so the API server refuses it too). A real expiry takes at least 10 minutes
# (TokenRequest's minimum lifetime); STATUS reads only `exp`, so this is the same state.
expire_token() {
    python3 - "$1" <<'PY'
import base64, json, re, sys, time
p = sys.argv[1]
text = open(p).read()
m = re.search(r"token: (['\"]?)([A-Za-z0-9_-]+)\.([A-Za-z0-9_-]+)\.([A-Za-z0-9_-]*)\1", text)
assert m, "no JWT in the kubeconfig"
pad = lambda s: s + "=" * (-len(s) % 4)
claims = json.loads(base64.urlsafe_b64decode(pad(m.group(3))))
claims["exp"] = int(time.time()) - 60
body = base64.urlsafe_b64encode(json.dumps(claims).encode()).decode().rstrip("=")
tok = f"{m.group(2)}.{body}.{m.group(4)}"
open(p, "w").write(text[: m.start()] + f"token: {tok}" + text[m.end():])
PY
}

# The agent gone and the token expired: the runtime's STATUS call (containerd 2 asks every CNI
# network's STATUS on the CRI Status call) fails with tern's code 50, so the kubelet reports
# NetworkReady=false and the node NotReady; no pod starts. The agent back: Ready again, pods start.
case_network_not_ready() {
    wait_for 60 "node Ready" node_ready
    agent_away
    # the agent's socket is gone or refuses: STATUS cannot count on a refresh
    if [ -S /run/tern/agent.sock ] && python3 -c 'import socket,sys; s=socket.socket(socket.AF_UNIX); s.connect(sys.argv[1])' /run/tern/agent.sock 2>/dev/null; then
        fail "the agent socket still accepts connections after the agent left"
    fi
    # with a valid token and no agent, the node stays Ready (the token still works)
    sleep 12
    [ "$(node_ready_status)" = True ] || fail "node not Ready with a valid token: $(node_ready_message)"
    expire_token "$CNI_NET/tern-kubeconfig"
    wait_for 60 "node NotReady through CNI STATUS" bash -c "[ \"\$($K8S_BIN/kubectl --kubeconfig $KT/pki/admin.kubeconfig get node $NODE -o jsonpath='{.status.conditions[?(@.type==\"Ready\")].status}')\" = False ]"
    local msg
    msg=$(node_ready_message)
    echo "Ready=False: $msg"
    case "$msg" in
        *"network not ready"*"has expired"*) ;;
        *) fail "NotReady for another reason: $msg" ;;
    esac
    # a pod does not start while the network is not ready
    pod_manifest pod-nr | kubectl apply -f -
    sleep 8
    [ "$(kubectl get pod pod-nr -o jsonpath='{.status.podIP}')" = "" ] || fail "pod-nr got an IP while the network was not ready"
    agent_back
    wait_for 60 "node Ready again" node_ready
    kubectl wait --for=condition=Ready pod/pod-nr --timeout=90s
    kubectl delete pod pod-nr --wait=true --timeout=60s
}

# --- uninstall ---------------------------------------------------------------------------------

tern_plugins_present() { local p; for p in tern tern-tuning tern-ipam tern-lookup; do [ -e "$CNI_BIN/$p" ] || return 1; done; }

# The DaemonSet deleted with a pod still wired by tern: the agent's preStop hook removes the
# conflist and keeps the kubeconfig and the plugins. (containerd cannot tear a sandbox down while no
# conflist is loaded, so the DaemonSet is applied again before that pod goes.) Deleted again with no
# tern pod left: the hook removes everything of tern's and nothing else. A restarted agent pod
# (DaemonSet kept) uninstalls nothing.
case_uninstall() {
    local old ip
    old=$(kubectl -n tern get pods -l app.kubernetes.io/name=tern-agent -o jsonpath='{.items[0].metadata.name}')
    kubectl -n tern delete pod "$old" --wait=true --timeout=60s
    [ -e "$CNI_NET/10-tern.conflist" ] || fail "a restarted agent pod removed the conflist"
    kubectl -n tern rollout status daemonset/tern-agent --timeout=120s
    pod_manifest pod-u | kubectl apply -f -
    kubectl wait --for=condition=Ready pod/pod-u --timeout=90s
    ip=$(pod_ip pod-u)
    agent_deleted
    [ ! -e "$CNI_NET/10-tern.conflist" ] || fail "the conflist is still there after the DaemonSet was deleted"
    [ -e "$CNI_NET/tern-kubeconfig" ] || fail "the kubeconfig was removed while pod-u is wired by tern"
    tern_plugins_present || fail "plugins removed while pod-u is wired by tern: $(ls $CNI_BIN)"
    nft list table inet tern_nat >/dev/null 2>&1 || fail "the egress NAT table was removed while pod-u is wired by tern"
    kubectl apply -f "$ROOT/deploy/daemonset.yaml"
    kubectl -n tern rollout status daemonset/tern-agent --timeout=120s
    kubectl delete pod pod-u --wait=true --timeout=60s
    wait_for 60 "sandbox of pod-u removed" bash -c "! $GOBIN_DIR/cri-tools/crictl --runtime-endpoint unix://$CRI_SOCK pods --name pod-u -q | grep -q ."
    nothing_left "$ip"
    agent_deleted
    for f in "$CNI_NET/10-tern.conflist" "$CNI_NET/tern-kubeconfig" $CNI_BIN/tern $CNI_BIN/tern-tuning $CNI_BIN/tern-ipam $CNI_BIN/tern-lookup; do
        [ ! -e "$f" ] || fail "$f left after the DaemonSet was deleted with no tern pod left"
    done
    [ -e "$CNI_BIN/host-local" ] || fail "uninstall removed a file that is not tern's"
    ! nft list table inet tern_nat >/dev/null 2>&1 || fail "the egress NAT table left after the DaemonSet was deleted with no tern pod left"
}

# agent_deleted: the DaemonSet deleted and its pod gone (its preStop hook has run).
agent_deleted() {
    local pod
    pod=$(kubectl -n tern get pods -l app.kubernetes.io/name=tern-agent -o jsonpath='{.items[0].metadata.name}')
    kubectl -n tern delete daemonset tern-agent --wait=true --timeout=60s
    wait_for 60 "agent pod $pod gone" bash -c "! $K8S_BIN/kubectl --kubeconfig $KT/pki/admin.kubeconfig -n tern get pod $pod >/dev/null 2>&1"
}
