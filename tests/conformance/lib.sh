# tests/conformance/lib.sh — the real-cluster tier (tests/cluster/lib.sh) as operators run a
# cluster, for Kubernetes' own e2e networking specs (scripts/conformance):
# - the API server binds and advertises the node's address (10.99.219.1) with the lease endpoint
#   reconciler (TERN_CLUSTER_API_ADDR, set by scripts/conformance before lib.sh is sourced);
# - kube-proxy in nftables mode (TERN_KUBE_PROXY_MODE=iptables for the other) as a host process
#   with its own client certificate (CN system:kube-proxy), NodePorts on the node's address only,
#   healthz/metrics on loopback; in iptables mode no NodePorts on localhost, so it leaves the
#   machine's route_localnet alone;
# - CoreDNS v1.12.1 as kubeadm deploys it (Deployment + kube-dns Service at 10.99.220.10), with
#   no `forward`: nothing is resolved outside the cluster; the kubelet's clusterDNS points at it;
# - tern from deploy/ as it is: its conflist chains the reference portmap and bandwidth plugins
#   (v1.10.0, tools/go/plugins) after tern-tuning, as Calico's and flannel's conflists chain them,
#   and `tern-agent install` installs them from tern's image;
# - the guard: table inet tern_kt_guard rejects what pods send to addresses that are not the
#   cluster's (pod range, service range, the node's address), for IPv4 and, on the dual-stack
#   cluster, IPv6, so test traffic never leaves the machine (the host's default routes of both
#   families and its resolver are off-machine);
# - dual stack unless TERN_CLUSTER_IP_FAMILY=ipv4 (tests/cluster/lib.sh): kube-proxy's clusterCIDR
#   and NodePort addresses in both families, CoreDNS answering AAAA for dual-stack Services.
#
# - TERN_CLUSTER_CNP=1: ClusterNetworkPolicy on (tests/conformance/cnp.sh; scripts/conformance-cnp).
#
# Sourced by scripts/conformance after tests/cluster/lib.sh and tests/conformance/images.sh.

KUBE_DNS_IP=10.99.220.10
# shellcheck source=cnp.sh
. "$ROOT/tests/conformance/cnp.sh"
E2E_BIN="$GOBIN_DIR/e2e"

# guard_up: the nftables table that keeps pods' traffic on the machine. kube-proxy DNATs service
# addresses before the forward hook, so traffic to a Service with endpoints passes as pod traffic;
# what is rejected is traffic to anything else (the internet, the host's resolver, services with
# no endpoints).
guard_up() {
    touch "$KT/guard"
    local v6='' v6out=''
    if [ -n "$CLUSTER_CIDR6" ]; then
        v6="
        ip6 saddr $CLUSTER_CIDR6 ip6 daddr { $CLUSTER_CIDR6, $NODE_IP6 } accept
        ip6 saddr $CLUSTER_CIDR6 counter reject
        ip6 daddr $SERVICE_CIDR6 counter reject"
        v6out="
        ip6 daddr $SERVICE_CIDR6 counter reject"
    fi
    nft -f - <<NFT
table inet tern_kt_guard {
    chain forward {
        type filter hook forward priority filter; policy accept;
        ip saddr $CLUSTER_CIDR ip daddr { $CLUSTER_CIDR, $NODE_IP } accept
        ip saddr $CLUSTER_CIDR counter reject
        ip daddr $SERVICE_CIDR counter reject$v6
    }
    chain output {
        type filter hook output priority filter; policy accept;
        ip daddr $SERVICE_CIDR counter reject$v6out
    }
}
NFT
}

# guard_rejected: the packets the guard's forward chain rejected from the pod ranges (both
# families summed).
guard_rejected() {
    nft list chain inet tern_kt_guard forward | awk '/saddr/ && /reject/ {for (i = 1; i <= NF; i++) if ($i == "packets") s += $(i + 1)} END {print s + 0}'
}

