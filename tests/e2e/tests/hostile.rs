//! Hostile input against the built binaries, refused before anything is written.
//!
//! Hostile input against the built binaries, called directly as a runtime would (libcni cannot
//! send most of it: it re-marshals each plugin's config through a Go map, collapsing duplicate
//! keys): every hostile netconf is refused with its code before anything is written — no lease,
//! no state, no backup, no directory, no veth, no sysctl — by tern (with host-local and with
//! tern-ipam), tern-tuning and tern-ipam; DEL of each exits 0 and writes nothing (DEL never
//! strands a sandbox), and an attachment is released through libcni after its conflist changed
//! to one ADD refuses; and chaining across spec versions. Needs root.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use common::*;
use serde_json::{json, Value};
use tern_testkit::exec::RunOutput;
use tern_testkit::hostile;
use tern_testkit::netns::TestNetns;

/// Every path under `dir` (directories included), so that a created directory counts as written.
fn tree(dir: &Path) -> BTreeSet<PathBuf> {
    let mut out = BTreeSet::new();
    let Ok(rd) = std::fs::read_dir(dir) else {
        return out;
    };
    for e in rd.flatten() {
        let p = e.path();
        if p.is_dir() && !p.is_symlink() {
            out.extend(tree(&p));
        }
        out.insert(p);
    }
    out
}

/// The base configs, one per plugin under test: each valid (ADD succeeds with it).
fn bases(node: &Node, pod: &Path) -> Vec<(&'static str, Value)> {
    let named = |mut c: Value| {
        c["cniVersion"] = json!("1.0.0");
        c["name"] = json!("hostile");
        c
    };
    let tern_hl = named(node.tern(Fam::V4.ranges()));
    let mut tern_ti = tern_hl.clone();
    tern_ti["ipam"]["type"] = json!("tern-ipam");
    let mut tuning = named(node.tuning(keepalive_sysctls()));
    // The hostile cases replace `ipam.type`; tern-tuning ignores `ipam`.
    tuning["ipam"] = json!({"type": "host-local"});
    tuning["prevResult"] = json!({"cniVersion": "1.0.0",
        "interfaces": [{"name": "eth0", "sandbox": pod}],
        "ips": [{"interface": 0, "address": "10.99.0.9/32"}]});
    let mut ipam = tern_ti.clone();
    ipam["type"] = json!("tern-ipam");
    vec![
        ("tern", tern_hl),
        ("tern", tern_ti),
        ("tern-tuning", tuning),
        ("tern-ipam", ipam),
    ]
}

/// The corpus's node: a private allowlist, a pod for tern and tern-ipam (its `eth0` free) and one
/// for tern-tuning (holding `eth0`), with the tuned pod's keepalive values before any call.
struct Corpus {
    node: Node,
    etc: PathBuf,
    pod: TestNetns,
    tuned: TestNetns,
    keepalive: Vec<String>,
}

impl Corpus {
    fn new(tag: &str) -> Corpus {
        let mut node = Node::new(tag);
        let etc = node.private_allowlist(Some(&["net.ipv4.tcp_keepalive_.*"]));
        let pod = node.pod(tag);
        let tuned = node.pod(&format!("{tag}-t"));
        tuned.add_veth("eth0", &format!("{tag}-tp"));
        let keepalive = keepalive_of(&tuned);
        Corpus {
            node,
            etc,
            pod,
            tuned,
            keepalive,
        }
    }

    /// Each base config with its label (plugin and IPAM type) and the netns its calls use.
    fn bases(&self) -> Vec<(&'static str, String, PathBuf, Value)> {
        bases(&self.node, &self.tuned.path())
            .into_iter()
            .map(|(plugin, base)| {
                let label = format!("{plugin}/{}", base["ipam"]["type"]);
                let netns = if plugin == "tern-tuning" {
                    self.tuned.path()
                } else {
                    self.pod.path()
                };
                (plugin, label, netns, base)
            })
            .collect()
    }

    /// `plugin` `verb` in `netns` as container `cid` with `stdin` as the netconf.
    fn call(&self, plugin: &str, verb: &str, cid: &str, netns: &Path, stdin: &[u8]) -> RunOutput {
        self.node
            .call(plugin, verb)
            .etc_cni(&self.etc)
            .container_id(cid)
            .netns(netns)
            .stdin(stdin.to_vec())
            .run()
            .unwrap()
    }

    /// No tern veth exists and the tuned pod's keepalive values are unchanged.
    fn assert_kernel_untouched(&self, label: &str) {
        assert!(
            !self
                .node
                .links()
                .iter()
                .any(|l| l["ifname"].as_str().is_some_and(|n| n.starts_with("tern"))),
            "{label}: a tern veth exists"
        );
        assert_eq!(
            keepalive_of(&self.tuned),
            self.keepalive,
            "{label}: sysctls changed"
        );
    }
}

