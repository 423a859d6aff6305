# shellcheck shell=bash
# tests/cluster/node_parts.sh — the node's side of the tier: its CNI dirs and the files tern's
# DaemonSet writes there, the refusal to run over another install, the node's address, the
# container runtime (containerd 2, or CRI-O through crio.sh), the images, the kubelet. Sourced by
# tests/cluster/lib.sh where it stood (its variables are set as it is read).

# --- the node ----------------------------------------------------------------------------------

CNI_BIN=/opt/cni/bin
CNI_NET=/etc/cni/net.d
CGROUP_ROOT=/tern-kube

# The files tern's DaemonSet writes on a node.
node_files() {
    # tern-uninstalling: the uninstall's mark, left when a case stopped while tern was draining
    echo "$CNI_NET/10-tern.conflist" "$CNI_NET/tern-kubeconfig" "$CNI_NET/tern-uninstalling" /run/tern/agent.sock /run/tern/metrics.sock
    for p in tern tern-tuning tern-ipam tern-lookup portmap bandwidth .tern-reference-plugins; do echo "$CNI_BIN/$p"; done
}

# check_node_clean: refuses to run over another tern install on this machine.
check_node_clean() {
    local f
    for f in $CNI_NET/10-tern.conflist $CNI_NET/tern-kubeconfig; do
        if [ -e "$f" ]; then
            log "$f exists: another tern install is on this machine; remove it or run elsewhere"
            return 1
        fi
    done
    mkdir -p "$KT/aside"
    # Another network's conflist (podman's 87-podman-bridge.conflist on these machines) would make
    # the node Ready before tern is installed: set aside for the run, put back by `down`.
    for f in $CNI_NET/*.conf $CNI_NET/*.conflist $CNI_NET/*.json; do
        [ -e "$f" ] && mv "$f" "$KT/aside/"
    done
    ls -d $CNI_BIN/* $CNI_NET/* 2>/dev/null >"$KT/preexisting" || true
    nft list table inet tern_nat >/dev/null 2>&1 && touch "$KT/nat-preexisting"
    nft list table inet tern_netpol >/dev/null 2>&1 && touch "$KT/netpol-preexisting"
    ip link show tern.vxlan >/dev/null 2>&1 && touch "$KT/vxlan-preexisting"
    # tern's ADD turns IPv6 forwarding on for a pod with an IPv6 address (as ptp does): `down` puts
    # the machine's value back
    sysctl -n net.ipv6.conf.all.forwarding >"$KT/ipv6-forwarding" 2>/dev/null || true
    return 0
}

# The node's address: kubelets refuse a loopback node IP, so the node gets one on a veth of its
# own in the root netns (local traffic only; removed by `down`), and in dual stack an IPv6 one
# beside it (NODE_IP6, no duplicate address detection: usable at once).
NODE_IP=10.99.219.1
NODE_IPS="$NODE_IP${NODE_IP6:+,$NODE_IP6}"
NODE_LINK=kt-node0
# A test network of the node (a veth pair) for the fake Nodes of the node-routes case.
NR_LINK=kt-nr0
node_address() {
    # two nodes: node 1's address (a /24) on kt-node0, its peer in the switch netns (host-gw) or
    # the router netns (vxlan) (node2.sh bridge_address)
    if [ "$TWO_NODES" = 1 ]; then
        bridge_address
        return
    fi
    ip link show "$NODE_LINK" >/dev/null 2>&1 || ip link add "$NODE_LINK" type veth peer name "${NODE_LINK%0}1"
    ip addr replace "$NODE_IP/32" dev "$NODE_LINK"
    [ -z "$NODE_IP6" ] || ip addr replace "$NODE_IP6/128" dev "$NODE_LINK" nodad
    ip link set "$NODE_LINK" up
    ip link set "${NODE_LINK%0}1" up
}

# containerd_config ROOT STATE SOCKET CERTS_DIR CNI_BIN_DIR CNI_CONF_DIR [RUNTIME_LINE]: a tier
# node's containerd 2 configuration (version 3) on stdout: the CRI with the tier's pause image
# pinned, registries from CERTS_DIR, runc with cgroupfs, the node's CNI dirs, the streaming
# server on loopback; RUNTIME_LINE is one more line of the CRI runtime's section. Node 1
# (start_containerd) and node 2 (node2.sh) share it.
containerd_config() {
    local extra=""
    [ -z "${7:-}" ] || extra="  $7"$'\n'
    cat <<TOML
version = 3
root = "$1"
state = "$2"
[grpc]
  address = "$3"
[ttrpc]
  address = "$3.ttrpc"
[plugins.'io.containerd.cri.v1.images']
  snapshotter = "overlayfs"
  [plugins.'io.containerd.cri.v1.images'.pinned_images]
    sandbox = "$PAUSE_IMAGE"
  [plugins.'io.containerd.cri.v1.images'.registry]
    config_path = "$4"
[plugins.'io.containerd.cri.v1.runtime']
  enable_selinux = false
  disable_apparmor = true
  restrict_oom_score_adj = true
${extra}  [plugins.'io.containerd.cri.v1.runtime'.cni]
    bin_dirs = ["$5"]
    conf_dir = "$6"
  [plugins.'io.containerd.cri.v1.runtime'.containerd]
    default_runtime_name = "runc"
    [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
        SystemdCgroup = false
        BinaryName = "/usr/sbin/runc"
[plugins.'io.containerd.grpc.v1.cri']
  disable_tcp_service = true
  stream_server_address = "127.0.0.1"
  stream_server_port = "10351"
TOML
}

start_containerd() {
    local c="$KT/containerd"
    mkdir -p "$c" "$CNI_BIN" "$CNI_NET"
    # The node's CNI bin dir holds what a node's `kubernetes-cni` package brings: the reference
    # plugins (loopback for containerd, host-local for the conflist's IPAM); tern-agent adds tern's.
    for p in loopback host-local; do
        [ -e "$CNI_BIN/$p" ] || { cp "/usr/lib/cni/$p" "$CNI_BIN/$p" && echo "$CNI_BIN/$p" >>"$KT/created"; }
    done
    # the critest case's local registry, over plain HTTP
    mkdir -p "$c/certs.d/$CRITEST_REGISTRY"
    cat >"$c/certs.d/$CRITEST_REGISTRY/hosts.toml" <<TOML
server = "http://$CRITEST_REGISTRY"
[host."http://$CRITEST_REGISTRY"]
  capabilities = ["pull", "resolve"]
TOML
    containerd_config "$c/root" "$c/state" "$c/containerd.sock" "$c/certs.d" "$CNI_BIN" "$CNI_NET" \
        "netns_mounts_under_state_dir = true" >"$c/config.toml"
    PATH="$GOBIN_DIR/containerd:$PATH" start containerd "$GOBIN_DIR/containerd/containerd" \
        --config "$c/config.toml" --log-level warn
    wait_for 30 "containerd CRI" crictl version
}

start_runtime() { if [ "$RUNTIME" = crio ]; then start_crio; else start_containerd; fi; }

# import_image ARCHIVE NAME: an OCI archive (scripts/image) into the runtime's image store.
import_image() {
    if [ "$RUNTIME" = crio ]; then crio_import "$1" "$2" >&2; else ctr -n k8s.io images import "$1" >&2; fi
}

import_images() {
    local img="$KT/images"
    mkdir -p "$img"
    bash "$ROOT/scripts/image" --busybox --name "$PAUSE_IMAGE" --out "$img/pause.oci.tar" >&2
    bash "$ROOT/scripts/image" --name "$TERN_IMAGE" --out "$img/tern.oci.tar" >&2
    import_image "$img/pause.oci.tar" "$PAUSE_IMAGE"
    import_image "$img/tern.oci.tar" "$TERN_IMAGE"
}

# kubelet_config_common: the KubeletConfiguration fields every node of the tier shares (no swap
# check, cgroup v1 allowed, no eviction or image GC, no local-storage isolation, short sync
# periods), appended to each node's own (start_kubelet, node2.sh).
kubelet_config_common() {
    cat <<YAML
failSwapOn: false
failCgroupV1: false
resolvConf: /etc/resolv.conf
evictionHard: {}
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
localStorageCapacityIsolation: false
serializeImagePulls: false
syncFrequency: 10s
fileCheckFrequency: 5s
nodeStatusUpdateFrequency: 5s
YAML
}

start_kubelet() {
    local k="$KT/kubelet" d="$KT/pki" h
    mkdir -p "$k/root"
    # the kubelet's cgroupRoot must exist in every v1 hierarchy
    for h in /sys/fs/cgroup/*/; do
        [ -f "$h/cgroup.procs" ] && mkdir -p "$h${CGROUP_ROOT#/}"
    done
    cat >"$k/config.yaml" <<YAML
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: $NODE_IP
port: $KUBELET_PORT
healthzBindAddress: 127.0.0.1
healthzPort: 10348
readOnlyPort: 0
cgroupDriver: cgroupfs
cgroupRoot: $CGROUP_ROOT
containerRuntimeEndpoint: unix://$CRI_SOCK
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: false}
  x509: {clientCAFile: $d/ca.crt}
