# shellcheck shell=bash
# tests/conformance/checks.sh — what the conformance run checks itself around the upstream specs,
# on the cluster tests/conformance/lib.sh brought up: `smoke` (what a new user tries first, and the
# guard), `cross_node_nodeports` (two nodes: each node's NodePorts from a pod on the other),
# `self_through_service` (a pod reaching itself through its Service under a NetworkPolicy,
# decision 0003) and `sysctl_precedence` (the sysctls specs' setting against tern-tuning's).
# Sourced by tests/conformance/lib.sh; the harness (tests/cluster/tests/conformance) runs each
# check as `node.sh CHECK` under errexit, a trial of its own.

# smoke: what a new user tries first on the cluster, each checked: `kubectl run`, a Deployment
# behind a ClusterIP Service reached by name, `nslookup kubernetes.default` from a pod, a pod's
# hostPort 8080 reached at the node's address from the host; then the guard: a pod's connection to
# an address off the machine (TEST-NET-1) is refused at once and counted.
smoke() {
    local name got before after
    kubectl create deployment web --image="$AGNHOST_IMAGE" --replicas=2 --port=8080 -- /agnhost netexec --http-port=8080
    kubectl expose deployment web --port=80 --target-port=8080
    # dual stack: the Service takes an IPv6 ClusterIP too, before anyone asks for its AAAA record
    # (CoreDNS would cache the empty answer for 30 s)
    [ -z "$SERVICE_CIDR6" ] || kubectl patch service web -p '{"spec":{"ipFamilyPolicy":"PreferDualStack"}}'
    # client and hostport on node 1 (with TERN_CLUSTER_NODES=2 too): the guard counted is node 1's,
    # the hostPort checked is at node 1's address
    kubectl run client --image="$AGNHOST_IMAGE" --restart=Never \
        --overrides="{\"spec\": {\"nodeSelector\": {\"kubernetes.io/hostname\": \"$NODE\"}}}" --command -- /agnhost pause
    kubectl apply -f - <<YAML
apiVersion: v1
kind: Pod
metadata: {name: hostport, namespace: default}
spec:
  nodeSelector: {kubernetes.io/hostname: $NODE}
  containers:
  - name: web
    image: $AGNHOST_IMAGE
    args: [netexec, --http-port=8080]
    ports: [{containerPort: 8080, hostPort: 8080, hostIP: $NODE_IP}]
YAML
    kubectl rollout status deployment/web --timeout=120s
    kubectl wait --for=condition=Ready pod/client pod/hostport --timeout=120s
    # kube-proxy programs the Service once its endpoints are ready, a moment after the rollout
    local end=$((SECONDS + 30))
    until got=$(kubectl exec client -- curl -sf --max-time 5 http://web.default.svc.cluster.local/hostname); do
        [ "$SECONDS" -lt "$end" ] || { echo "web Service not reached by name in 30 s"; return 1; }
        sleep 1
    done
    # the list read whole first: `kubectl ... | grep -q` fails under pipefail when grep exits early
    local web_pods
    web_pods=$(kubectl get pods -l app=web -o name)
    grep -qx "pod/$got" <<<"$web_pods" || { echo "web Service answered '$got', not a web pod: $web_pods"; return 1; }
    echo "Deployment behind ClusterIP Service web: answered by $got"
    if [ -n "$SERVICE_CIDR6" ]; then
        # dual stack: CoreDNS answers the Service's AAAA record, kube-proxy forwards its IPv6
        # ClusterIP to a web pod over IPv6
        local ip6
        ip6=$(kubectl get service web -o jsonpath='{.spec.clusterIPs[1]}')
        case "$ip6" in "${SERVICE_CIDR6%%::*}:"*) ;; *) echo "web Service has no IPv6 ClusterIP in $SERVICE_CIDR6: '$ip6'"; return 1 ;; esac
        end=$((SECONDS + 40))
        until got=$(kubectl exec client -- dig +short AAAA web.default.svc.cluster.local) && [ "$got" = "$ip6" ]; do
            [ "$SECONDS" -lt "$end" ] || { echo "AAAA web.default.svc.cluster.local: '$got', not $ip6"; return 1; }
            sleep 1
        done
        echo "AAAA web.default.svc.cluster.local: $got"
        end=$((SECONDS + 30))
        until got=$(kubectl exec client -- curl -sfg --max-time 5 "http://[$ip6]/hostname"); do
            [ "$SECONDS" -lt "$end" ] || { echo "web Service not reached at [$ip6] in 30 s"; return 1; }
            sleep 1
        done
        grep -qx "pod/$got" <<<"$web_pods" || { echo "web Service at [$ip6] answered '$got', not a web pod"; return 1; }
        echo "web Service at [$ip6]: answered by $got"
    fi
    got=$(kubectl exec client -- nslookup kubernetes.default)
    echo "$got"
    grep -q 'Address: 10.99.220.1$' <<<"$got" || { echo "nslookup kubernetes.default: no 10.99.220.1"; return 1; }
    got=$(curl -sf --max-time 10 "http://$NODE_IP:8080/hostname")
    [ "$got" = hostport ] || { echo "hostPort 8080 at $NODE_IP answered '$got', not hostport"; return 1; }
    echo "hostPort 8080 at $NODE_IP: answered by $got"
    local off
    for off in 192.0.2.1 ${NODE_IP6:+[2001:db8::1]}; do
        before=$(guard_rejected)
        if kubectl exec client -- curl -sg --max-time 5 "http://$off/"; then echo "a pod reached $off: the guard let it out"; return 1; fi
        after=$(guard_rejected)
        [ "$after" -gt "$before" ] || { echo "guard counter did not move for $off ($before -> $after)"; return 1; }
        echo "guard: a pod's connection to $off rejected ($before -> $after packets)"
    done
    kubectl delete deployment web --wait=false
    kubectl delete service web
    kubectl delete pod client hostport --wait=true --timeout=60s
}

