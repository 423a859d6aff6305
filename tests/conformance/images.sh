# tests/conformance/images.sh — the images Kubernetes' e2e networking specs run, made here under
# their exact upstream names (no registry is reachable) and imported into the node's runtime (containerd,
# or CRI-O's storage when TERN_CLUSTER_RUNTIME=crio).
#
# Sourced by tests/conformance/lib.sh (after tests/cluster/lib.sh: uses its ROOT, KT, GOBIN_DIR,
# log and import_image).
#
# How they are made:
# - agnhost:2.56 is a Debian 12 (bookworm) minbase root filesystem made by mmdebstrap from Debian's
#   archive, with the tools the specs exec inside it (curl, OpenBSD nc, dig, getent, ss, seq, sh,
#   bash, ping, iperf; wget, which upstream's Alpine has from busybox, for "Services should be able
#   to up and down services"; conntrack, for the distroless-iptables tag below), plus what upstream's Dockerfile adds at / (k8s.io/kubernetes@v1.34.4
#   test/images/agnhost/Dockerfile): the static /agnhost built by `scripts/build-go e2e` from the
#   same module, the /agnhost-2 link, porter's /localhost.crt and /localhost.key, /uploads, and
#   /coredns ("DNS should support configurable pod resolv.conf" runs it as a DNS server pod;
#   upstream's is CoreDNS 1.6.2, this one the v1.12.1 `scripts/build-go coredns` builds).
#   Entrypoint ["/agnhost"], cmd ["pause"], as upstream. Upstream is Alpine 3.21 with the same tools.
# - jessie-dnsutils:1.7 and nginx:1.14-4 are the same image under those names: the DNS specs only
#   run `sh -c` with dig and getent in the first, and the EndpointSlice spec only needs pods of the
#   second to run. So is build-image/distroless-iptables:v0.7.14: "KubeProxy should set TCP
#   CLOSE_WAIT timeout" runs `sleep 600` in it and execs `conntrack -L` there.
# - pause:3.10.1 (pause *containers* of "Service endpoints latency") is the tier's busybox image
#   whose entrypoint sleeps (xtask image --busybox); the sandbox image stays the tier's own.
# - busybox:1.37.0-1 ([sig-node] Sysctls: its containers run /bin/sysctl as their command) is that
#   same busybox-static image, tagged: every busybox applet is linked under /bin.
# - regression-issue-74839:1.2 ("Conntrack proxy implementation should not be vulnerable to the
#   invalid conntrack state bug") holds only its static server, built here from the same module
#   (k8s.io/kubernetes/test/images/regression-issue-74839), entrypoint as upstream's Dockerfile.
# - coredns:v1.12.1 holds only /coredns, the static binary `scripts/build-go coredns` builds.
# The agnhost archive is cached under $TERN_GO_CACHE/images, keyed by the package list and the
# agnhost and coredns binaries' build stamps (mmdebstrap takes about 70 s).

AGNHOST_IMAGE=registry.k8s.io/e2e-test-images/agnhost:2.56
DNSUTILS_IMAGE=registry.k8s.io/e2e-test-images/jessie-dnsutils:1.7
NGINX_IMAGE=registry.k8s.io/e2e-test-images/nginx:1.14-4
E2E_PAUSE_IMAGE=registry.k8s.io/pause:3.10.1
COREDNS_IMAGE=registry.k8s.io/coredns/coredns:v1.12.1
BUSYBOX_IMAGE=registry.k8s.io/e2e-test-images/busybox:1.37.0-1
IPTABLES_IMAGE=registry.k8s.io/build-image/distroless-iptables:v0.7.14
BOOM_IMAGE=registry.k8s.io/e2e-test-images/regression-issue-74839:1.2
AGNHOST_PACKAGES=curl,netcat-openbsd,bind9-dnsutils,iproute2,hostname,bash,iputils-ping,procps,iperf,wget,conntrack
IMAGE_CACHE="${TERN_GO_CACHE:-/var/cache/tern-build}/images"

