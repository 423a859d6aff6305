//! Hostile netconfs with the code each must be refused with.
//!
//! Hostile netconfs: each a valid base config changed in one way that the spec or common sense
//! rejects, with the CNI error code a plugin must refuse it with before it changes anything.
//! Shared by the protocol crate's unit tests and the end-to-end tests of every plugin.

use serde_json::{json, Map, Value};

/// One hostile input: what it is, the netconf bytes, the code it must be refused with.
pub type Case = (String, Vec<u8>, u32);

/// `base` (an object) with `pointer`'s last segment set to `value` (or removed, when `value` is
/// `null` and the segment starts with `-`), serialised.
pub fn with(base: &Value, pointer: &str, value: Value) -> Vec<u8> {
    let mut v = base.clone();
    let (parent, key) = pointer.rsplit_once('/').unwrap_or(("", pointer));
    if let Some(slot) = v.pointer_mut(parent) {
        match (value.is_null(), key.strip_prefix('-')) {
            (true, Some(k)) => {
                if let Some(m) = slot.as_object_mut() {
                    m.remove(k);
                }
            }
            _ => slot[key] = value,
        }
    }
    serde_json::to_vec(&v).unwrap_or_default()
}

/// `base` without top-level `key`, with `fragment` (raw JSON text `"k":…`) appended to it.
pub fn splice(base: &Value, key: &str, fragment: &str) -> Vec<u8> {
    let mut m: Map<String, Value> = base.as_object().cloned().unwrap_or_default();
    m.remove(key);
    let text = serde_json::to_string(&Value::Object(m)).unwrap_or_default();
    let body = text.strip_suffix('}').unwrap_or(&text);
    let sep = if body.len() > 1 { "," } else { "" };
    format!("{body}{sep}{fragment}}}").into_bytes()
}

