//! Reading what a test left behind: results normalised for golden comparison, addresses, links,
//! routes and files, and the assertions on a plugin's exit.

use super::*;

/// The last component of `p`, as text (empty for none).
pub fn file_name(p: &Path) -> String {
    p.file_name().unwrap().to_string_lossy().into_owned()
}

/// Every regular file under `dir`, recursively (none when `dir` does not exist).
pub fn files_under(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let Ok(rd) = std::fs::read_dir(dir) else {
        return out;
    };
    for e in rd.flatten() {
        let p = e.path();
        if p.is_dir() {
            out.extend(files_under(&p));
        } else {
            out.push(p);
        }
    }
    out
}

/// The addresses (without prefix) in a result's `ips`.
pub fn result_addrs(result: &Value) -> Vec<IpAddr> {
    result["ips"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|ip| ip["address"].as_str())
                .map(|c| c.split('/').next().unwrap().parse().unwrap())
                .collect()
        })
        .unwrap_or_default()
}

/// A result with every `mac` replaced by `"<mac>"` (MACs are random), for golden comparison.
pub fn normalize(result: &Value) -> Value {
    let mut r = result.clone();
    if let Some(ifs) = r.get_mut("interfaces").and_then(Value::as_array_mut) {
        for i in ifs {
            if i.get("mac").is_some() {
                i["mac"] = json!("<mac>");
            }
        }
    }
    r
}

/// Asserts the run succeeded, with its output in the message.
pub fn ok(out: &RunOutput, what: &str) {
    assert!(out.success(), "{what} failed:\n{}", out.describe());
}

/// Asserts the run failed with a plugin error of `code` whose msg (or details) contains `needle`.
pub fn failed_with(out: &RunOutput, code: u64, needle: &str, what: &str) {
    assert!(!out.success(), "{what} must fail:\n{}", out.describe());
    assert_eq!(
        out.error_code(),
        Some(code),
        "{what}: wrong code:\n{}",
        out.describe()
    );
    let json = out.json.as_ref().unwrap();
    let text = format!(
        "{} {}",
        json["msg"].as_str().unwrap_or(""),
        json["details"].as_str().unwrap_or("")
    );
    assert!(
        text.contains(needle),
        "{what}: message lacks {needle:?}:\n{}",
        out.describe()
    );
}

/// `ip -j addr show dev <dev>` in `ns`: the addresses as `addr/prefix`.
pub fn addrs_of(ns: &TestNetns, dev: &str) -> Vec<String> {
    let v: Value = serde_json::from_str(&ns.ip(&["-j", "addr", "show", "dev", dev])).unwrap();
    v[0]["addr_info"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| format!("{}/{}", a["local"].as_str().unwrap(), a["prefixlen"]))
        .collect()
}

/// `ip -j link show dev <dev>` in `ns`.
pub fn link_of(ns: &TestNetns, dev: &str) -> Value {
    let v: Value = serde_json::from_str(&ns.ip(&["-j", "-d", "link", "show", "dev", dev])).unwrap();
    v[0].clone()
}

/// Routes of one family (`-4`/`-6`) in `ns`'s main table, as `ip -j route show`.
pub fn routes_of(ns: &TestNetns, fam: &str) -> Vec<Value> {
    let v: Value = serde_json::from_str(&ns.ip(&["-j", fam, "route", "show"])).unwrap();
    v.as_array().unwrap().clone()
}
