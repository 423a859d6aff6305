//! The host-side veth name: `tern` + 11 hex characters of SHA-256(container ID, NUL, ifname), so
//! DEL and GC find the link from the attachment alone, without the netns (DESIGN.md).

use sha2::{Digest, Sha256};

/// Prefix of every tern host veth.
pub const HOST_VETH_PREFIX: &str = "tern";

/// The host veth name for an attachment: 15 bytes, `tern[0-9a-f]{11}`.
pub fn host_veth_name(container_id: &str, ifname: &str) -> String {
    let mut h = Sha256::new();
    h.update(container_id.as_bytes());
    h.update([0u8]);
    h.update(ifname.as_bytes());
    let digest = h.finalize();
    let hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
    format!("{HOST_VETH_PREFIX}{}", &hex[..11])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stable_distinct_and_fits_ifnamsiz() {
        let a = host_veth_name("c1", "eth0");
        assert_eq!(a, host_veth_name("c1", "eth0"));
        assert_eq!(a.len(), 15);
        assert!(a.starts_with(HOST_VETH_PREFIX) && a[4..].bytes().all(|b| b.is_ascii_hexdigit()));
        assert_ne!(a, host_veth_name("c1", "eth1"));
        assert_ne!(a, host_veth_name("c2", "eth0"));
        // The separator keeps ("ab","c") and ("a","bc") apart.
        assert_ne!(host_veth_name("ab", "c"), host_veth_name("a", "bc"));
        // Known value, so a change of the scheme (which would strand existing veths) is noticed.
        assert_eq!(host_veth_name("c1", "eth0"), "ternec43057c07a");
    }
}
