# tests/cluster/crio.sh — the node's runtime when TERN_CLUSTER_RUNTIME=crio: a private CRI-O 1.34
# (built by scripts/build-go cri-o) in place of containerd, under $KT/crio.
#
# Sourced by tests/cluster/lib.sh. Its crio.conf comes from tests/cri's renderer (CrioConf). Everything CRI-O writes is under $KT/crio (config, storage,
# runroot, socket, namespace pins, runc and conmon state, exits, logs) except the node's CNI dirs,
# which are the real ones deploy/ installs into (/opt/cni/bin, /etc/cni/net.d) and libcni's
# result cache (/var/lib/cni/results: CRI-O has no setting for it). Images go into CRI-O's own
# containers/storage with podman on the same root and graph driver (no registry; CRI-O's image
# service cannot load an archive).

CRIO_BIN="$GOBIN_DIR/cri-o"

# crio_podman ARGS...: podman on CRI-O's storage, in a private mount namespace whose /var/lib and
# /var/tmp are empty tmpfs (containers/image writes its blob-info cache and temp files there).
crio_podman() {
    local c="$KT/crio"
    unshare --mount --propagation private -- sh -c \
        'mount -t tmpfs tern-podman /var/lib && mount -t tmpfs tern-podman /var/tmp && exec podman "$@"' podman \
        --root "$c/storage" --runroot "$c/run" --tmpdir "$c/tmp" --storage-driver overlay \
        --cgroup-manager cgroupfs --events-backend none "$@"
}

# crio_import ARCHIVE NAME: an OCI archive into CRI-O's storage, named NAME.
crio_import() {
    local id
    id=$(crio_podman pull -q "oci-archive:$1")
    crio_podman tag "$id" "$2"
}

start_crio() {
    local c="$KT/crio" d
    for d in storage run ns runc exits attach pods hooks.d cdi tmp conf.d; do mkdir -p "$c/$d"; done
    echo '{"default": [{"type": "insecureAcceptAnything"}]}' >"$c/policy.json"
    : >"$c/registries.conf"
    # tests/cri's renderer (the harness sets TERN_CRIO_CONF to its tern-cluster-crio-conf)
    [ -x "${TERN_CRIO_CONF:-}" ] || { log "TERN_CRIO_CONF: tern-cluster-crio-conf not set (run the cases: cargo test -p tern-cluster --test cluster)"; return 1; }
    # runc behind tern-cluster-runc-clamp (beside the renderer): containerd's oom_score_adj and
    # hugetlb settings, which CRI-O has none for
    "$TERN_CRIO_CONF" "$c" "$CRIO_BIN/pinns" "$(dirname "$TERN_CRIO_CONF")/tern-cluster-runc-clamp" \
        "$CNI_NET" "$CNI_BIN" 10351 >"$c/crio.conf"
    CONTAINERS_REGISTRIES_CONF="$c/registries.conf" start crio "$CRIO_BIN/crio" \
        --config "$c/crio.conf" --config-dir "$c/conf.d" --log-level info
}

# crio_down: after the kubelet and CRI-O are stopped, conmon and the containers' processes (by the
# instance directory on their command line) killed by PID.
crio_down() {
    local pid
    for pid in $(grep -lsF "$KT/crio/" /proc/[0-9]*/cmdline | cut -d/ -f3); do
        if [ "$pid" != "$$" ]; then kill -KILL "$pid" 2>/dev/null || true; fi
    done
    return 0
}
