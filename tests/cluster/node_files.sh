# shellcheck shell=bash
# tests/cluster/node_files.sh — what every node of the tier is given (node_files N: its CNI dirs,
# its containerd's and its kubelet's configuration, the kubelet's command), node 1's runtime
# (containerd 2, or CRI-O through crio.sh) and its images. Sourced by tests/cluster/lib.sh.

# node_files N: node N's files, written into its filesystem. The paths differ by node, the
# contents do not: node 1 keeps its runtime's and kubelet's state under $KT, the containers in
# their own /var/lib and /run; node 1 mirrors only the critest case's registry, the containers
# every registry to the tier's (container.sh container_registry); each kubelet on its own address.
node_files() {
    local n=$1 fs=${N_FS[$1]} e=${N_ETC[$1]} p c=kubelet$1 extra=''
    local ctrd=/var/lib/containerd state=/run/containerd mirror=_default registry=$NODE2_REGISTRY
    local root=/var/lib/kubelet port=10250 healthz=10248 cgroup=/kubelet
    if [ "$n" = 1 ]; then
        c=kubelet ctrd=$KT/containerd/root state=$KT/containerd/state mirror=$CRITEST_REGISTRY
        registry=$CRITEST_REGISTRY extra="netns_mounts_under_state_dir = true"
        root=$KT/kubelet/root port=$KUBELET_PORT healthz=10348 cgroup=$CGROUP_ROOT
    fi
    mkdir -p "$fs$e/certs.d/$mirror" "$fs$CNI_BIN" "$fs$CNI_NET" "$fs$root"
    # what a node's `kubernetes-cni` package brings: the reference loopback (for the runtime) and
    # host-local (the conflist's IPAM); tern-agent adds tern's
    for p in loopback host-local; do
        [ -e "$fs$CNI_BIN/$p" ] || { cp "/usr/lib/cni/$p" "$fs$CNI_BIN/$p" && echo "$fs$CNI_BIN/$p" >>"$KT/created"; }
    done
    cat >"$fs$e/certs.d/$mirror/hosts.toml" <<TOML
server = "http://$registry"
[host."http://$registry"]
  capabilities = ["pull", "resolve"]
TOML
    containerd_config "$ctrd" "$state" "${N_SOCK[$n]}" "$e/certs.d" "$extra" >"$fs$e/containerd.toml"
    # no swap check, cgroup v1 allowed, no eviction or image GC, no local-storage isolation, short
    # sync periods
    cat >"$fs$e/kubelet.yaml" <<YAML
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: ${N_IP[$n]}
port: $port
healthzBindAddress: 127.0.0.1
healthzPort: $healthz
readOnlyPort: 0
cgroupDriver: cgroupfs
cgroupRoot: $cgroup
containerRuntimeEndpoint: unix://${N_SOCK[$n]}
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: false}
  x509: {clientCAFile: $KT/pki/ca.crt}
authorization: {mode: AlwaysAllow}
tlsCertFile: $KT/pki/$c-serving.crt
tlsPrivateKeyFile: $KT/pki/$c-serving.key
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
    [ -z "$CLUSTER_DNS" ] || printf 'clusterDNS: [%s]\nclusterDomain: cluster.local\n' "$CLUSTER_DNS" >>"$fs$e/kubelet.yaml"
    # the kubelet's command, on its own so that a case can restart it (kubelet_start)
    cat >"$fs$e/kubelet" <<SH
#!/bin/sh
exec $K8S_BIN/kubelet --config $e/kubelet.yaml --kubeconfig $KT/pki/$c.kubeconfig --root-dir $root \\
    --hostname-override ${N_NAME[$n]} --node-ip \${TERN_NODE_IPS:-$(node_ips "$n")} --v=1
SH
    chmod 0755 "$fs$e/kubelet"
}

# containerd_config ROOT STATE SOCKET CERTS_DIR [RUNTIME_LINE]: a node's containerd 2
# configuration (version 3) on stdout: the CRI with the tier's pause image pinned, registries from
# CERTS_DIR, runc with cgroupfs, the node's CNI dirs, the streaming server on loopback;
# RUNTIME_LINE is one more line of the CRI runtime's section.
containerd_config() {
    local extra=""
    [ -z "${5:-}" ] || extra="  $5"$'\n'
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
    bin_dirs = ["$CNI_BIN"]
    conf_dir = "$CNI_NET"
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

# start_runtime: node 1's runtime, containerd with node_files' configuration or CRI-O.
start_runtime() {
    if [ "$RUNTIME" = crio ]; then
        start_crio
    else
        PATH="$GOBIN_DIR/containerd:$PATH" start containerd "$GOBIN_DIR/containerd/containerd" \
            --config "${N_ETC[1]}/containerd.toml" --log-level warn
    fi
}

# xtask ARGS...: the repository's dev tool (tools/xtask: `image` builds the OCI archives), from the
# release build the tier runs (TERN_BIN_DIR).
xtask() { "${TERN_BIN_DIR:-$ROOT/target/$(uname -m)-unknown-linux-musl/release}/tern-xtask" "$@"; }

# import_image ARCHIVE NAME: an OCI archive (xtask image) into node 1's image store.
import_image() {
    if [ "$RUNTIME" = crio ]; then crio_import "$1" "$2" >&2; else ctr -n k8s.io images import "$1" >&2; fi
}

import_images() {
    local img="$KT/images"
    mkdir -p "$img"
    xtask image --busybox --name "$PAUSE_IMAGE" --out "$img/pause.oci.tar" >&2
    xtask image --name "$TERN_IMAGE" --out "$img/tern.oci.tar" >&2
    import_image "$img/pause.oci.tar" "$PAUSE_IMAGE"
    import_image "$img/tern.oci.tar" "$TERN_IMAGE"
}
