# shellcheck shell=bash disable=SC2153
# (SC2153: the variables are node2.sh's and lib.sh's)
# tests/cluster/node2_files.sh — what node 2 is given: its PKI, the local registry it pulls node 1's
# images from, its root filesystem's configuration (containerd, the kubelet, PID 1). Sourced by
# tests/cluster/node2.sh.


# node2_pki: node 2's kubelet client certificate and kubeconfig, and its serving certificate.
node2_pki() {
    cert kubelet2 "system:node:$NODE2" system:nodes
    cert kubelet2-serving "system:node:$NODE2" system:nodes "IP:$NODE2_IP,IP:$NODE2_IP_NEXT,${NODE2_IP6:+IP:$NODE2_IP6,}IP:127.0.0.1,DNS:$NODE2"
    kubeconfig kubelet2
}

# node2_registry: the local registry on node 1's address, with node 1's images pushed from its
# containerd, under their paths without the registry host (containerd asks a mirror for
# /v2/<path>/manifests/<tag>?ns=<registry>).
node2_registry() {
    local r="$KT/registry" img
    mkdir -p "$r/data"
    cat >"$r/config.yml" <<YAML
version: 0.1
log:
  level: warn
storage:
  filesystem:
    rootdirectory: $r/data
http:
  addr: $NODE2_REGISTRY
YAML
    start registry "$GOBIN_DIR/registry/registry" serve "$r/config.yml"
    wait_for 30 "the local registry at $NODE2_REGISTRY" curl -sf "http://$NODE2_REGISTRY/v2/"
    # every named image of node 1's (the tier's and, in conformance mode, the e2e ones), under its
    # path without the registry host: localhost/tern-pause:test -> tern-pause:test,
    # ghcr.io/tern-cni/tern:0.1.0 -> tern-cni/tern:0.1.0
    for img in $(ctr -n k8s.io images ls -q); do
        case "$img" in *@*|sha256:*) continue ;; esac
        ctr -n k8s.io images push --plain-http "$NODE2_REGISTRY/${img#*/}" "$img" >&2
    done
}

# node2_files DIR: node 2's configuration in its root filesystem DIR: containerd's (registry
# mirror), the kubelet's, and PID 1.
node2_files() {
    local fs=$1 e=/etc/tern-node2
    mkdir -p "$fs$e/certs.d/_default" "$fs/opt/cni/bin" "$fs/etc/cni/net.d" "$fs/var/log/tern-node2"
    # what a node's kubernetes-cni package brings (as on node 1)
    cp /usr/lib/cni/loopback /usr/lib/cni/host-local "$fs/opt/cni/bin/"
    cat >"$fs$e/certs.d/_default/hosts.toml" <<TOML
# every registry (ghcr.io, localhost, registry.k8s.io) from the tier's local one, never upstream
server = "http://$NODE2_REGISTRY"
[host."http://$NODE2_REGISTRY"]
  capabilities = ["pull", "resolve"]
TOML
    containerd_config /var/lib/containerd /run/containerd /run/containerd/containerd.sock "$e/certs.d" \
        /opt/cni/bin /etc/cni/net.d >"$fs$e/containerd.toml"
    cat >"$fs$e/kubelet.yaml" <<YAML
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: $NODE2_IP
port: 10250
healthzBindAddress: 127.0.0.1
healthzPort: 10248
readOnlyPort: 0
cgroupDriver: cgroupfs
cgroupRoot: /kubelet
containerRuntimeEndpoint: unix:///run/containerd/containerd.sock
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: false}
  x509: {clientCAFile: $KT/pki/ca.crt}
