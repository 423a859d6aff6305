//! Validating a `TuningConf` into a `Plan`.
//!
//! Validating a [`TuningConf`] into a [`Plan`]: sysctl keys and values against their rules and the
//! allowlist, the MAC and the MTU bound, every problem reported, nothing touched.

use tern_cni::Error;
use tern_net::sysctl::{Allowlist, SysctlKey, SysctlValue};

use super::defaults::{MAX_MTU, MIN_MTU};
use super::{Plan, TuningConf};

impl TuningConf {
    /// Every value problem of the link attributes that can be known offline: the MAC
    /// ([`parse_mac`]) and the MTU outside [`MIN_MTU`]`..=`[`MAX_MTU`]. Empty when fine.
    ///
    /// ADD does not apply the MTU bound itself: the range a link accepts depends on its type
    /// (the kernel's `min_mtu`/`max_mtu`, e.g. 68..=65535 for veth), so ADD leaves it to the
    /// kernel and rolls back on a rejection; no link type accepts a value outside this bound
    /// except loopback's 65536, which tern-tuning does not tune.
    pub fn link_problems(&self) -> Vec<String> {
        let mut problems = Vec::new();
        if let Some(Err(e)) = self.mac.as_deref().map(parse_mac) {
            problems.push(if e.details.is_empty() {
                e.msg
            } else {
                format!("{}: {}", e.msg, e.details)
            });
        }
        if let Some(mtu) = self.mtu.filter(|m| !(MIN_MTU..=MAX_MTU).contains(m)) {
            problems.push(format!(
                "mtu {mtu} is outside {MIN_MTU}..={MAX_MTU}, the range every Ethernet-like link accepts at best"
            ));
        }
        problems
    }

    /// Validates every sysctl (key rules, value rules, and the allowlist when given) for interface
    /// `ifname`, returning every problem (empty when valid). Nothing is touched.
    pub fn problems(&self, ifname: &str, allowlist: Option<&Allowlist>) -> Vec<tern_net::Error> {
        let mut problems = Vec::new();
        for (k, v) in &self.sysctl {
            let key = SysctlKey::parse(k, ifname);
            if let Err(e) = SysctlValue::parse(k, v) {
                problems.push(e);
            }
            match key {
                Err(e) => problems.push(e),
                // A key that breaks the rules needs no second message about the allowlist.
                Ok(_) => {
                    if let Some(Err(e)) = allowlist.map(|a| a.check(k)) {
                        problems.push(e);
                    }
                }
            }
        }
        problems
    }

    /// Validates everything (against the allowlist when given: ADD; CHECK only reads) and
    /// returns the plan.
    ///
    /// # Errors
    /// Code 7 naming every rejected key or value and the allowlist's source, or the bad MAC.
    pub fn plan(&self, ifname: &str, allowlist: Option<&Allowlist>) -> Result<Plan, Error> {
        let problems = self.problems(ifname, allowlist);
        if !problems.is_empty() {
            let msgs: Vec<String> = problems.iter().map(ToString::to_string).collect();
            return Err(Error::invalid_config(msgs.join("; ")).with_details(
                "nothing was written: every sysctl is validated before any is applied",
            ));
        }
        let mac = self.mac.as_deref().map(parse_mac).transpose()?;
        let mut sysctls = Vec::with_capacity(self.sysctl.len());
        for (k, v) in &self.sysctl {
            sysctls.push((
                SysctlKey::parse(k, ifname).map_err(|e| e.to_cni())?,
                SysctlValue::parse(k, v).map_err(|e| e.to_cni())?,
            ));
        }
        Ok(Plan {
            sysctls,
            mac,
            mtu: self.mtu,
            promisc: self.promisc,
            allmulti: self.allmulti,
            txqlen: self.txqlen,
        })
    }
}

/// Parses `aa:bb:cc:dd:ee:ff` (or `-` separated) into bytes: a usable interface address, so not
/// all-zero, multicast or broadcast (what the kernel's `is_valid_ether_addr` accepts).
///
/// # Errors
/// Code 7 `invalid args <mac> for MAC addr` (the reference's text), the reason in the details.
pub fn parse_mac(s: &str) -> Result<[u8; 6], Error> {
    let bad = || Error::invalid_config(format!("invalid args {s} for MAC addr"));
    let parts: Vec<&str> = s.split([':', '-']).collect();
    if parts.len() != 6 {
        return Err(bad());
    }
    let mut mac = [0u8; 6];
    for (slot, part) in mac.iter_mut().zip(parts) {
        if part.len() != 2 {
            return Err(bad());
        }
        *slot = u8::from_str_radix(part, 16).map_err(|_| bad())?;
    }
    if mac == [0xff; 6] {
        return Err(bad().with_details("the broadcast address cannot be an interface's address"));
    }
    if mac[0] & 1 != 0 {
        return Err(bad().with_details("a multicast address cannot be an interface's address"));
    }
    if mac == [0; 6] {
        // The kernel refuses it too (is_valid_ether_addr, EADDRNOTAVAIL), but only after
        // earlier steps were applied.
        return Err(bad().with_details("the all-zero address cannot be an interface's address"));
    }
    Ok(mac)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plan_validates_everything_first() {
        let t = TuningConf {
            sysctl: vec![
                ("net.ipv4.tcp_keepalive_time".into(), "300".into()),
                ("net.ipv4.ip_forward".into(), "1".into()),
                ("kernel.hostname".into(), "x".into()),
            ],
            ..TuningConf::default()
        };
        let e = t.plan("eth0", Some(&Allowlist::builtin())).unwrap_err();
        assert_eq!(e.code, 7);
        assert!(
            e.msg.contains("net.ipv4.ip_forward") && e.msg.contains("kernel.hostname"),
            "{e}"
        );
        assert!(e.msg.contains("built-in"), "{e}");
        let ok = TuningConf {
            sysctl: vec![("net.ipv4.tcp_keepalive_time".into(), "300".into())],
            mac: Some("0A-00-00-00-00-01".into()),
            ..TuningConf::default()
        };
        let p = ok.plan("eth0", Some(&Allowlist::builtin())).unwrap();
        assert_eq!(p.mac, Some([0x0a, 0, 0, 0, 0, 1]));
        assert_eq!(p.sysctls[0].0.relative(), "net/ipv4/tcp_keepalive_time");
    }

    #[test]
    fn macs() {
        assert!(parse_mac("0a:00:00:00:00:01").is_ok());
        for bad in [
            "",
            "0a:00:00:00:00",
            "0a:00:00:00:00:01:02",
            "zz:00:00:00:00:01",
            "01:00:00:00:00:01",
            "a:0:0:0:0:1",
            "00:00:00:00:00:00",
            "ff:ff:ff:ff:ff:ff",
            "01:00:5e:00:00:01",
        ] {
            assert_eq!(parse_mac(bad).unwrap_err().code, 7, "{bad}");
        }
    }
}
