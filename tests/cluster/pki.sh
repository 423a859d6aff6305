# tests/cluster/pki.sh — the real-cluster tier's PKI: a CA, the components' certificates and
# kubeconfigs, the service-account signing key, all under $KT/pki.
#
# Sourced by tests/cluster/lib.sh; uses its KT, API and NODE_IP when called. Each node's kubelet
# certificates are nodes.sh's node_pki.

# --- PKI ---------------------------------------------------------------------------------------

# cert NAME CN ORG [SAN]: a key and a certificate signed by the cluster CA.
cert() {
    local name=$1 cn=$2 org=$3 san=${4:-} d="$KT/pki"
    local subj="/CN=$cn"
    [ -n "$org" ] && subj="/O=$org/CN=$cn"
    openssl req -new -newkey rsa:2048 -nodes -keyout "$d/$name.key" -subj "$subj" \
        -out "$d/$name.csr" 2>/dev/null
    local ext="$d/$name.ext"
    {
        echo "basicConstraints=CA:FALSE"
        echo "keyUsage=critical,digitalSignature,keyEncipherment"
        if [ -n "$san" ]; then
            echo "extendedKeyUsage=serverAuth,clientAuth"
            echo "subjectAltName=$san"
        else
            echo "extendedKeyUsage=clientAuth"
        fi
    } >"$ext"
    openssl x509 -req -in "$d/$name.csr" -CA "$d/ca.crt" -CAkey "$d/ca.key" -CAcreateserial \
        -days 2 -extfile "$ext" -out "$d/$name.crt" 2>/dev/null
}

# kubeconfig NAME: a kubeconfig for the client certificate NAME.
kubeconfig() {
    local name=$1 d="$KT/pki"
    cat >"$d/$name.kubeconfig" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: tern-test
  cluster:
    server: $API
    certificate-authority: $d/ca.crt
users:
- name: $name
  user:
    client-certificate: $d/$name.crt
    client-key: $d/$name.key
contexts:
- name: default
  context: {cluster: tern-test, user: $name}
current-context: default
EOF
}

# sa_key NAME: a service-account signing key pair (NAME.key, NAME.pub).
sa_key() {
    openssl genrsa -out "$KT/pki/$1.key" 2048 2>/dev/null
    openssl rsa -in "$KT/pki/$1.key" -pubout -out "$KT/pki/$1.pub" 2>/dev/null
}

make_pki() {
    local d="$KT/pki"
    mkdir -p "$d"
    openssl req -x509 -newkey rsa:2048 -nodes -keyout "$d/ca.key" -out "$d/ca.crt" -days 2 \
        -subj "/CN=tern-test-ca" 2>/dev/null
    cert apiserver kube-apiserver "" \
        "IP:127.0.0.1,IP:$NODE_IP,IP:10.99.220.1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local"
    cert admin admin system:masters
    cert apiserver-kubelet-client kube-apiserver-kubelet-client system:masters
    cert controller-manager system:kube-controller-manager ""
    cert scheduler system:kube-scheduler ""
    # kube-proxy's own identity: bound to system:node-proxier by the default RBAC
    cert kube-proxy system:kube-proxy ""
    for n in admin controller-manager scheduler kube-proxy; do kubeconfig "$n"; done
    sa_key sa
}
