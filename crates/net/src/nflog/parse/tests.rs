//! nfnetlink_log datagrams built by hand as the kernel lays them out (nfulnl_log_packet in
//! net/netfilter/nfnetlink_log.c: header, nfgenmsg, then attributes in type order).

use super::*;

fn attr(ty: u16, v: &[u8]) -> Vec<u8> {
    let mut out = ((4 + v.len()) as u16).to_ne_bytes().to_vec();
    out.extend_from_slice(&ty.to_ne_bytes());
    out.extend_from_slice(v);
    out.resize(align4(out.len()), 0);
    out
}

fn message(ty: u16, seq: u32, body: &[u8]) -> Vec<u8> {
    let mut out = ((NLMSG_HDRLEN + body.len()) as u32).to_ne_bytes().to_vec();
    out.extend_from_slice(&ty.to_ne_bytes());
    out.extend_from_slice(&0u16.to_ne_bytes());
    out.extend_from_slice(&seq.to_ne_bytes());
    out.extend_from_slice(&0u32.to_ne_bytes());
    out.extend_from_slice(body);
    out
}

fn packet_message(group: u16, attrs: &[Vec<u8>]) -> Vec<u8> {
    let mut body = vec![libc::AF_INET as u8, 0];
    body.extend_from_slice(&group.to_be_bytes());
    attrs.iter().for_each(|a| body.extend_from_slice(a));
    message(NFNL_SUBSYS_ULOG << 8 | NFULNL_MSG_PACKET, 0, &body)
}

/// An IPv4 TCP SYN's first 40 bytes, 10.0.1.2:40000 → 10.0.2.3:8080.
fn ipv4_syn() -> Vec<u8> {
    let mut p = vec![0x45, 0, 0, 60, 0, 0, 0x40, 0, 64, IPPROTO_TCP, 0, 0];
    p.extend_from_slice(&[10, 0, 1, 2, 10, 0, 2, 3]);
    p.extend_from_slice(&40000u16.to_be_bytes());
    p.extend_from_slice(&8080u16.to_be_bytes());
    p.resize(40, 0);
    p
}

fn ipv6_udp_after_hop_by_hop() -> Vec<u8> {
    let mut p = vec![0x60, 0, 0, 0, 0, 16, 0 /* hop-by-hop */, 64];
    p.extend_from_slice(&"fd00:1::2".parse::<Ipv6Addr>().unwrap().octets());
    p.extend_from_slice(&"fd00:2::3".parse::<Ipv6Addr>().unwrap().octets());
    p.extend_from_slice(&[IPPROTO_UDP, 0, 0, 0, 0, 0, 0, 0]);
    p.extend_from_slice(&5353u16.to_be_bytes());
    p.extend_from_slice(&53u16.to_be_bytes());
    p
}

#[test]
fn a_packet_message_gives_its_group_prefix_time_interfaces_and_payload() {
    let mut ts = 1_700_000_000u64.to_be_bytes().to_vec();
    ts.extend_from_slice(&250_000u64.to_be_bytes());
    let datagram = packet_message(
        4242,
        &[
            attr(1, &[8, 0, 2, 0]), // NFULA_PACKET_HDR
            attr(NFULA_TIMESTAMP, &ts),
            attr(NFULA_IFINDEX_INDEV, &7u32.to_be_bytes()),
            attr(NFULA_IFINDEX_OUTDEV | 0x4000, &9u32.to_be_bytes()),
            attr(NFULA_PAYLOAD, &ipv4_syn()),
            attr(NFULA_PREFIX, b"tern-netpol denied ingress\0"),
        ],
    );
    let got = packets(&datagram).unwrap();
    assert_eq!(got.len(), 1);
    let p = &got[0];
    assert_eq!(p.group, 4242);
    assert_eq!(p.prefix, "tern-netpol denied ingress");
    assert_eq!(
        p.timestamp,
        Some(SystemTime::UNIX_EPOCH + Duration::from_millis(1_700_000_000_250))
    );
    assert_eq!((p.in_ifindex, p.out_ifindex), (Some(7), Some(9)));
    assert_eq!(p.payload, ipv4_syn());
}