# cross_node_nodeports (two nodes): a pod on each node reaches the other node's NodePort, TCP and
# UDP, IPv4 and (dual stack) IPv6, to a backend on either node: what was broken with
# vxlan (the tier's bridge shared node 1's netns, so br_netfilter ran node 1's conntrack and NAT
# on its own packets a second time; DESIGN, "The two-node tier"). Each Service selects one server
# pod, so every path is tried, not the one kube-proxy happens to pick. Run it in a process of its own, as
# node.sh does: its EXIT trap removes its pods and Services however it ends.
cross_node_nodeports() {
    local n srv cl node addr port proto got want fails=0 tries policy=SingleStack
    trap 'kubectl delete pod np-srv1 np-srv2 np-cl1 np-cl2 --ignore-not-found --wait=false; kubectl delete service np-srv1 np-srv2 --ignore-not-found' EXIT
    [ -z "$SERVICE_CIDR6" ] || policy=PreferDualStack
    for n in 1 2; do
        node=$NODE; [ "$n" = 1 ] || node=$NODE2
        kubectl apply -f - <<YAML
apiVersion: v1
kind: Pod
metadata: {name: np-srv$n, namespace: default, labels: {app: np-srv$n}}
spec:
  nodeSelector: {kubernetes.io/hostname: $node}
  containers:
  - name: srv
    image: $AGNHOST_IMAGE
    args: [netexec, --http-port=8080, --udp-port=8081]
---
apiVersion: v1
kind: Pod
metadata: {name: np-cl$n, namespace: default}
spec:
  nodeSelector: {kubernetes.io/hostname: $node}
  containers:
  - name: cl
    image: $AGNHOST_IMAGE
    command: [/agnhost, pause]
---
apiVersion: v1
kind: Service
metadata: {name: np-srv$n, namespace: default}
spec:
  type: NodePort
  ipFamilyPolicy: $policy
  selector: {app: np-srv$n}
  ports:
  - {name: tcp, protocol: TCP, port: 8080, targetPort: 8080}
  - {name: udp, protocol: UDP, port: 8081, targetPort: 8081}
YAML
    done
    kubectl wait --for=condition=Ready pod/np-srv1 pod/np-srv2 pod/np-cl1 pod/np-cl2 --timeout=120s
    # client on node N, the other node's addresses
    local -A other=([np-cl1]="$NODE2_IP${NODE2_IP6:+ $NODE2_IP6}" [np-cl2]="$NODE_IP${NODE_IP6:+ $NODE_IP6}")
    for cl in np-cl1 np-cl2; do
        for srv in np-srv1 np-srv2; do
            for proto in tcp udp; do
                port=$(kubectl get service "$srv" -o jsonpath="{.spec.ports[?(@.name==\"$proto\")].nodePort}")
                for addr in ${other[$cl]}; do
                    want=$srv got='' tries=0
                    # kube-proxy programs a new Service a moment after its endpoints are ready
                    while [ "$tries" -lt 10 ]; do
                        tries=$((tries + 1))
                        if [ "$proto" = tcp ]; then
                            got=$(kubectl exec --request-timeout=20s "$cl" -- curl -sfg --max-time 3 "http://${addr/*:*/[$addr]}:$port/hostname" 2>/dev/null) || got=''
                        else
                            got=$(kubectl exec --request-timeout=20s "$cl" -- sh -c "echo hostname | nc -u -w 2 $addr $port" 2>/dev/null) || got=''
                        fi
                        [ "$got" != "$want" ] || break
                        sleep 1
                    done
                    if [ "$got" = "$want" ]; then
                        echo "ok: $cl -> $addr:$port/$proto (backend $srv) in $tries tries"
                    else
                        echo "FAILED: $cl -> $addr:$port/$proto (backend $srv): got '$got' after $tries tries"
                        fails=$((fails + 1))
                    fi
                done
            done
        done
    done
    [ "$fails" -eq 0 ] || { echo "cross_node_nodeports: $fails path(s) failed"; return 1; }
}

