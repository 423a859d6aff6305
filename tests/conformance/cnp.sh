# tests/conformance/cnp.sh — ClusterNetworkPolicy on the conformance tier (tests/conformance/lib.sh):
# with TERN_CLUSTER_CNP=1, install_tern applies deploy/cluster-network-policy/ (the CRD of
# sigs.k8s.io/network-policy-api v0.3.0, channel TERN_CNP_CHANNEL: experimental by default,
# standard otherwise, and its RBAC) and turns on --cluster-network-policy in deploy/'s DaemonSet,
# as deploy/README.md tells an operator to (TERN_CNP_FLAG=0: the CRD without the flag, a cluster
# that enforces no ClusterNetworkPolicy, to see what the suite says of one); conformance_images adds the image the module's
# conformance suite runs (cnp_images). scripts/conformance cnp sets TERN_CLUSTER_CNP=1; so may
# `TERN_CLUSTER_CNP=1 bash scripts/conformance netpol` (the Netpol specs with the flag on).
#
# Sourced by tests/conformance/lib.sh (uses ROOT, KT, log, kubectl, import_image, agnhost_archive).

CNP_CHANNEL="${TERN_CNP_CHANNEL:-experimental}"
# The suite's pods (conformance/base/manifests.yaml of the module) name agnhost 2.45
CNP_AGNHOST_IMAGE=registry.k8s.io/e2e-test-images/agnhost:2.45

# cnp_agnhost_archive: prints the path of the agnhost:2.45 archive, building it when the agnhost
# archive (images.sh) changed: that image's files with one difference, /agnhost a wrapper of the
# binary (/agnhost.bin). This kernel has no SCTP (CONFIG_IP_SCTP is not set: socket(AF_INET,
# SOCK_STREAM, IPPROTO_SCTP) fails with EPROTONOSUPPORT), so `agnhost porter` serving only SCTP
# ports exits at once (log.Fatal "Failed to listen SCTP") and the suite's StatefulSets, each with
# two such containers, would never be Ready: every test would fail at setup. The wrapper keeps
# such a porter's container running, saying why, when the kernel has no SCTP; the SCTP tests then
# find nothing listening (README, "ClusterNetworkPolicy conformance").
cnp_agnhost_archive() {
    local base out work blob manifest layer
    base=$(agnhost_archive) || return 1
    out="$IMAGE_CACHE/agnhost-2.45-$(basename "$base" .oci.tar | cut -d- -f2).oci.tar"
    if [ ! -f "$out" ]; then
        rm -f "$IMAGE_CACHE"/agnhost-2.45-*.oci.tar
        work=$(mktemp -d)
        mkdir -p "$work/oci" "$work/rootfs"
        tar -xf "$base" -C "$work/oci"
        blob() { echo "$work/oci/blobs/${1%%:*}/${1#*:}"; }
        manifest=$(jq -er '.manifests[0].digest' "$work/oci/index.json")
        layer=$(jq -er '.layers | if length == 1 then .[0].digest else error("not one layer") end' "$(blob "$manifest")")
        tar -xf "$(blob "$layer")" -C "$work/rootfs"
        mv "$work/rootfs/agnhost" "$work/rootfs/agnhost.bin"
        cat >"$work/rootfs/agnhost" <<'SH'
#!/bin/bash
# tern's conformance image (tests/conformance/cnp.sh): agnhost, except that a porter serving only
# SCTP ports keeps running when the kernel has no SCTP (it would exit, and its pod never be Ready).
if [ "${1:-}" = porter ] && [ ! -d /proc/net/sctp ] && ! env | grep -q '^SERVE_\(PORT\|TLS_PORT\)_'; then
    echo "agnhost porter: this kernel has no SCTP (no /proc/net/sctp): not serving $(env | grep -o '^SERVE_SCTP_PORT_[0-9]*' | tr '\n' ' ')" >&2
    exec sleep infinity
fi
exec /agnhost.bin "$@"
SH
        chmod 0755 "$work/rootfs/agnhost"
        ln -sf agnhost.bin "$work/rootfs/agnhost-2"
        xtask image --rootfs "$work/rootfs" --entrypoint '["/agnhost"]' --cmd '["pause"]' \
            --name "$CNP_AGNHOST_IMAGE" --out "$out.tmp" >&2 || { rm -rf "$work"; return 1; }
        rm -rf "$work"
        mv "$out.tmp" "$out"
    fi
    echo "$out"
}

# cnp_images: the suite's image in the node's store (before container_nodes_up, which pushes node 1's
# images to node 2 through the local registry).
cnp_images() {
    local a
    a=$(cnp_agnhost_archive) || return 1
    import_image "$a" "$CNP_AGNHOST_IMAGE"
}

# cnp_deploy DIR: deploy/ copied to DIR made to run ClusterNetworkPolicy as deploy/README.md says:
# --cluster-network-policy=true after --network-policy=true, the CRD of CNP_CHANNEL in place of the
# rendered (standard) one.
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

# cnp_install: the CRD and the RBAC before the agent starts (its watch lists them at once).
cnp_install() {
    kubectl apply --server-side -f "$KT/deploy/cluster-network-policy/"
    kubectl wait --for condition=established --timeout=60s crd/clusternetworkpolicies.policy.networking.k8s.io
}

# cnp_baseline_deny: with TERN_CNP_BASELINE_DENY=1 (and TERN_CLUSTER_CNP=1), a Baseline
# ClusterNetworkPolicy that denies every pod outside kube-system (the cluster's DNS) all ingress
# from pods and all egress to pods and to any address, applied after the smoke check and before the
# specs (scripts/conformance): what the Netpol specs say of a cluster whose default is deny
# (README, "ClusterNetworkPolicy conformance"). Waits until a pod of a fresh namespace cannot reach
# another, so the specs start under it.
cnp_baseline_deny() {
    kubectl apply -f - <<'YAML'
apiVersion: policy.networking.k8s.io/v1alpha2
kind: ClusterNetworkPolicy
metadata: {name: tern-conformance-baseline-deny}
spec:
  tier: Baseline
  priority: 1000
  subject:
    namespaces:
      matchExpressions: [{key: kubernetes.io/metadata.name, operator: NotIn, values: [kube-system]}]
  ingress:
  - {name: deny-all-from-pods, action: Deny, from: [{namespaces: {}}]}
  egress:
  - {name: deny-all, action: Deny, to: [{namespaces: {}}, {networks: [0.0.0.0/0, "::/0"]}]}
YAML
    local ns=tern-baseline-check ip
    kubectl create namespace "$ns"
    kubectl -n "$ns" run server --image="$AGNHOST_IMAGE" --restart=Never -- netexec --http-port=80
    kubectl -n "$ns" run client --image="$AGNHOST_IMAGE" --restart=Never -- pause
    kubectl -n "$ns" wait --for=condition=Ready pod/server pod/client --timeout=120s
    ip=$(kubectl -n "$ns" get pod server -o jsonpath='{.status.podIP}')
    wait_for 30 "the Baseline deny in force (client cannot reach server)" bash -c \
        "! $K8S_BIN/kubectl --kubeconfig $KT/pki/admin.kubeconfig -n $ns exec client -- /agnhost connect --timeout=2s $ip:80"
    kubectl delete namespace "$ns" --wait=false
}
