use super::*;
use crate::netlink::parse_mac;

#[test]
fn macs_parse_and_format_round_trip() {
    let m = parse_mac("0A:1b:2c:3d:4e:5f").unwrap();
    assert_eq!(m, [0x0a, 0x1b, 0x2c, 0x3d, 0x4e, 0x5f]);
    assert_eq!(format_mac(&m), "0a:1b:2c:3d:4e:5f");
    for bad in [
        "",
        "0a:1b:2c:3d:4e",
        "0a:1b:2c:3d:4e:5f:00",
        "0a:1b:2c:3d:4e:zz",
        "a:1b:2c:3d:4e:5f0",
    ] {
        assert!(parse_mac(bad).is_err(), "{bad}");
    }
}

#[test]
fn fdb_destinations_parse_from_raw_bytes() {
    assert_eq!(
        neigh_ip(&NeighbourAddress::Other(vec![192, 168, 1, 2])),
        Some("192.168.1.2".parse().unwrap())
    );
    let v6: std::net::Ipv6Addr = "fd00::2".parse().unwrap();
    assert_eq!(
        neigh_ip(&NeighbourAddress::Other(v6.octets().to_vec())),
        Some(IpAddr::V6(v6))
    );
    assert_eq!(neigh_ip(&NeighbourAddress::Other(vec![1, 2, 3])), None);
}