# self_through_service: what a pod's connection to itself gets (the API leaves it open,
# kubernetes/kubernetes#95879; docs/decisions/0003). With a deny-all ingress policy on
# pod self-svc: its own address still answers (the connection never leaves its netns), its
# ClusterIP Service, whose one endpoint it is, does not (kube-proxy's DNAT sends it through the
# node's forward hook, judged like any peer); a policy allowing from its own label opens the
# Service again. Run it in a process of its own (node.sh): its EXIT trap removes what it made however it ends.
self_through_service() {
    local own svc
    trap 'kubectl delete pod self-svc --ignore-not-found --wait=false; kubectl delete service self-svc --ignore-not-found; kubectl delete networkpolicy self-deny self-allow --ignore-not-found' EXIT
    kubectl apply -f - <<YAML
apiVersion: v1
kind: Pod
metadata: {name: self-svc, namespace: default, labels: {app: self-svc}}
spec:
  containers: [{name: srv, image: $AGNHOST_IMAGE, args: [netexec, --http-port=8080]}]
---
apiVersion: v1
kind: Service
metadata: {name: self-svc, namespace: default}
spec:
  selector: {app: self-svc}
  ports: [{port: 8080, targetPort: 8080}]
YAML
    kubectl wait --for=condition=Ready pod/self-svc --timeout=120s
    own=$(kubectl get pod self-svc -o jsonpath='{.status.podIP}')
    svc=$(kubectl get service self-svc -o jsonpath='{.spec.clusterIP}')
    # reach ADDR WANT: ADDR answers (WANT yes: within 15 tries a second apart, for kube-proxy and
    # the agent to catch up), or is refused 3 tries in a row (no)
    reach() {
        local addr=$1 want=$2 tries=0 refused=0 got
        while [ "$tries" -lt 15 ]; do
            tries=$((tries + 1))
            got=$(kubectl exec --request-timeout=20s self-svc -- curl -sfg --max-time 2 "http://${addr/*:*/[$addr]}:8080/hostname" 2>/dev/null) || got=''
            if [ "$want" = yes ]; then
                [ "$got" != self-svc ] || { echo "ok: self-svc -> $addr answered (try $tries)"; return 0; }
            else
                if [ -z "$got" ]; then refused=$((refused + 1)); else refused=0; fi
                [ "$refused" -lt 3 ] || { echo "ok: self-svc -> $addr refused (try $tries)"; return 0; }
            fi
            sleep 1
        done
        echo "FAILED: self-svc -> $addr: wanted $want, got '$got' after $tries tries"
        return 1
    }
    reach "$own" yes
    reach "$svc" yes
    kubectl apply -f - <<YAML
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: self-deny, namespace: default}
spec: {podSelector: {matchLabels: {app: self-svc}}, policyTypes: [Ingress]}
YAML
    reach "$svc" no
    reach "$own" yes
    kubectl apply -f - <<YAML
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: self-allow, namespace: default}
spec: {podSelector: {matchLabels: {app: self-svc}}, ingress: [{from: [{podSelector: {matchLabels: {app: self-svc}}}]}]}
YAML
    reach "$svc" yes
}

