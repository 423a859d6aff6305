//! `ipMasq`: per-attachment masquerade rules in tern's own nftables table, for nodes without
//! tern-agent's node-wide egress NAT (podman, a plain runtime). As the reference ptp: the pod's
//! address is masqueraded towards anything outside its IPAM subnet (multicast excepted).
//!
//! Layout (`inet tern_ipmasq`): base chain `postrouting` (nat hook, priority srcnat) sends
//! multicast back and jumps (`goto`) to `masq`, which holds one rule per pod address, commented
//! `<network hash>-<attachment hash> net: N if: I id: C`. The key (the two hashes) is what DEL
//! and GC match, so they need neither the netns nor the addresses, and a DEL of an old
//! attachment never removes the rule of a newer one that got the same address.
//!
//! Invariants: ADD adds its rules in one transaction (with the table and chains, idempotently);
//! DEL removes every rule with its key in one transaction; GC removes the network's rules whose
//! attachment is not valid. Other tables are never touched.

use std::collections::HashSet;

use ipnetwork::IpNetwork;
use sha2::{Digest, Sha256};
use tern_cni::{code, Error};
use tern_net::nft::{comment, Nft, NftError};

/// tern's table for per-attachment masquerade (family `inet`).
pub const TABLE: &str = "tern_ipmasq";
/// The chain holding one rule per pod address.
pub const CHAIN: &str = "masq";
const FAMILY: &str = "inet";

fn hash16(parts: &[&str]) -> String {
    let mut h = Sha256::new();
    for (i, p) in parts.iter().enumerate() {
        if i > 0 {
            h.update([0u8]);
        }
        h.update(p.as_bytes());
    }
    h.finalize()[..8]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// The key prefix of every rule of `network`: 16 hex characters of SHA-256(network), then `-`.
pub fn network_key(network: &str) -> String {
    format!("{}-", hash16(&[network]))
}

/// The key of one attachment's rules: [`network_key`] then 16 hex characters of
/// SHA-256(container ID, NUL, ifname), then a space (so no key is a prefix of another).
pub fn attachment_key(network: &str, container_id: &str, ifname: &str) -> String {
    format!(
        "{}{} ",
        network_key(network),
        hash16(&[container_id, ifname])
    )
}

/// The nftables error as a CNI error (code 107, [`code::NFTABLES`]).
pub fn from_nft(e: NftError) -> Error {
    Error::new(code::NFTABLES, format!("ipMasq: {e}"))
}

/// The nft tool for `ipMasq`.
///
/// # Errors
/// Code 107 when no `nft` binary is installed.
pub fn nft() -> Result<Nft, Error> {
    Nft::find().map_err(|e| {
        from_nft(e).with_details("ipMasq needs the nft tool (Debian package nftables)")
    })
}

/// The script ADD applies: the table and chains (idempotent), then one rule per address.
/// `addrs` are IPAM's addresses with their prefix (the pod's subnet).
pub fn add_script(network: &str, container_id: &str, ifname: &str, addrs: &[IpNetwork]) -> String {
    let t = format!("{FAMILY} {TABLE}");
    let mut s = format!(
        "add table {t}\n\
         add chain {t} {CHAIN}\n\
         add chain {t} postrouting {{ type nat hook postrouting priority 100; policy accept; }}\n\
         flush chain {t} postrouting\n\
         add rule {t} postrouting ip daddr 224.0.0.0/4 return\n\
         add rule {t} postrouting ip6 daddr ff00::/8 return\n\
         add rule {t} postrouting goto {CHAIN}\n"
    );
    let note = comment(&format!(
        "{}net: {network} if: {ifname} id: {container_id}",
        attachment_key(network, container_id, ifname)
    ));
    for a in addrs {
        let fam = if a.is_ipv4() { "ip" } else { "ip6" };
        let subnet = IpNetwork::new(a.network(), a.prefix()).unwrap_or(*a);
        s.push_str(&format!(
            "add rule {t} {CHAIN} {fam} saddr {} {fam} daddr != {subnet} masquerade comment {note}\n",
            a.ip()
        ));
    }
    s
}

/// ADD: masquerades `addrs` for the attachment, in one transaction.
///
/// # Errors
/// Code 107 with nft's message.
pub fn add(
    nft: &Nft,
    network: &str,
    container_id: &str,
    ifname: &str,
    addrs: &[IpNetwork],
) -> Result<(), Error> {
    nft.apply(&add_script(network, container_id, ifname, addrs))
        .map_err(from_nft)
}

/// Deletes every commented rule of the chain that `keep` refuses, in one transaction; returns
/// how many.
fn delete_matching(nft: &Nft, keep: impl Fn(&str) -> bool) -> Result<usize, Error> {
    let rules = nft.rules(FAMILY, TABLE, CHAIN).map_err(from_nft)?;
    let doomed: Vec<u64> = rules
        .iter()
        .filter(|r| r.comment.as_deref().is_some_and(|c| !keep(c)))
        .map(|r| r.handle)
        .collect();
    if doomed.is_empty() {
        return Ok(0);
    }
    let script: String = doomed
        .iter()
        .map(|h| format!("delete rule {FAMILY} {TABLE} {CHAIN} handle {h}\n"))
        .collect();
    nft.apply(&script).map_err(from_nft)?;
    Ok(doomed.len())
}

/// DEL: removes the attachment's rules (none is fine); returns how many.
///
/// # Errors
/// Code 107 with nft's message.
pub fn remove(nft: &Nft, network: &str, container_id: &str, ifname: &str) -> Result<usize, Error> {
    let key = attachment_key(network, container_id, ifname);
    delete_matching(nft, |c| !c.starts_with(&key))
}

/// GC: removes the rules of `network` whose attachment is not in `valid`; returns how many.
///
/// # Errors
/// Code 107 with nft's message.
pub fn collect(nft: &Nft, network: &str, valid: &HashSet<(&str, &str)>) -> Result<usize, Error> {
    let net = network_key(network);
    let keep: HashSet<String> = valid
        .iter()
        .map(|(cid, ifname)| attachment_key(network, cid, ifname))
        .collect();
    delete_matching(nft, |c| {
        !c.starts_with(&net) || keep.iter().any(|k| c.starts_with(k.as_str()))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_separate_networks_and_attachments() {
        let a = attachment_key("n", "c1", "eth0");
        assert!(a.starts_with(&network_key("n")) && a.ends_with(' '));
        assert_eq!(a.len(), 16 + 1 + 16 + 1);
        assert_ne!(a, attachment_key("n", "c1", "eth1"));
        assert_ne!(a, attachment_key("m", "c1", "eth0"));
        assert_ne!(
            attachment_key("n", "ab", "c"),
            attachment_key("n", "a", "bc")
        );
    }

    #[test]
    fn script_masquerades_each_address_outside_its_subnet() {
        let s = add_script(
            "pods",
            "c1",
            "eth0",
            &[
                "10.1.2.5/24".parse().unwrap(),
                "fd00:1::5/64".parse().unwrap(),
            ],
        );
        let key = attachment_key("pods", "c1", "eth0");
        assert!(s.contains(&format!(
            "add rule inet tern_ipmasq masq ip saddr 10.1.2.5 ip daddr != 10.1.2.0/24 masquerade comment \"{key}net: pods if: eth0 id: c1\""
        )), "{s}");
        assert!(
            s.contains("ip6 saddr fd00:1::5 ip6 daddr != fd00:1::/64 masquerade"),
            "{s}"
        );
        assert!(s.contains("flush chain inet tern_ipmasq postrouting\n"));
    }
}