start_kube_proxy() {
    local k="$KT/kube-proxy" npa="\"$NODE_IP/32\""
    [ -z "$NODE_IP6" ] || npa+=", \"$NODE_IP6/128\""
    mkdir -p "$k"
    cat >"$k/config.yaml" <<YAML
apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
mode: ${TERN_KUBE_PROXY_MODE:-nftables}
clientConnection: {kubeconfig: $KT/pki/kube-proxy.kubeconfig}
hostnameOverride: $NODE
clusterCIDR: "$CLUSTER_CIDRS"
nodePortAddresses: [$npa]
healthzBindAddress: 127.0.0.1:10256
metricsBindAddress: 127.0.0.1:10249
conntrack: {maxPerCore: 0, min: 0, tcpEstablishedTimeout: 0s, tcpCloseWaitTimeout: 1h0m0s}
iptables: {localhostNodePorts: false}
YAML
    # kube-proxy's default CLOSE_WAIT timeout (1 h; "KubeProxy should set TCP CLOSE_WAIT timeout"
    # checks it) is written to the machine's conntrack sysctl: `down` puts the machine's value back
    sysctl -n net.netfilter.nf_conntrack_tcp_timeout_close_wait >"$KT/conntrack-close-wait"
    start kube-proxy "$E2E_BIN/kube-proxy" --config "$k/config.yaml" --v=1
    wait_for 60 "kube-proxy healthz" curl -sf http://127.0.0.1:10256/healthz
}

# install_tern: deploy/ applied as an operator does (only the egress NAT's cluster ranges set to
# this cluster's): its chain is tern, tern-tuning, portmap, bandwidth, and `tern-agent install`
# puts the reference portmap and bandwidth from tern's image beside tern's plugins; this tier adds
# nothing to it, so the specs test what deploy/ ships. With TERN_CLUSTER_NODE_ROUTES=vxlan (two
# nodes on two subnets, node2.sh) deploy/README.md's VXLAN steps on top.
install_tern() {
    kubectl apply -f "$ROOT/deploy/00-namespace.yaml"
    kubectl -n tern create configmap kubernetes-services-endpoint \
        --from-literal=KUBERNETES_SERVICE_HOST="$API_ADDR" --from-literal=KUBERNETES_SERVICE_PORT="$API_PORT"
    rm -rf "$KT/deploy" && cp -r "$ROOT/deploy" "$KT/deploy"
    sed -i "s|TERN_CLUSTER_CIDRS: .*|TERN_CLUSTER_CIDRS: \"$CLUSTER_CIDRS,$SERVICE_CIDRS\"|" "$KT/deploy/configmap.yaml"
    if [ "$NODE_ROUTES" = vxlan ]; then
        # deploy/README.md's steps for nodes on different subnets: the flag, the pods' MTU the
        # VXLAN device's (1500 - 50 over the IPv4 underlay), deploy/vxlan's RBAC
        sed -i 's|^\( *\)- --node-routes$|\1- --node-routes=vxlan|' "$KT/deploy/daemonset.yaml"
        sed -i 's|"mtu": 1500,|"mtu": 1450,|' "$KT/deploy/configmap.yaml"
        grep -q -- '--node-routes=vxlan' "$KT/deploy/daemonset.yaml"
        grep -q '"mtu": 1450,' "$KT/deploy/configmap.yaml"
        kubectl apply -f "$KT/deploy/vxlan/"
    fi
    # TERN_CLUSTER_CNP=1: ClusterNetworkPolicy on as deploy/README.md says (tests/conformance/cnp.sh)
    if [ "${TERN_CLUSTER_CNP:-0}" = 1 ]; then cnp_deploy "$KT/deploy" && cnp_install; fi
    kubectl apply -f "$KT/deploy/"
    kubectl -n tern rollout status daemonset/tern-agent --timeout=180s
    wait_for 60 "deploy/'s conflist (tern, tern-tuning, portmap, bandwidth)" bash -c "jq -e '[.plugins[].type] == [\"tern\",\"tern-tuning\",\"portmap\",\"bandwidth\"]' $CNI_NET/10-tern.conflist"
    wait_for 120 "node Ready" bash -c "[ \"\$($K8S_BIN/kubectl --kubeconfig $KT/pki/admin.kubeconfig get node $NODE -o jsonpath='{.status.conditions[?(@.type==\"Ready\")].status}')\" = True ]"
}

# coredns_up: kubeadm's CoreDNS manifests (k8s.io/kubernetes@v1.34.4
# cmd/kubeadm/app/phases/addons/dns/manifests.go), one replica, Corefile without forward/loop.
coredns_up() {
    kubectl apply -f - <<YAML
apiVersion: v1
kind: ServiceAccount
metadata: {name: coredns, namespace: kube-system}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: "system:coredns"}
rules:
- apiGroups: [""]
  resources: [endpoints, services, pods, namespaces]
  verbs: [list, watch]