#[test]
fn every_hostile_netconf_is_refused_before_anything_is_written() {
    if tern_testkit::root::skip() {
        return;
    }
    let corpus = Corpus::new("hostile");
    let scratch = corpus.node.tool.scratch().to_path_buf();
    let (mut tried, mut refused, mut clean) = (0, 0, 0);
    for (plugin, label, netns, base) in corpus.bases() {
        for (what, bytes, code) in hostile::netconfs(&base) {
            let before = tree(&scratch);
            let out = corpus.call(plugin, "ADD", "hostile1", &netns, &bytes);
            tried += 1;
            assert!(
                !out.success(),
                "{label} {what}: accepted\n{}",
                out.describe()
            );
            refused += 1;
            assert_eq!(
                out.error_code(),
                Some(u64::from(code)),
                "{label} {what}\n{}",
                out.describe()
            );
            assert_eq!(tree(&scratch), before, "{label} {what}: wrote something");
            clean += 1;
        }
        // Kernel state is checked once per plugin (a veth or sysctl left by any case stays).
        corpus.assert_kernel_untouched(&label);
        // The base itself is accepted: each refusal above is the one change's doing.
        let base_bytes = serde_json::to_vec(&base).unwrap();
        for verb in ["ADD", "DEL"] {
            let out = corpus.call(plugin, verb, "hostile1", &netns, &base_bytes);
            ok(&out, &format!("{label} base {verb}"));
        }
    }
    corpus.node.assert_nothing_left(&[]);
    eprintln!("hostile netconfs: tried {tried}, refused {refused}, refused before any side effect {clean}");
}

/// A 0.4.0 prevResult in a 1.0.0 config, a 1.1.0 one in a 0.4.0 config and one without
/// `cniVersion`: tern-tuning converts them, applies its sysctls and prints the config's version.
#[test]
fn tern_tuning_converts_a_prev_result_of_another_version() {
    if tern_testkit::root::skip() {
        return;
    }
    let mut node = Node::new("prevconv");
    let etc = node.private_allowlist(Some(&["net.ipv4.tcp_keepalive_.*"]));
    let pod = node.pod("prevconv");
    let list = node.chain("1.0.0", Fam::V4, vec![]);
    node.tool.write_conflist(&list).unwrap();
    let add = node.tool.add(pod.path()).unwrap();
    ok(&add, "tern ADD");
    let result = add.json.clone().unwrap();
    let before = keepalive_of(&pod);
    let mut as_040 = result.clone();
    as_040["cniVersion"] = json!("0.4.0");
    for ip in as_040["ips"].as_array_mut().unwrap() {
        ip["version"] = json!("4");
    }
    let mut as_110 = result.clone();
    as_110["cniVersion"] = json!("1.1.0");
    let mut unversioned = result.clone();
    unversioned.as_object_mut().unwrap().remove("cniVersion");
    for (config, prev) in [
        ("1.0.0", &as_040),
        ("0.4.0", &as_110),
        ("0.4.0", &unversioned),
    ] {
        let mut c = node.tuning(keepalive_sysctls());
        c["cniVersion"] = json!(config);
        c["name"] = list["name"].clone();
        c["prevResult"] = prev.clone();
        let call = |verb: &str| {
            node.call("tern-tuning", verb)
                .etc_cni(&etc)
                .container_id(node.tool.get_container_id())
                .netns(pod.path())
                .netconf(&c)
                .unwrap()
                .run()
                .unwrap()
        };
        let out = call("ADD");
        let what = format!("{} prevResult in a {config} config", prev["cniVersion"]);
        ok(&out, &what);
        let printed = out.json.clone().unwrap();
        assert_eq!(printed["cniVersion"], config, "{what}");
        assert_eq!(
            printed["ips"][0].get("version").is_some(),
            config.starts_with("0."),
            "{what}: {printed}"
        );
        assert_eq!(result_addrs(&printed), result_addrs(&result), "{what}");
        assert_ne!(keepalive_of(&pod), before, "{what}: sysctls not applied");
        ok(&call("CHECK"), &format!("{what} CHECK"));
        ok(&call("DEL"), &format!("{what} DEL"));
        assert_eq!(keepalive_of(&pod), before, "{what}: not restored");
    }
    ok(&node.tool.del(pod.path()).unwrap(), "tern DEL");
    node.assert_nothing_left(&result_addrs(&result));
}

