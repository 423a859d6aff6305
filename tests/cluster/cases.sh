# tests/cluster/cases.sh — the real-cluster tier's cases, run in order by tests/cluster/run.sh.
#
# Each case_NAME runs with errexit in its own subshell: any failing command fails the case.
# `fail MESSAGE` fails it with a message. Cases build on each other in the order of ALL_CASES
# (install first), as an operator's day does.

ALL_CASES=(install pods rbac agent_restart apiserver_down)

fail() { echo "FAIL: $*" >&2; return 1; }

cluster_up() {
    make_pki
    start_etcd
    start_apiserver
    start_controller_manager
    start_scheduler
    start_containerd
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

# nothing_left IP: no host route, host-local lease, tern state or tuning backup for IP.
nothing_left() {
    local ip=$1
    if ip route show | grep -q "^$ip "; then fail "host route to $ip left: $(ip route show | grep "^$ip ")"; fi
    if [ -e "/var/lib/cni/networks/tern/$ip" ]; then fail "lease file /var/lib/cni/networks/tern/$ip left"; fi
    if grep -rl "\"$ip/" /run/cni/tern 2>/dev/null | grep -q .; then fail "tern state for $ip left"; fi
}

case_install() {
    kubectl apply -f "$ROOT/deploy/namespace.yaml"
    # No kube-proxy here: the agent reaches the API server at its real address, as on any
    # kube-proxy-less cluster (the DaemonSet reads this ConfigMap when it exists).
    kubectl -n tern create configmap kubernetes-services-endpoint \
        --from-literal=KUBERNETES_SERVICE_HOST=127.0.0.1 --from-literal=KUBERNETES_SERVICE_PORT="$API_PORT"
    kubectl apply -f "$ROOT/deploy/"
    kubectl -n tern rollout status daemonset/tern-agent --timeout=120s
    for f in $(node_files); do [ -e "$f" ] || fail "$f not installed"; done
    [ "$(stat -c %a "$CNI_NET/tern-kubeconfig")" = 600 ] || fail "kubeconfig mode $(stat -c %a "$CNI_NET/tern-kubeconfig")"
    # The conflist's ranges are the node's podCIDR, read by the install from the real Node.
    local cidr
    cidr=$(kubectl get node "$NODE" -o jsonpath='{.spec.podCIDR}')
    grep -q "\"$cidr\"" "$CNI_NET/10-tern.conflist" || fail "conflist lacks the node's podCIDR $cidr: $(cat "$CNI_NET/10-tern.conflist")"
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
    ip route show | grep -q "^$ipa dev tern" || fail "no host route to $ipa through a tern veth"
    kubectl delete pod pod-a pod-b --wait=true --timeout=60s
    # the kubelet removes the sandbox (and so runs DEL) right after the pod is gone
    wait_for 60 "sandboxes of pod-a and pod-b removed" bash -c "! $GOBIN_DIR/cri-tools/crictl --runtime-endpoint unix://$KT/containerd/containerd.sock pods --name 'pod-[ab]' -q | grep -q ."
    nothing_left "$ipa"
    nothing_left "$ipb"
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