# sysctl_precedence: which value a pod sees when its securityContext sets a sysctl that deploy/'s
# tern-tuning also sets (net.ipv4.tcp_keepalive_time): the pod's own, and tern-tuning's for the
# keys the pod leaves alone. Pod `tuned` sets tcp_keepalive_time 300 (a safe sysctl, allowed by
# every kubelet), pod `plain` sets nothing; each reads the values back from its own netns.
sysctl_precedence() {
    local conf key want_time want_intvl got
    conf="$CNI_NET/10-tern.conflist"
    want_time=$(jq -r '.plugins[] | select(.type == "tern-tuning") | .sysctl["net.ipv4.tcp_keepalive_time"]' "$conf")
    want_intvl=$(jq -r '.plugins[] | select(.type == "tern-tuning") | .sysctl["net.ipv4.tcp_keepalive_intvl"]' "$conf")
    [ "$want_time" != null ] && [ "$want_intvl" != null ] || { echo "$conf: tern-tuning sets no tcp_keepalive_time/intvl"; return 1; }
    echo "tern-tuning's conflist: tcp_keepalive_time $want_time, tcp_keepalive_intvl $want_intvl (runtime $RUNTIME)"
    kubectl apply -f - <<YAML
apiVersion: v1
kind: Pod
metadata: {name: tuned, namespace: default}
spec:
  securityContext:
    sysctls: [{name: net.ipv4.tcp_keepalive_time, value: "300"}]
  containers: [{name: c, image: $AGNHOST_IMAGE, args: [pause]}]
---
apiVersion: v1
kind: Pod
metadata: {name: plain, namespace: default}
spec:
  containers: [{name: c, image: $AGNHOST_IMAGE, args: [pause]}]
YAML
    kubectl wait --for=condition=Ready pod/tuned pod/plain --timeout=120s
    local rc=0
    for key in tcp_keepalive_time tcp_keepalive_intvl; do
        got=$(kubectl exec plain -- cat "/proc/sys/net/ipv4/$key")
        echo "pod plain (no sysctls): $key $got"
        [ "$got" = "$([ $key = tcp_keepalive_time ] && echo "$want_time" || echo "$want_intvl")" ] || { echo "  expected tern-tuning's value"; rc=1; }
    done
    got=$(kubectl exec tuned -- cat /proc/sys/net/ipv4/tcp_keepalive_time)
    echo "pod tuned (securityContext tcp_keepalive_time 300): tcp_keepalive_time $got"
    [ "$got" = 300 ] || { echo "  expected the pod's own 300: tern-tuning's $want_time overwrote it"; rc=1; }
    got=$(kubectl exec tuned -- cat /proc/sys/net/ipv4/tcp_keepalive_intvl)
    echo "pod tuned: tcp_keepalive_intvl $got (not set by the pod)"
    [ "$got" = "$want_intvl" ] || { echo "  expected tern-tuning's $want_intvl"; rc=1; }
    kubectl delete pod tuned plain --wait=true --timeout=60s
    return "$rc"
}