authorization: {mode: AlwaysAllow}
tlsCertFile: $d/kubelet-serving.crt
tlsPrivateKeyFile: $d/kubelet-serving.key
YAML
    kubelet_config_common >>"$k/config.yaml"
    [ -z "$CLUSTER_DNS" ] || printf 'clusterDNS: [%s]\nclusterDomain: cluster.local\n' "$CLUSTER_DNS" >>"$k/config.yaml"
    start kubelet "$K8S_BIN/kubelet" --config "$k/config.yaml" --kubeconfig "$d/kubelet.kubeconfig" \
        --root-dir "$k/root" --hostname-override "$NODE" --node-ip "$NODE_IPS" --v=1
}

# wait_for_pod_cidrs: until the controller-manager has given the node a podCIDR of each family.
wait_for_pod_cidrs() {
    local want=1
    [ -z "$CLUSTER_CIDR6" ] || want=2
    wait_for 60 "node $NODE podCIDRs ($want)" bash -c "[ \"\$($K8S_BIN/kubectl --kubeconfig $KT/pki/admin.kubeconfig get node $NODE -o jsonpath='{.spec.podCIDRs[*]}' | wc -w)\" = $want ]"
}

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

# node1_control_plane_up, node1_kubelet_up: node 1 up to a registered Node with its podCIDRs, in dependency order (the node's
# address before the API server that binds it); between the two halves the caller adds its images.
# The guard goes on before the kubelet; with two nodes, node 1's rules for the node network too.
node1_control_plane_up() {
    make_pki
    node_address
    start_etcd
    start_apiserver
    start_controller_manager
    start_scheduler
    start_runtime
    import_images
}
node1_kubelet_up() {
    guard_up
    if [ "$TWO_NODES" = 1 ]; then node2_guard_rules; fi
    start_kubelet
    wait_for 120 "node $NODE registered" kubectl get node "$NODE"
    wait_for_pod_cidrs
}
