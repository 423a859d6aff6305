# shellcheck shell=bash disable=SC2153
# (SC2153: the variables are node2.sh's and lib.sh's)
# tests/cluster/node2_net.sh — node 2's cabling: node 1's address on kt-node0 with its peer in the
# switch netns (host-gw) or the router netns (vxlan: node 2 on another subnet), node 2's veth, its
# addresses and routes, and the guard rules both nodes get. Sourced by tests/cluster/node2.sh.


# bridge_address: node 1's address on the node network (lib.sh's node_address in two-node mode),
# on the veth kt-node0 whose peer is cabled outside node 1's netns, as an operator's NIC is to a
# switch or router that is not the node. host-gw: the peer is a port of the bridge kt-br0 in the
# switch netns kt-switch, where node 2's veth is another port. vxlan: the peer is the router's
# port on node 1's subnet, in the router netns. Never a bridge in node 1's netns: br_netfilter
# (bridge-nf-call-iptables, on here) would run node 1's conntrack, kube-proxy's NAT and tern's
# egress NAT a second time on the frames it bridges, and a pod's connection to the other node's
# NodePort was lost (docs/DESIGN.md, "The two-node tier").
bridge_address() {
    local peer=${NODE_LINK%0}1 ns=$SWITCH_NS
    [ "$NODE_ROUTES" != vxlan ] || ns=$ROUTER_NS
    local p=(ip netns exec "$ns")
    if [ "$NODE_ROUTES" = vxlan ]; then
        router_netns
    else
        switch_netns
    fi
    ip link show "$NODE_LINK" >/dev/null 2>&1 || ip link add "$NODE_LINK" type veth peer name "$peer" netns "$ns"
    if [ "$NODE_ROUTES" = vxlan ]; then
        "${p[@]}" ip addr replace "$ROUTER_IP1/24" dev "$peer"
        [ -z "$NODE_IP6" ] || "${p[@]}" ip addr replace "$ROUTER_IP1_6/64" dev "$peer" nodad
    else
        "${p[@]}" ip link set "$peer" master "$BRIDGE"
    fi
    "${p[@]}" ip link set "$peer" up
    ip addr replace "$NODE_IP/24" dev "$NODE_LINK"
    [ -z "$NODE_IP6" ] || ip addr replace "$NODE_IP6/64" dev "$NODE_LINK" nodad
    ip link set "$NODE_LINK" up
}

# switch_netns: with host-gw, the node network's switch (netns kt-switch, the bridge kt-br0 in
# it), made once; no netfilter of its own (bridge-nf-call-* off in it).
switch_netns() {
    [ ! -e "/run/netns/$SWITCH_NS" ] || return 0
    local w=(ip netns exec "$SWITCH_NS")
    ip netns add "$SWITCH_NS"
    "${w[@]}" ip link set lo up
    "${w[@]}" sysctl -qw net.bridge.bridge-nf-call-iptables=0 net.bridge.bridge-nf-call-ip6tables=0 2>/dev/null || true
    "${w[@]}" ip link add "$BRIDGE" type bridge
    "${w[@]}" ip link set "$BRIDGE" up
}

# node2_guard_rules: the extra rules of node 1's guard in two-node mode: what comes from the
# node network (node 2 itself, or its pods after its egress NAT) may reach the cluster's ranges
# and the node network, nothing else; pods may reach node 2's address.
node2_guard_rules() {
    nft insert rule inet tern_kt_guard forward ip saddr "$CLUSTER_CIDR" ip daddr "{ $NODE_NETS }" accept
    nft add rule inet tern_kt_guard forward ip saddr "{ $NODE_NETS }" ip daddr != "{ $CLUSTER_CIDR, $NODE_NETS, $SERVICE_CIDR }" counter reject
    if [ -n "$NODE_NET6" ]; then
        nft insert rule inet tern_kt_guard forward ip6 saddr "$CLUSTER_CIDR6" ip6 daddr "{ $NODE_NETS6 }" accept
        nft add rule inet tern_kt_guard forward ip6 saddr "{ $NODE_NETS6 }" ip6 daddr != "{ $CLUSTER_CIDR6, $NODE_NETS6, $SERVICE_CIDR6 }" counter reject
    fi
}