# agnhost_archive: prints the path of the agnhost OCI archive, building it when its inputs changed.
agnhost_archive() {
    local e2e="$GOBIN_DIR/e2e" out key work
    key=$(printf '%s %s %s' "$AGNHOST_PACKAGES" "$(cat "$e2e/.stamp")" "$(cat "$GOBIN_DIR/coredns/.stamp")" | sha256sum | cut -c1-16)
    out="$IMAGE_CACHE/agnhost-$key.oci.tar"
    if [ ! -f "$out" ]; then
        mkdir -p "$IMAGE_CACHE"
        rm -f "$IMAGE_CACHE"/agnhost-*.oci.tar
        work=$(mktemp -d)
        log "agnhost image: mmdebstrap bookworm ($AGNHOST_PACKAGES)"
        mmdebstrap --quiet --variant=minbase --include="$AGNHOST_PACKAGES" \
            --dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-exclude=/usr/share/man/*' \
            --dpkgopt='path-exclude=/usr/share/locale/*' --dpkgopt='path-exclude=/usr/share/info/*' \
            bookworm "$work/rootfs" http://deb.debian.org/debian >&2 || { rm -rf "$work"; return 1; }
        local src
        src=$(cd "$ROOT/tools/go/e2e" && GOMODCACHE="${TERN_GO_CACHE:-/var/cache/tern-build}/gomod" \
            GOFLAGS=-mod=readonly GOTOOLCHAIN=local /usr/local/go/bin/go list -m -f '{{.Dir}}' k8s.io/kubernetes)
        install -m 0755 "$e2e/agnhost" "$work/rootfs/agnhost"
        ln -s agnhost "$work/rootfs/agnhost-2"
        install -m 0644 "$src/test/images/agnhost/porter/localhost.crt" "$work/rootfs/localhost.crt"
        install -m 0644 "$src/test/images/agnhost/porter/localhost.key" "$work/rootfs/localhost.key"
        install -m 0755 "$GOBIN_DIR/coredns/coredns" "$work/rootfs/coredns"
        mkdir -p "$work/rootfs/uploads"
        rm -rf "$work/rootfs/var/cache/apt/archives/"*.deb "$work/rootfs/var/lib/apt/lists/"*
        xtask image --rootfs "$work/rootfs" --entrypoint '["/agnhost"]' --cmd '["pause"]' \
            --name "$AGNHOST_IMAGE" --out "$out.tmp" >&2 || { rm -rf "$work"; return 1; }
        rm -rf "$work"
        mv "$out.tmp" "$out"
    fi
    echo "$out"
}

# tag_image SRC DST: the image SRC in the node's store also named DST.
tag_image() {
    if [ "$RUNTIME" = crio ]; then crio_podman tag "$1" "$2" >&2; else ctr -n k8s.io images tag --force "$1" "$2" >&2; fi
}

# conformance_images: the e2e images and CoreDNS's, imported into the node's store.
conformance_images() {
    local img="$KT/images" a work
    mkdir -p "$img"
    a=$(agnhost_archive)
    import_image "$a" "$AGNHOST_IMAGE"
    for n in "$DNSUTILS_IMAGE" "$NGINX_IMAGE" "$IPTABLES_IMAGE"; do tag_image "$AGNHOST_IMAGE" "$n"; done
    xtask image --busybox --name "$E2E_PAUSE_IMAGE" --out "$img/e2e-pause.oci.tar" >&2
    import_image "$img/e2e-pause.oci.tar" "$E2E_PAUSE_IMAGE"
    tag_image "$E2E_PAUSE_IMAGE" "$BUSYBOX_IMAGE"
    work=$(mktemp -d)
    (cd "$ROOT/tools/go/e2e" && GOMODCACHE="${TERN_GO_CACHE:-/var/cache/tern-build}/gomod" \
        GOCACHE="${TERN_GO_CACHE:-/var/cache/tern-build}/gocache" GOFLAGS="-mod=readonly -buildvcs=false" \
        GOTOOLCHAIN=local CGO_ENABLED=0 /usr/local/go/bin/go build -trimpath -ldflags "-s -w" \
        -o "$work/regression-issue-74839" k8s.io/kubernetes/test/images/regression-issue-74839) >&2
    xtask image --rootfs "$work" --entrypoint '["/regression-issue-74839"]' --name "$BOOM_IMAGE" \
        --out "$img/boom.oci.tar" >&2
    import_image "$img/boom.oci.tar" "$BOOM_IMAGE"
    rm -rf "$work"
    work=$(mktemp -d)
    install -D -m 0755 "$GOBIN_DIR/coredns/coredns" "$work/coredns"
    mkdir -p "$work/etc/coredns" "$work/tmp"
    xtask image --rootfs "$work" --entrypoint '["/coredns"]' --name "$COREDNS_IMAGE" \
        --out "$img/coredns.oci.tar" >&2
    rm -rf "$work"
    import_image "$img/coredns.oci.tar" "$COREDNS_IMAGE"
}