- apiGroups: [discovery.k8s.io]
  resources: [endpointslices]
  verbs: [list, watch]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: "system:coredns"}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: "system:coredns"}
subjects: [{kind: ServiceAccount, name: coredns, namespace: kube-system}]
---
apiVersion: v1
kind: ConfigMap
metadata: {name: coredns, namespace: kube-system}
data:
  Corefile: |
    .:53 {
        errors
        health {
           lameduck 5s
        }
        ready
        kubernetes cluster.local in-addr.arpa ip6.arpa {
           pods insecure
           fallthrough in-addr.arpa ip6.arpa
           ttl 30
        }
        prometheus :9153
        cache 30
        reload
        loadbalance
    }
---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: coredns
  namespace: kube-system
  labels: {k8s-app: kube-dns}
spec:
  replicas: 1
  selector: {matchLabels: {k8s-app: kube-dns}}
  template:
    metadata: {labels: {k8s-app: kube-dns}}
    spec:
      priorityClassName: system-cluster-critical
      serviceAccountName: coredns
      tolerations: [{key: CriticalAddonsOnly, operator: Exists}, {key: node-role.kubernetes.io/control-plane, effect: NoSchedule}]
      containers:
      - name: coredns
        image: $COREDNS_IMAGE
        imagePullPolicy: IfNotPresent
        args: ["-conf", "/etc/coredns/Corefile"]
        resources:
          limits: {memory: 170Mi}
          requests: {cpu: 100m, memory: 70Mi}
        volumeMounts: [{name: config-volume, mountPath: /etc/coredns, readOnly: true}]
        ports:
        - {containerPort: 53, name: dns, protocol: UDP}
        - {containerPort: 53, name: dns-tcp, protocol: TCP}
        - {containerPort: 9153, name: metrics, protocol: TCP}
        livenessProbe:
          httpGet: {path: /health, port: 8080, scheme: HTTP}
          initialDelaySeconds: 60
          timeoutSeconds: 5
          failureThreshold: 5
        readinessProbe:
          httpGet: {path: /ready, port: 8181, scheme: HTTP}
        securityContext:
          allowPrivilegeEscalation: false
          capabilities: {add: [NET_BIND_SERVICE], drop: [ALL]}
          readOnlyRootFilesystem: true
      dnsPolicy: Default
      volumes:
      - name: config-volume
        configMap:
          name: coredns
          items: [{key: Corefile, path: Corefile}]
---
apiVersion: v1
kind: Service
metadata:
  name: kube-dns
  namespace: kube-system
  labels: {k8s-app: kube-dns, kubernetes.io/cluster-service: "true", kubernetes.io/name: CoreDNS}
  annotations: {prometheus.io/port: "9153", prometheus.io/scrape: "true"}
spec:
  clusterIP: $KUBE_DNS_IP
  selector: {k8s-app: kube-dns}
  ports:
  - {name: dns, port: 53, protocol: UDP, targetPort: 53}
  - {name: dns-tcp, port: 53, protocol: TCP, targetPort: 53}
  - {name: metrics, port: 9153, protocol: TCP, targetPort: 9153}
YAML
    kubectl -n kube-system rollout status deployment/coredns --timeout=180s
}

# conformance_up: the whole tier, in dependency order (the node's address before the API server
# that binds it; kube-proxy before tern's agent, which reaches the API server at its real address
# anyway, and before CoreDNS, which reaches it through the `kubernetes` Service).
conformance_up() {
    make_pki
    node_address
    start_etcd
    start_apiserver
    start_controller_manager
    start_scheduler
    start_runtime
    import_images
    conformance_images
    if [ "${TERN_CLUSTER_CNP:-0}" = 1 ]; then cnp_images; fi
    guard_up
    if [ "$TWO_NODES" = 1 ]; then node2_guard_rules; fi
    start_kubelet
    wait_for 120 "node $NODE registered" kubectl get node "$NODE"
    wait_for_pod_cidrs
    start_kube_proxy
    # TERN_CLUSTER_NODES=2: node 2 (tests/cluster/node2.sh) with its own kube-proxy, the images
    # through the local registry
    if [ "$TWO_NODES" = 1 ]; then node2_up; fi
    install_tern
    coredns_up
}

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
# pod, so every path is tried, not the one kube-proxy happens to pick. Run it in a subshell, as
# scripts/conformance does: its EXIT trap removes its pods and Services however it ends.
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
# Service again. Run it in a subshell: its EXIT trap removes what it made however it ends.
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
