//! Type and value checks of the netconf's standard fields.
//!
//! The netconf's standard fields checked for their JSON type and value before any plugin reads
//! them: the plugin type names, `capabilities`, the booleans, `cniVersions`, `dns`, and case
//! variants of one key given twice.

use std::net::IpAddr;

use serde_json::{Map, Value};

use crate::error::Error;
use crate::result::Dns;

/// The longest plugin type accepted: a file name (`NAME_MAX`).
pub const MAX_TYPE_LEN: usize = 255;

fn wrong_type(key: &str, want: &str, got: &Value) -> Error {
    Error::decode(format!(
        "error unmarshall network config: {key} must be {want}, got {got}"
    ))
}

/// Checks a plugin type (`type`, `ipam.type`): the name of an executable in `CNI_PATH`, so a
/// file name: 1–255 bytes, not `.` or `..`, without `/`, `\`, whitespace or control characters.
///
/// # Errors
/// Code 7 naming `key` and what is wrong.
pub fn plugin_type(key: &str, t: &str) -> Result<(), Error> {
    let why = if t.is_empty() {
        "is empty"
    } else if t.len() > MAX_TYPE_LEN {
        "is longer than a file name may be (255 bytes)"
    } else if t == "." || t == ".." {
        "is . or .."
    } else if t.contains(['/', '\\']) {
        "contains a path separator: it names a plugin in CNI_PATH, not a path"
    } else if t.chars().any(|c| c.is_whitespace() || c.is_control()) {
        "contains whitespace or control characters"
    } else {
        return Ok(());
    };
    Err(Error::invalid_config(format!("{key} {t:?} {why}")))
}

/// `type` of the netconf: present, a string, a valid plugin name.
///
/// # Errors
/// Code 7 when missing, `null` or invalid; code 6 when not a string.
pub fn top_type(raw: &Map<String, Value>) -> Result<String, Error> {
    match raw.get("type") {
        None | Some(Value::Null) => Err(Error::invalid_config(
            "type is missing: a netconf names the plugin it is for",
        )),
        Some(Value::String(t)) => plugin_type("type", t).map(|()| t.clone()),
        Some(other) => Err(wrong_type("type", "a string", other)),
    }
}

/// The standard fields whose JSON type the spec fixes: `capabilities` (an object of booleans),
/// `ipMasq`, `disableCheck`, `disableGC` (booleans), `cniVersions` (a list of strings), and
/// `ipam.type` when given (a valid plugin name).
///
/// # Errors
/// Code 6 for a wrong JSON type; code 7 for an invalid `ipam.type`.
pub fn standard_types(raw: &Map<String, Value>, ipam: &Map<String, Value>) -> Result<(), Error> {
    match raw.get("capabilities") {
        None | Some(Value::Null) => {}
        Some(Value::Object(caps)) => {
            if let Some((k, v)) = caps.iter().find(|(_, v)| !v.is_boolean()) {
                return Err(wrong_type(&format!("capabilities.{k}"), "a boolean", v));
            }
        }
        Some(other) => return Err(wrong_type("capabilities", "an object of booleans", other)),
    }
    for key in ["ipMasq", "disableCheck", "disableGC"] {
        match raw.get(key) {
            None | Some(Value::Null | Value::Bool(_)) => {}
            Some(other) => return Err(wrong_type(key, "a boolean", other)),
        }
    }
    match raw.get("cniVersions") {
        None | Some(Value::Null) => {}
        Some(Value::Array(a)) if a.iter().all(Value::is_string) => {}
        Some(other) => return Err(wrong_type("cniVersions", "a list of strings", other)),
    }
    match ipam.get("type") {
        None | Some(Value::Null) => Ok(()),
        Some(Value::String(t)) => plugin_type("ipam.type", t),
        Some(other) => Err(wrong_type("ipam.type", "a string", other)),
    }
}

/// Reads a `dns` object (`key` names where it is): an object whose `nameservers`, `search` and
/// `options` are lists of strings and `domain` a string; `strict` also requires every nameserver
/// to be an IP address (an IPv6 one may carry a `%zone`, as resolv.conf allows).
///
/// # Errors
/// Code 6 for a wrong JSON type; code 7 for a nameserver that is not an IP address.
pub fn dns(key: &str, v: &Value, strict: bool) -> Result<Dns, Error> {
    if !v.is_object() {
        return Err(wrong_type(key, "an object", v));
    }
    let dns: Dns = crate::json::from_value(v.clone())
        .map_err(|e| Error::decode(format!("error unmarshall network config: {key}: {e}")))?;
    if strict {
        if let Some(bad) = dns.nameservers.iter().find(|n| !is_nameserver(n)) {
            return Err(Error::invalid_config(format!(
                "{key}.nameservers entry {bad:?} is not an IP address"
            )));
        }
    }
    Ok(dns)
}

fn is_nameserver(s: &str) -> bool {
    match s.split_once('%') {
        None => s.parse::<IpAddr>().is_ok(),
        Some((addr, zone)) => {
            addr.parse::<std::net::Ipv6Addr>().is_ok()
                && !zone.is_empty()
                && zone.len() <= crate::env::MAX_IFNAME_LEN
                && !zone
                    .chars()
                    .any(|c| c.is_whitespace() || c.is_control() || c == '/')
        }
    }
}

/// Keys of `map` that are case variants of one `known` key given more than once (`mtu` and
/// `MTU`): Go's decoder would keep whichever came last; here it is an error.
///
/// # Errors
/// Code 7 naming the spellings.
pub fn case_variants(map: &Map<String, Value>, known: &[&str], at: &str) -> Result<(), Error> {
    for want in known {
        let spellings: Vec<&str> = map
            .keys()
            .filter(|k| k.eq_ignore_ascii_case(want))
            .map(String::as_str)
            .collect();
        if spellings.len() > 1 {
            return Err(Error::invalid_config(format!(
                "{at}{want} is given {} times, as {}: give it once",
                spellings.len(),
                spellings.join(", ")
            )));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn plugin_types() {
        for good in ["tern", "host-local", "calico-ipam", "x.y_z+1"] {
            assert!(plugin_type("type", good).is_ok(), "{good}");
        }
        let long = "a".repeat(256);
        for bad in [
            "",
            ".",
            "..",
            "../bin/sh",
            "/bin/sh",
            "a\\b",
            "a b",
            "a\tb",
            "a\0b",
            &long,
        ] {
            assert_eq!(plugin_type("type", bad).unwrap_err().code, 7, "{bad:?}");
        }
    }

    #[test]
    fn nameservers() {
        for good in ["10.96.0.10", "fd00::10", "fe80::1%eth0"] {
            assert!(is_nameserver(good), "{good}");
        }
        for bad in [
            "kube-dns",
            "",
            "10.96.0.10%eth0",
            "fe80::1%",
            "10.96.0.10:53",
            "10.0.0.0/8",
        ] {
            assert!(!is_nameserver(bad), "{bad}");
        }
        assert_eq!(
            dns("dns", &json!({"nameservers": ["x"]}), true)
                .unwrap_err()
                .code,
            7
        );
        assert!(dns("dns", &json!({"nameservers": ["x"]}), false).is_ok());
    }
}