/// DEL never strands a sandbox: a runtime calls DEL after every failed ADD, with the same netconf,
/// and retries a failed DEL forever (the kubelet keeps the sandbox and its IP meanwhile). For every
/// netconf of the corpus that ADD refuses, DEL of each plugin with the same bytes exits 0 with
/// nothing on stdout, writes nothing (ADD made nothing to release; only Debian's host-local, as
/// tern's delegate, makes its own directory and lock), and a repeated DEL exits 0 too. The count
/// is printed.
#[test]
fn del_of_every_netconf_add_refused_exits_0_and_leaves_nothing() {
    if tern_testkit::root::skip() {
        return;
    }
    let corpus = Corpus::new("hostile-del");
    let node = &corpus.node;
    let scratch = node.tool.scratch().to_path_buf();
    let (mut refused, mut tolerated) = (0, 0);
    let mut failures = Vec::new();
    for (plugin, label, netns, base) in corpus.bases() {
        for (what, bytes, _) in hostile::netconfs(&base) {
            let before = tree(&scratch);
            let call = |verb: &str| corpus.call(plugin, verb, "hostile2", &netns, &bytes);
            let add = call("ADD");
            assert!(!add.success(), "{label} {what}: ADD accepted");
            refused += 1;
            let mut ok_both = true;
            for round in ["DEL", "repeated DEL"] {
                let del = call("DEL");
                if !del.success() || !del.stdout.is_empty() {
                    ok_both = false;
                    failures.push(format!(
                        "{label} {what}: {round}: {}",
                        del.stdout_str().trim()
                    ));
                    break;
                }
            }
            let after = tree(&scratch);
            // Debian's host-local (the reference, not tern) makes its network directory and
            // `lock` on every DEL: not tern's doing, and no lease.
            let host_locals = |p: &&PathBuf| {
                base["ipam"]["type"] == "host-local"
                    && p.starts_with(node.data_dir())
                    && (p.is_dir() || p.file_name().is_some_and(|n| n == "lock"))
            };
            let new: Vec<&PathBuf> = after
                .difference(&before)
                .filter(|p| !host_locals(p))
                .collect();
            if !new.is_empty() {
                ok_both = false;
                failures.push(format!("{label} {what}: DEL wrote {new:?}"));
            }
            for p in after.difference(&before).collect::<Vec<_>>().iter().rev() {
                let _ = std::fs::remove_file(p).or_else(|_| std::fs::remove_dir(p));
            }
            if ok_both {
                tolerated += 1;
            }
        }
    }
    corpus.assert_kernel_untouched("DEL");
    node.assert_nothing_left(&[]);
    eprintln!("hostile netconfs refused at ADD: {refused}; DEL (twice) exited 0 for {tolerated}");
    assert!(
        failures.is_empty(),
        "{} of {refused} DELs failed:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

/// The sandbox that once could never be torn down: an attachment made with a valid C0 (tern
/// with tern-ipam and `ipMasq`, then tern-tuning), then its conflist changed so that ADD refuses
/// it (`"mtu": 70000`, `"ipMasqBackend": "iptables"`, tern-tuning `"mtu": "big"`). DEL through
/// libcni reads only what it needs: exit 0, everything released (lease, veth, route, state,
/// backup, masquerade rule, libcni's cache entry), and a repeated DEL exits 0.
#[test]
fn del_through_libcni_releases_despite_fields_add_refuses() {
    if tern_testkit::root::skip() {
        return;
    }
    let mut node = Node::new("del-lenient");
    let mut list = node.c0("1.0.0");
    list["plugins"][0]["ipam"]["type"] = json!("tern-ipam");
    list["plugins"][0]["ipMasq"] = json!(true);
    node.tool.write_conflist(&list).unwrap();
    let pod = node.pod("del-lenient");
    let add = node.tool.add(pod.path()).unwrap();
    ok(&add, "ADD of the valid chain");
    let addrs = result_addrs(add.json.as_ref().unwrap());
    assert!(!node.reservations().is_empty() && !node.state_files().is_empty());
    list["plugins"][0]["mtu"] = json!(70000);
    list["plugins"][0]["ipMasqBackend"] = json!("iptables");
    list["plugins"][1]["mtu"] = json!("big");
    node.tool.write_conflist(&list).unwrap();
    let other = node.pod("del-lenient-2");
    let refused = node.tool.add(other.path()).unwrap();
    assert!(!refused.success(), "ADD must refuse the changed conflist");
    for round in ["DEL", "repeated DEL"] {
        let del = node.tool.del(pod.path()).unwrap();
        ok(&del, &format!("{round} with a conflist ADD refuses"));
        node.assert_nothing_left(&addrs);
        let rules = node
            .host
            .exec(&["nft", "list", "chain", "inet", "tern_ipmasq", "masq"]);
        let text = String::from_utf8_lossy(&rules.stdout);
        assert!(
            !text.contains("comment"),
            "{round}: masquerade rules left:\n{text}"
        );
        assert!(
            files_under(&node.tool.cache_dir()).is_empty(),
            "{round}: libcni cache entry left"
        );
    }
    assert!(!pod.has_link("eth0"), "the pod end is left");
}