/// Every hostile netconf built on `base`, which must be an object carrying `cniVersion` (1.0.0 or
/// later), `name`, `type` and an `ipam` object with a `type` (the cases use and replace them).
pub fn netconfs(base: &Value) -> Vec<Case> {
    let ipam = base.get("ipam").cloned().unwrap_or_else(|| json!({}));
    let ipam_type = ipam["type"].as_str().unwrap_or("host-local").to_owned();
    let prev = json!({"cniVersion": "1.0.0", "ips": [{"address": "10.0.0.2/24"}],
                      "routes": [{"dst": "0.0.0.0/0"}], "dns": {}});
    let b = base.clone();
    let mut p = base.clone();
    p["prevResult"] = prev;
    let c = |what: &str, bytes: Vec<u8>, code: u32| (what.to_owned(), bytes, code);
    let name = base["name"].as_str().unwrap_or("n");
    vec![
        c("type missing", with(&b, "/-type", Value::Null), 7),
        c("type null", with(&b, "/type", Value::Null), 7),
        c("type empty", with(&b, "/type", json!("")), 7),
        c(
            "type a path",
            with(&b, "/type", json!("/opt/cni/bin/tern")),
            7,
        ),
        c(
            "type relative path",
            with(&b, "/type", json!("../bin/sh")),
            7,
        ),
        c("type backslash", with(&b, "/type", json!("a\\b")), 7),
        c("type ..", with(&b, "/type", json!("..")), 7),
        c("type with a newline", with(&b, "/type", json!("tern\n")), 7),
        c("type with NUL", with(&b, "/type", json!("tern\u{0}x")), 7),
        c("type a number", with(&b, "/type", json!(5)), 6),
        c("type an object", with(&b, "/type", json!({})), 6),
        c(
            "type 300 bytes",
            with(&b, "/type", json!("t".repeat(300))),
            7,
        ),
        c(
            "ipam.type a path",
            with(&b, "/ipam/type", json!("/bin/sh")),
            7,
        ),
        c("ipam.type ..", with(&b, "/ipam/type", json!("..")), 7),
        c("ipam.type a number", with(&b, "/ipam/type", json!(1)), 6),
        c(
            "duplicate top-level key",
            splice(&b, "", &format!(r#""name":"{name}x""#)),
            7,
        ),
        c(
            "duplicate cniVersion",
            splice(&b, "", r#""cniVersion":"0.4.0""#),
            7,
        ),
        c(
            "duplicate in ipam",
            splice(
                &b,
                "ipam",
                &format!(r#""ipam":{{"type":"{ipam_type}","type":"static"}}"#),
            ),
            7,
        ),
        c(
            "duplicate in a range",
            splice(
                &b,
                "ipam",
                &format!(
                    r#""ipam":{{"type":"{ipam_type}","ranges":[[{{"subnet":"10.250.0.0/24","subnet":"10.251.0.0/24"}}]]}}"#
                ),
            ),
            7,
        ),
        c(
            "duplicate in args.cni",
            splice(
                &b,
                "args",
                r#""args":{"cni":{"ips":[],"ips":["10.0.0.9"]}}"#,
            ),
            7,
        ),
        c(
            "duplicate in runtimeConfig",
            splice(
                &b,
                "runtimeConfig",
                r#""runtimeConfig":{"mac":"0a:00:00:00:00:01","mac":"0a:00:00:00:00:02"}"#,
            ),
            7,
        ),
        c(
            "duplicate in sysctl",
            splice(
                &b,
                "sysctl",
                r#""sysctl":{"net.ipv4.tcp_keepalive_time":"300","net.ipv4.tcp_keepalive_time":"7200"}"#,
            ),
            7,
        ),
        c(
            "duplicate in prevResult ips",
            splice(
                &b,
                "prevResult",
                r#""prevResult":{"cniVersion":"1.0.0","ips":[{"address":"10.0.0.2/24","address":"10.0.0.3/24"}]}"#,
            ),
            7,
        ),
        c(
            "duplicate in an unknown key",
            splice(&b, "x", r#""x":{"a":1,"a":1}"#),
            7,
        ),
        c(
            "case variants of runtimeConfig",
            splice(
                &b,
                "RuntimeConfig",
                r#""runtimeConfig":{},"RuntimeConfig":{"mac":"0a:00:00:00:00:01"}"#,
            ),
            7,
        ),
        c(
            "case variants of name",
            splice(&b, "Name", &format!(r#""Name":"{name}x""#)),
            7,
        ),
        c(
            "case variants of args.cni",
            splice(&b, "args", r#""args":{"cni":{},"CNI":{}}"#),
            7,
        ),
        c(
            "capabilities a list",
            with(&b, "/capabilities", json!(["ips"])),
            6,
        ),
        c(
            "capabilities a string",
            with(&b, "/capabilities", json!("ips")),
            6,
        ),
        c(
            "capability a string",
            with(&b, "/capabilities", json!({"ips": "true"})),
            6,
        ),
        c(
            "capability a number",
            with(&b, "/capabilities", json!({"ips": 1})),
            6,
        ),
        c(
            "capability null",
            with(&b, "/capabilities", json!({"ips": null})),
            6,
        ),
        c("ipMasq a string", with(&b, "/ipMasq", json!("true")), 6),
        c(
            "disableCheck a string",
            with(&b, "/disableCheck", json!("yes")),
            6,
        ),
        c("disableGC a number", with(&b, "/disableGC", json!(1)), 6),
        c(
            "cniVersions a string",
            with(&b, "/cniVersions", json!("1.0.0")),
            6,
        ),
        c("dns a string", with(&b, "/dns", json!("10.96.0.10")), 6),
        c("dns a list", with(&b, "/dns", json!([["10.96.0.10"]])), 6),
        c("dns an empty list", with(&b, "/dns", json!([])), 6),
        c(
            "dns.nameservers a string",
            with(&b, "/dns", json!({"nameservers": "10.96.0.10"})),
            6,
        ),
        c(
            "dns.nameservers a number",
            with(&b, "/dns", json!({"nameservers": [1]})),
            6,
        ),
        c(
            "dns.nameservers a name",
            with(&b, "/dns", json!({"nameservers": ["kube-dns"]})),
            7,
        ),
        c(
            "dns.nameservers with a port",
            with(&b, "/dns", json!({"nameservers": ["10.96.0.10:53"]})),
            7,
        ),
        c(
            "dns.nameservers empty string",
            with(&b, "/dns", json!({"nameservers": [""]})),
            7,
        ),
        c(
            "dns.domain a number",
            with(&b, "/dns", json!({"domain": 1})),
            6,
        ),
        c(
            "dns.search a string",
            with(&b, "/dns", json!({"search": "svc"})),
            6,
        ),
        c(
            "dns.options an object",
            with(&b, "/dns", json!({"options": {}})),
            6,
        ),
        c("prevResult a list", with(&b, "/prevResult", json!([])), 6),
        c(
            "prevResult a string",
            with(&b, "/prevResult", json!("{}")),
            6,
        ),
        c("prevResult a number", with(&b, "/prevResult", json!(1)), 6),
        c(
            "prevResult address without prefix",
            with(&p, "/prevResult/ips/0/address", json!("10.0.0.2")),
            6,
        ),
        c(
            "prevResult v6 address without prefix",
            with(&p, "/prevResult/ips/0/address", json!("fd00::2")),
            6,
        ),
        c(
            "prevResult route without prefix",
            with(&p, "/prevResult/routes/0/dst", json!("0.0.0.0")),
            6,
        ),
        c(
            "prevResult ips entry a list",
            with(&p, "/prevResult/ips", json!([["10.0.0.2/24"]])),
            6,
        ),
        c(
            "prevResult routes entry a list",
            with(&p, "/prevResult/routes", json!([["0.0.0.0/0"]])),
            6,
        ),
        c(
            "prevResult interfaces entry a list",
            with(&p, "/prevResult/interfaces", json!([["eth0"]])),
            6,
        ),
        c(
            "prevResult dns a list",
            with(&p, "/prevResult/dns", json!([["10.96.0.10"]])),
            6,
        ),
        c(
            "prevResult dns nameserver a name",
            with(&p, "/prevResult/dns", json!({"nameservers": ["kube-dns"]})),
            7,
        ),
        c(
            "prevResult cniVersion 0.2.0",
            with(&p, "/prevResult/cniVersion", json!("0.2.0")),
            1,
        ),
        c(
            "prevResult cniVersion a number",
            with(&p, "/prevResult/cniVersion", json!(1)),
            6,
        ),
    ]
}