#[test]
fn a_batch_of_packets_ends_with_done_and_each_is_read() {
    let mut datagram = packet_message(3, &[attr(NFULA_PREFIX, b"a\0")]);
    datagram.extend(packet_message(3, &[attr(NFULA_PREFIX, b"b\0")]));
    datagram.extend(message(NLMSG_DONE, 0, &[0; 4]));
    let got = packets(&datagram).unwrap();
    let prefixes: Vec<&str> = got.iter().map(|p| p.prefix.as_str()).collect();
    assert_eq!(prefixes, ["a", "b"]);
    assert!(got
        .iter()
        .all(|p| p.timestamp.is_none() && p.payload.is_empty()));
}

#[test]
fn a_length_past_the_datagram_is_malformed_not_a_panic() {
    let mut datagram = packet_message(3, &[attr(NFULA_PREFIX, b"a\0")]);
    let len = datagram.len() as u32 + 8;
    datagram[..4].copy_from_slice(&len.to_ne_bytes());
    assert!(packets(&datagram).is_err());
    assert!(packets(&datagram[..10]).is_err());
    // An attribute cut short ends the attributes; the packet stands.
    let mut cut = packet_message(3, &[attr(NFULA_PREFIX, b"abc\0")]);
    cut.truncate(cut.len() - 2);
    let len = cut.len() as u32;
    cut[..4].copy_from_slice(&len.to_ne_bytes());
    assert_eq!(packets(&cut).unwrap()[0].prefix, "");
    for n in 0..datagram.len() {
        let _ = packets(&datagram[..n]);
    }
}

#[test]
fn acks_and_refusals_answer_their_own_request() {
    let ok = message(NLMSG_ERROR, 5, &[0; 20]);
    assert_eq!(ack(&ok, 5), Ok(Some(0)));
    assert_eq!(ack(&ok, 6), Ok(None));
    let mut busy = (-libc::EBUSY).to_ne_bytes().to_vec();
    busy.extend_from_slice(&[0; 16]);
    assert_eq!(
        ack(&message(NLMSG_ERROR, 5, &busy), 5),
        Ok(Some(libc::EBUSY))
    );
}

#[test]
fn a_config_request_is_laid_out_as_the_kernel_reads_it() {
    let r = config_request(9, 4242, &[(1, vec![1]), (2, vec![0, 0, 0, 128, 2, 0])]);
    // nlmsghdr 16 + nfgenmsg 4 + cmd attr 8 + mode attr 12.
    assert_eq!(r.len(), 40);
    assert_eq!(u32_at(&r, 0), Some(40));
    assert_eq!(u16_at(&r, 4), Some(0x0401));
    assert_eq!(u32_at(&r, 8), Some(9));
    assert_eq!(&r[16..20], &[0, 0, 0x10, 0x92]);
    assert_eq!(&r[20..28], &[5, 0, 1, 0, 1, 0, 0, 0]);
    assert_eq!(&r[28..40], &[10, 0, 2, 0, 0, 0, 0, 128, 2, 0, 0, 0]);
}

#[test]
fn a_flow_is_read_from_ipv4_and_ipv6_headers() {
    let f = Flow::of(&ipv4_syn()).unwrap();
    assert_eq!(f.src, "10.0.1.2".parse::<IpAddr>().unwrap());
    assert_eq!(f.dst, "10.0.2.3".parse::<IpAddr>().unwrap());
    assert_eq!(
        (f.protocol_name(), f.src_port, f.dst_port),
        ("TCP".into(), Some(40000), Some(8080))
    );
    let f = Flow::of(&ipv6_udp_after_hop_by_hop()).unwrap();
    assert_eq!(f.dst, "fd00:2::3".parse::<IpAddr>().unwrap());
    assert_eq!((f.protocol_name(), f.dst_port), ("UDP".into(), Some(53)));
}

#[test]
fn a_flow_without_ports_or_cut_short_says_so() {
    let mut icmp = ipv4_syn();
    icmp[9] = IPPROTO_ICMP;
    let f = Flow::of(&icmp).unwrap();
    assert_eq!((f.protocol_name(), f.dst_port), ("ICMP".into(), None));
    // A later IPv4 fragment has no transport header.
    let mut frag = ipv4_syn();
    frag[6..8].copy_from_slice(&0x0010u16.to_be_bytes());
    assert_eq!(Flow::of(&frag).unwrap().dst_port, None);
    // Ports cut off by the copy range: the addresses still.
    assert_eq!(Flow::of(&ipv4_syn()[..21]).unwrap().dst_port, None);
    assert_eq!(Flow::of(&ipv4_syn()[..19]), None);
    assert_eq!(Flow::of(&[0x15; 40]), None);
    assert_eq!(Flow::of(&[]), None);
}
