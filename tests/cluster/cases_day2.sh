# tests/cluster/cases_day2.sh — the real-cluster tier's day-two cases: the agent and the API server
# lost, tokens revoked, capped and unverifiable, a rollout, the node's readiness, uninstall.
#
# Sourced by tests/cluster/run.sh after cases.sh, whose helpers (fail, pod_manifest, pod_ip,
# nothing_left, ...) these cases use; their order is ALL_CASES in cases.sh, their conventions
# cases.sh's.

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
    stop_apiserver
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
    stop_apiserver
    start_apiserver --service-account-max-token-expiration 1h
    kubectl -n tern rollout restart daemonset/tern-agent
    kubectl -n tern rollout status daemonset/tern-agent --timeout=120s
    wait_for 60 "a token minted under the 1 h cap" bash -c \
        ". $ROOT/tests/cluster/lib.sh; . $ROOT/tests/cluster/cases_day2.sh; t=\$(cni_token); [ \$((\$(jwt_claim \$t exp) - \$(jwt_claim \$t iat))) -le 3600 ]"
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
    stop_apiserver
    start_apiserver
}

# The signing key replaced with no overlap (every token, the agent's own included, is 401): a pod
# start fails with an error that says so; rolling the DaemonSet (the kubelet mints the new agent
# pod a token under the new key) brings the node back, and the waiting pod starts.
case_signing_key_rotated() {
    [ -f "$KT/pki/sa2.key" ] || sa_key sa2
    stop_apiserver
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