authorization: {mode: AlwaysAllow}
tlsCertFile: $KT/pki/kubelet2-serving.crt
tlsPrivateKeyFile: $KT/pki/kubelet2-serving.key
YAML
    kubelet_config_common >>"$fs$e/kubelet.yaml"
    [ -z "$CLUSTER_DNS" ] || printf 'clusterDNS: [%s]\nclusterDomain: cluster.local\n' "$CLUSTER_DNS" >>"$fs$e/kubelet.yaml"
    # kube-proxy when node 1 runs one (tests/conformance/lib.sh start_kube_proxy): the same
    # configuration for node 2, in its netns (healthz and metrics on its own loopback)
    if [ -f "$KT/kube-proxy/config.yaml" ]; then
        sed -e "s|^hostnameOverride: .*|hostnameOverride: $NODE2|" \
            -e "s|^nodePortAddresses: .*|nodePortAddresses: [\"$NODE2_IP/32\"${NODE2_IP6:+, \"$NODE2_IP6/128\"}]|" \
            "$KT/kube-proxy/config.yaml" >"$fs$e/kube-proxy.yaml"
    fi
    # the kubelet, on its own so that a check can restart it (node2_restart_kubelet)
    cat >"$fs/usr/local/sbin/tern-node2-kubelet" <<KUBELET
#!/bin/sh
exec $K8S_BIN/kubelet --config $e/kubelet.yaml --kubeconfig $KT/pki/kubelet2.kubeconfig \\
    --root-dir /var/lib/kubelet --hostname-override $NODE2 --node-ip \${NODE2_IPS:-$NODE2_IPS} --v=1 >>/var/log/tern-node2/kubelet.log 2>&1
KUBELET
    chmod 0755 "$fs/usr/local/sbin/tern-node2-kubelet"
    # PID 1: the variables are expanded here, the rest in node 2
    cat >"$fs/usr/local/sbin/tern-node2-init" <<INIT
#!/bin/bash
# node 2's PID 1 (written by tests/cluster/node2.sh): waits for its address (the host moves the
# veth in after the start), then runs containerd and the kubelet until one of them exits.
set -u
log=/var/log/tern-node2
# mounts made under the kubelet's root (projected tokens) must be seen by the runtime's mounts
mount --make-rshared /
# the kubelet's cgroupRoot /kubelet in every v1 hierarchy, cpuset's cpus and mems copied from the
# parent (a new cpuset cgroup starts empty)
for h in /sys/fs/cgroup/*/; do
    [ -f "\$h/cgroup.procs" ] || continue
    mkdir -p "\$h/kubelet"
    if [ -f "\$h/cpuset.cpus" ]; then
        cat "\$h/cpuset.cpus" >"\$h/kubelet/cpuset.cpus"
        cat "\$h/cpuset.mems" >"\$h/kubelet/cpuset.mems"
    fi
done
sysctl -qw net.ipv4.ip_forward=1
for _ in \$(seq 1 240); do
    ip -o addr show dev eth0 2>/dev/null | grep -q " $NODE2_IP/" && break
    sleep 0.25
done
export PATH="$GOBIN_DIR/containerd:\$PATH"
containerd --config $e/containerd.toml --log-level warn >>\$log/containerd.log 2>&1 &
echo \$! >/run/containerd.pid
for _ in \$(seq 1 120); do [ -S /run/containerd/containerd.sock ] && break; sleep 0.25; done
/usr/local/sbin/tern-node2-kubelet &
echo \$! >/run/kubelet.pid
if [ -f $e/kube-proxy.yaml ]; then
    $GOBIN_DIR/e2e/kube-proxy --config $e/kube-proxy.yaml --v=1 >>\$log/kube-proxy.log 2>&1 &
fi
trap 'kill \$(cat /run/kubelet.pid /run/containerd.pid) 2>/dev/null; exit 0' TERM INT
# a component that exits ends node 2, but for the kubelet stopped by node2_down (/run/draining):
# containerd stays for the pods' teardown through the CRI
while :; do
    wait -n
    [ -e /run/draining ] && kill -0 "\$(cat /run/containerd.pid)" 2>/dev/null || break
done
echo "tern-node2-init: a component exited" >>\$log/init.log
INIT
    chmod 0755 "$fs/usr/local/sbin/tern-node2-init"
}
