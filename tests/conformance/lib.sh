# tests/conformance/lib.sh — the real-cluster tier (tests/cluster/lib.sh) as operators run a
# cluster, for Kubernetes' own e2e networking specs (scripts/conformance):
# - the API server binds and advertises the node's address (10.99.219.1) with the lease endpoint
#   reconciler (TERN_CLUSTER_API_ADDR, set by the conformance harness before lib.sh is sourced);
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
# - TERN_CLUSTER_CNP=1: ClusterNetworkPolicy on as deploy/README.md says (install_tern, cnp_deploy).
#
# Sourced by tests/cluster/node.sh after tests/cluster/lib.sh (`node.sh up conformance` runs
# conformance_up for the harness tests/cluster/tests/conformance, which made the images and runs
# the checks around the specs).

E2E_BIN="$GOBIN_DIR/e2e"
CNP_CHANNEL="${TERN_CNP_CHANNEL:-experimental}"

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
# nodes on two subnets, container.sh) deploy/README.md's VXLAN steps on top.
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
    # TERN_CLUSTER_CNP=1: ClusterNetworkPolicy on as deploy/README.md says; the CRD and its RBAC
    # before the agent starts (its watch lists them at once)
    if [ "${TERN_CLUSTER_CNP:-0}" = 1 ]; then
        cnp_deploy "$KT/deploy"
        kubectl apply --server-side -f "$KT/deploy/cluster-network-policy/"
        kubectl wait --for condition=established --timeout=60s crd/clusternetworkpolicies.policy.networking.k8s.io
    fi
    kubectl apply -f "$KT/deploy/"
    kubectl -n tern rollout status daemonset/tern-agent --timeout=180s
    wait_for 60 "deploy/'s conflist (tern, tern-tuning, portmap, bandwidth)" bash -c "jq -e '[.plugins[].type] == [\"tern\",\"tern-tuning\",\"portmap\",\"bandwidth\"]' $CNI_NET/10-tern.conflist"
    wait_for 120 "node Ready" bash -c "[ \"\$($K8S_BIN/kubectl --kubeconfig $KT/pki/admin.kubeconfig get node $NODE -o jsonpath='{.status.conditions[?(@.type==\"Ready\")].status}')\" = True ]"
}

# cnp_deploy DIR: deploy/ copied to DIR made to run ClusterNetworkPolicy as deploy/README.md says:
# --cluster-network-policy=true after --network-policy=true (TERN_CNP_FLAG=0: the CRD without the
# flag, a cluster that enforces none), the CRD of sigs.k8s.io/network-policy-api v0.3.0's channel
# TERN_CNP_CHANNEL (experimental by default) in place of the rendered (standard) one.
cnp_deploy() {
    local d=$1
    if [ "${TERN_CNP_FLAG:-1}" = 1 ]; then
        sed -i 's|^\( *\)- --network-policy=true$|&\n\1- --cluster-network-policy=true|' "$d/daemonset.yaml"
        grep -q -e '- --cluster-network-policy=true$' "$d/daemonset.yaml"
    fi
    if [ "$CNP_CHANNEL" != standard ]; then
        "${TERN_HELM:-${TERN_GO_CACHE:-/var/cache/tern-build}/bin/helm/helm}" template tern "$ROOT/deploy/helm/tern" \
            --namespace tern --set clusterNetworkPolicy.enabled=true --set clusterNetworkPolicy.channel="$CNP_CHANNEL" \
            --show-only templates/cluster-network-policy-crd.yaml >"$d/cluster-network-policy/crd.yaml"
    fi
    grep -q "policy.networking.k8s.io/channel: $CNP_CHANNEL\$" "$d/cluster-network-policy/crd.yaml"
}

# coredns_up: CoreDNS as kubeadm deploys it (tests/conformance/coredns.yaml).
coredns_up() {
    kubectl apply -f "$ROOT/tests/conformance/coredns.yaml"
    kubectl -n kube-system rollout status deployment/coredns --timeout=180s
}

# conformance_images: the images the harness made (tests/cluster/tests/conformance/images.rs)
# into the node's store, from its list $TERN_CONFORMANCE_IMAGES: `ARCHIVE NAME [ALIAS ...]` a line,
# each alias a second name of the image in the store.
conformance_images() {
    local image alias
    while read -r -a image; do
        import_image "${image[0]}" "${image[1]}"
        for alias in "${image[@]:2}"; do
            if [ "$RUNTIME" = crio ]; then crio_podman tag "${image[1]}" "$alias" >&2; else ctr -n k8s.io images tag --force "${image[1]}" "$alias" >&2; fi
        done
    done <"$TERN_CONFORMANCE_IMAGES"
}

# conformance_up: the whole tier, in dependency order (kube-proxy before tern's agent, which
# reaches the API server at its real address anyway, and before CoreDNS, which reaches it through
# the `kubernetes` Service).
conformance_up() {
    control_plane_up
    node_runtime_up 1
    import_images
    conformance_images
    node_kubelet_up 1
    start_kube_proxy
    # TERN_CLUSTER_NODES=2: node 2 (tests/cluster/container.sh) with its own kube-proxy, the
    # images through the local registry
    container_nodes_up
    install_tern
    coredns_up
}