# router_netns: with vxlan, the router between the two node subnets (netns kt-router), made once:
# forwarding on, no default route, and a guard that forwards only between the two node subnets.
router_netns() {
    [ ! -e "/run/netns/$ROUTER_NS" ] || return 0
    local r=(ip netns exec "$ROUTER_NS")
    ip netns add "$ROUTER_NS"
    "${r[@]}" ip link set lo up
    "${r[@]}" sysctl -qw net.ipv4.ip_forward=1
    [ -z "$NODE2_IP6" ] || "${r[@]}" sysctl -qw net.ipv6.conf.all.forwarding=1
    local v6=''
    [ -z "$NODE2_IP6" ] || v6="
        ip6 saddr { $NODE_NETS6 } ip6 daddr { $NODE_NETS6 } accept"
    "${r[@]}" nft -f - <<NFT
table inet tern_kt_guard {
    chain forward {
        type filter hook forward priority filter; policy accept;
        ip saddr { $NODE_NETS } ip daddr { $NODE_NETS } accept$v6
        counter reject
    }
}
NFT
}

# node2_router: with vxlan, node 2's veth (the host end, $NODE2_VETH) moved into the router netns
# (router_netns, which node 1's link already reaches), and node 1's route to node 2's subnet
# through it.
node2_router() {
    local r=(ip netns exec "$ROUTER_NS")
    router_netns
    ip link set "$NODE2_VETH" netns "$ROUTER_NS"
    "${r[@]}" ip addr add "$ROUTER_IP2/24" dev "$NODE2_VETH"
    [ -z "$NODE2_IP6" ] || "${r[@]}" ip addr add "$ROUTER_IP2_6/64" dev "$NODE2_VETH" nodad
    "${r[@]}" ip link set "$NODE2_VETH" up
    ip route replace "$NODE2_NET" via "$ROUTER_IP1"
    [ -z "$NODE2_IP6" ] || ip -6 route replace "$NODE2_NET6" via "$ROUTER_IP1_6"
}

# node2_network PID: the veth into node 2's netns (PID's), its addresses and default routes, and
# the guard in its netns. With host-gw the host end is on node 1's bridge and node 1 is the
# default gateway; with vxlan it is in the router netns, the gateway.
node2_network() {
    local pid=$1 gw=$NODE_IP gw6=$NODE_IP6
    ip link add "$NODE2_VETH" type veth peer name kt-n2c
    if [ "$NODE_ROUTES" = vxlan ]; then
        node2_router
        gw=$ROUTER_IP2 gw6=$ROUTER_IP2_6
    else
        switch_netns
        ip link set "$NODE2_VETH" netns "$SWITCH_NS"
        ip netns exec "$SWITCH_NS" ip link set "$NODE2_VETH" master "$BRIDGE" up
    fi
    ip link set kt-n2c netns "$pid"
    nsenter -t "$pid" -n ip link set kt-n2c name eth0
    nsenter -t "$pid" -n ip addr add "$NODE2_IP/24" dev eth0
    [ -z "$NODE2_IP6" ] || nsenter -t "$pid" -n ip addr add "$NODE2_IP6/64" dev eth0 nodad
    nsenter -t "$pid" -n ip link set eth0 up
    nsenter -t "$pid" -n ip link set lo up
    nsenter -t "$pid" -n ip route add default via "$gw"
    [ -z "$NODE2_IP6" ] || nsenter -t "$pid" -n ip -6 route add default via "$gw6"
    # the guard in node 2's netns: its pods reach the cluster and the node networks, nothing else
    local v6=''
    if [ -n "$NODE_NET6" ]; then
        v6="
        ip6 saddr $CLUSTER_CIDR6 ip6 daddr { $CLUSTER_CIDR6, $NODE_NETS6 } accept
        ip6 saddr $CLUSTER_CIDR6 counter reject
        ip6 daddr $SERVICE_CIDR6 counter reject"
    fi
    nsenter -t "$pid" -n nft -f - <<NFT
table inet tern_kt_guard {
    chain forward {
        type filter hook forward priority filter; policy accept;
        ip saddr $CLUSTER_CIDR ip daddr { $CLUSTER_CIDR, $NODE_NETS } accept
        ip saddr $CLUSTER_CIDR counter reject
        ip daddr $SERVICE_CIDR counter reject$v6
    }
}
NFT
}
