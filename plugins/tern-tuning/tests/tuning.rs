//! Kernel tests of tern-tuning in throwaway namespaces: a fake host and a pod netns with a veth
//! (what a main plugin leaves behind). Most run the plugin in-process through the real CNI
//! dispatcher with an injected environment and allowlist path; a few run the built binary as a
//! runtime does. Needs root.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers outside #[test] fns

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};

use serde_json::{json, Value};
use tern_cni::Version;
use tern_testkit::exec::PluginCall;
use tern_testkit::netns::HostAndPod;
use tern_tuning::TuningPlugin;

struct Out {
    status: i32,
    json: Option<Value>,
}

impl Out {
    fn code(&self) -> Option<u64> {
        self.json
            .as_ref()
            .and_then(|j| j.get("code"))
            .and_then(Value::as_u64)
    }
    fn msg(&self) -> String {
        self.json
            .as_ref()
            .map(|j| {
                format!(
                    "{} {}",
                    j["msg"],
                    j.get("details").cloned().unwrap_or_default()
                )
            })
            .unwrap_or_default()
    }
}

struct Env {
    hp: HostAndPod,
    data: tempfile::TempDir,
    plugin: TuningPlugin,
    ifname: String,
    cid: String,
}

fn env(prefix: &str, ifname: &str) -> Env {
    static N: AtomicU32 = AtomicU32::new(0);
    let peer = format!("vtt{}", N.fetch_add(1, Ordering::Relaxed));
    let hp = HostAndPod::with_pod_link(prefix, ifname, &peer);
    let data = tempfile::tempdir().unwrap();
    let plugin = TuningPlugin {
        allowlist_path: data.path().join("no-allowlist.conf"),
    };
    Env {
        hp,
        data,
        plugin,
        ifname: ifname.to_string(),
        cid: format!("ctr-{prefix}"),
    }
}

impl Env {
    fn with_allowlist(mut self, lines: &str) -> Env {
        let p = self.data.path().join("allowlist.conf");
        std::fs::write(&p, lines).unwrap();
        self.plugin.allowlist_path = p;
        self
    }

    fn backup_dir(&self) -> PathBuf {
        self.data.path().join("backups")
    }

    fn backup_file(&self) -> PathBuf {
        self.backup_dir()
            .join(format!("{}_{}.json", self.cid, self.ifname))
    }

    fn conf(&self, version: &str, extra: Value) -> Value {
        let mut prev = json!({
            "cniVersion": version,
            "interfaces": [{"name": self.ifname, "sandbox": self.hp.pod.path()}],
            "ips": [{"address": "10.1.0.5/32", "interface": 0}],
        });
        if version.starts_with("0.") {
            prev["ips"][0]["version"] = json!("4");
        }
        let mut c = json!({
            "cniVersion": version,
            "name": "tuning-test",
            "type": "tern-tuning",
            "dataDir": self.backup_dir(),
            "prevResult": prev,
        });
        for (k, v) in extra.as_object().unwrap() {
            c[k] = v.clone();
        }
        c
    }

    fn run(&self, cmd: &str, netns: Option<&Path>, conf: &Value) -> Out {
        self.run_raw(cmd, netns, serde_json::to_vec(conf).unwrap(), "")
    }

    fn run_raw(&self, cmd: &str, netns: Option<&Path>, stdin: Vec<u8>, args: &str) -> Out {
        let mut e: HashMap<String, String> = HashMap::new();
        e.insert("CNI_COMMAND".into(), cmd.into());
        e.insert("CNI_CONTAINERID".into(), self.cid.clone());
        e.insert("CNI_IFNAME".into(), self.ifname.clone());
        e.insert("CNI_PATH".into(), "/nonexistent".into());
        e.insert("CNI_ARGS".into(), args.into());
        if let Some(ns) = netns {
            e.insert("CNI_NETNS".into(), ns.display().to_string());
        }
        let mut stdout = Vec::new();
        let mut stderr = Vec::new();
        let status = tern_cni::dispatch(
            &self.plugin,
            &e,
            &mut stdin.as_slice(),
            &mut stdout,
            &mut stderr,
        );
        let json = serde_json::from_slice(&stdout).ok();
        Out { status, json }
    }

    fn add(&self, conf: &Value) -> Out {
        self.run("ADD", Some(&self.hp.pod.path()), conf)
    }
    fn check(&self, conf: &Value) -> Out {
        self.run("CHECK", Some(&self.hp.pod.path()), conf)
    }
    fn del(&self, conf: &Value) -> Out {
        self.run("DEL", Some(&self.hp.pod.path()), conf)
    }

    fn pod_sysctl(&self, dotted: &str) -> String {
        self.hp.pod.sysctl(dotted)
    }
}

fn host_sysctl(rel: &str) -> String {
    std::fs::read_to_string(format!("/proc/sys/{rel}"))
        .unwrap()
        .trim_end()
        .to_string()
}

const KEEPALIVE: [(&str, &str); 3] = [
    ("net.ipv4.tcp_keepalive_time", "600"),
    ("net.ipv4.tcp_keepalive_intvl", "60"),
    ("net.ipv4.tcp_keepalive_probes", "5"),
];

fn keepalive() -> Value {
    let m: serde_json::Map<String, Value> = KEEPALIVE
        .iter()
        .map(|(k, v)| (k.to_string(), json!(v)))
        .collect();
    json!({ "sysctl": m })
}

/// Keepalive set in the pod netns, the host's untouched, for every
/// supported cniVersion; CHECK passes; DEL restores; a second DEL succeeds.
#[test]
fn keepalive_every_version_add_check_del() {
    for v in Version::ALL {
        let v = v.as_str();
        let e = env(&format!("tt-ka{}", v.replace('.', "")), "eth0");
        let host_before = host_sysctl("net/ipv4/tcp_keepalive_time");
        let fake_host_before = e.hp.host.sysctl("net.ipv4.tcp_keepalive_time");
        let pod_before: Vec<String> = KEEPALIVE.iter().map(|(k, _)| e.pod_sysctl(k)).collect();
        let conf = e.conf(v, keepalive());

        let out = e.add(&conf);
        assert_eq!(out.status, 0, "{v}: {}", out.msg());
        let result = out.json.unwrap();
        assert_eq!(result["cniVersion"], v);
        assert_eq!(
            result["interfaces"][0]["name"], "eth0",
            "{v}: prevResult not passed through"
        );
        assert_eq!(result["ips"][0]["address"], "10.1.0.5/32");
        assert_eq!(
            result["ips"][0].get("version").is_some(),
            v.starts_with("0."),
            "{v}"
        );
        for (k, val) in KEEPALIVE {
            assert_eq!(e.pod_sysctl(k), val, "{v}: {k}");
        }
        assert_eq!(
            host_sysctl("net/ipv4/tcp_keepalive_time"),
            host_before,
            "{v}: host changed"
        );
        assert_eq!(
            e.hp.host.sysctl("net.ipv4.tcp_keepalive_time"),
            fake_host_before
        );
        assert!(e.backup_file().exists());
        let mode = std::os::unix::fs::PermissionsExt::mode(
            &std::fs::metadata(e.backup_file()).unwrap().permissions(),
        );
        assert_eq!(mode & 0o777, 0o600);

        if Version::parse(v).unwrap().allows_check() {
            let out = e.check(&conf);
            assert_eq!(out.status, 0, "{v}: CHECK {}", out.msg());
        }

        let out = e.del(&conf);
        assert_eq!(out.status, 0, "{v}: DEL {}", out.msg());
        let pod_after: Vec<String> = KEEPALIVE.iter().map(|(k, _)| e.pod_sysctl(k)).collect();
        assert_eq!(pod_after, pod_before, "{v}: DEL did not restore");
        assert!(!e.backup_file().exists());
        assert_eq!(e.del(&conf).status, 0, "{v}: second DEL");
    }
}

#[test]
fn missing_prev_result_is_an_error_and_nothing_is_written() {
    let e = env("tt-noprev", "eth0");
    let before = e.pod_sysctl("net.ipv4.tcp_keepalive_time");
    let mut conf = e.conf("1.0.0", keepalive());
    conf.as_object_mut().unwrap().remove("prevResult");
    let out = e.add(&conf);
    assert_eq!(out.code(), Some(7), "{}", out.msg());
    assert!(out.msg().contains("prevResult"));
    assert_eq!(e.pod_sysctl("net.ipv4.tcp_keepalive_time"), before);
}

/// IFNAME keys with a dotted interface name and a plain one, ADD and CHECK; CHECK names
/// key, expected and current after a change; slash form works the same way.
#[test]
fn ifname_keys_with_dotted_and_plain_names() {
    for ifname in ["eth0.100", "eth0"] {
        let e = env(&format!("tt-if{}", ifname.len()), ifname).with_allowlist(
            "net\\.ipv4\\.conf\\.IFNAME\\.rp_filter\nnet\\.ipv6\\.conf\\.IFNAME\\.accept_ra\nnet/ipv4/conf/IFNAME/arp_ignore\n",
        );
        let conf = e.conf(
            "1.0.0",
            json!({"sysctl": {
                "net.ipv4.conf.IFNAME.rp_filter": "2",
                "net.ipv6.conf.IFNAME.accept_ra": "0",
                "net/ipv4/conf/IFNAME/arp_ignore": "1",
            }}),
        );
        let out = e.add(&conf);
        assert_eq!(out.status, 0, "{ifname}: {}", out.msg());
        let dir = format!("/proc/sys/net/ipv4/conf/{ifname}");
        assert_eq!(
            e.hp.pod
                .exec_ok(&["cat", &format!("{dir}/rp_filter")])
                .trim(),
            "2"
        );
        assert_eq!(
            e.hp.pod
                .exec_ok(&["cat", &format!("{dir}/arp_ignore")])
                .trim(),
            "1"
        );
        assert_eq!(
            e.hp.pod
                .exec_ok(&[
                    "cat",
                    &format!("/proc/sys/net/ipv6/conf/{ifname}/accept_ra")
                ])
                .trim(),
            "0"
        );
        assert_eq!(e.check(&conf).status, 0, "{ifname}");

        e.hp.pod
            .set_sysctl(&format!("net/ipv4/conf/{ifname}/rp_filter"), "0");
        let out = e.check(&conf);
        assert_ne!(out.status, 0);
        assert_eq!(out.code(), Some(106), "{ifname}: {}", out.msg());
        let msg = out.msg();
        assert!(
            msg.contains("net.ipv4.conf.IFNAME.rp_filter")
                && msg.contains("expected \\\"2\\\"")
                && msg.contains("current \\\"0\\\""),
            "{ifname}: {msg}"
        );
        assert_eq!(e.del(&conf).status, 0);
        assert_eq!(
            e.hp.pod
                .exec_ok(&["cat", &format!("{dir}/arp_ignore")])
                .trim(),
            "0"
        );
    }
}

/// The allowlist cannot be bypassed.
#[test]
fn allowlist_cannot_be_bypassed() {
    // (a) an allowed key with a disallowed one: nothing written, not even the allowed key.
    let e = env("tt-al-a", "eth0");
    let before = e.pod_sysctl("net.ipv4.tcp_keepalive_time");
    // A new netns inherits ip_forward from the initial one (devconf_inherit_init_net=0).
    let forward_before = e.pod_sysctl("net.ipv4.ip_forward");
    let flipped = if forward_before == "1" { "0" } else { "1" };
    let out = e.add(&e.conf(
        "1.0.0",
        json!({"sysctl": {"net.ipv4.tcp_keepalive_time": "601", "net.ipv4.ip_forward": flipped}}),
    ));
    assert_eq!(out.code(), Some(7), "{}", out.msg());
    assert!(
        out.msg().contains("net.ipv4.ip_forward") && out.msg().contains("built-in"),
        "{}",
        out.msg()
    );
    assert_eq!(e.pod_sysctl("net.ipv4.tcp_keepalive_time"), before);
    assert_eq!(e.pod_sysctl("net.ipv4.ip_forward"), forward_before);
    assert!(!e.backup_file().exists());

    // (b) the allowlist path is a directory, or holds an invalid regex: fail closed.
    let mut e = env("tt-al-b", "eth0");
    let dir = e.data.path().join("allowlist-dir");
    std::fs::create_dir(&dir).unwrap();
    e.plugin.allowlist_path = dir;
    let out = e.add(&e.conf("1.0.0", keepalive()));
    assert_eq!(out.code(), Some(7), "{}", out.msg());
    assert!(out.msg().contains("directory"), "{}", out.msg());
    let e = e.with_allowlist("net\\.ipv4\\.tcp_keepalive_time\nnet.ipv4.(\n");
    let out = e.add(&e.conf("1.0.0", keepalive()));
    assert_eq!(out.code(), Some(7), "{}", out.msg());
    assert!(out.msg().contains("line 2"), "{}", out.msg());
    assert_eq!(e.pod_sysctl("net.ipv4.tcp_keepalive_time"), before);

    // (c) the same key twice in the raw JSON.
    let e = env("tt-al-c", "eth0");
    let raw = serde_json::to_string(&e.conf("1.0.0", json!({}))).unwrap();
    let raw = raw.replacen(
        '{',
        r#"{"sysctl":{"net.ipv4.tcp_keepalive_time":"602","net.ipv4.tcp_keepalive_time":"603"},"#,
        1,
    );
    let out = e.run_raw("ADD", Some(&e.hp.pod.path()), raw.into_bytes(), "");
    assert_eq!(out.code(), Some(7), "{}", out.msg());
    assert!(out.msg().contains("duplicated"), "{}", out.msg());
    assert_eq!(e.pod_sysctl("net.ipv4.tcp_keepalive_time"), before);

    // (d) escapes under a sloppy `net.*` line.
    let e = env("tt-al-d", "eth0").with_allowlist("net.*\n");
    for key in [
        "kernel.hostname",
        "net/../kernel/hostname",
        "net.ipv4/../../kernel/hostname",
        "net..kernel.hostname",
    ] {
        let out = e.add(&e.conf("1.0.0", json!({"sysctl": {key: "pwned"}})));
        assert_eq!(out.code(), Some(7), "{key}: {}", out.msg());
    }
    // IFNAME with ifname `..`: refused (the dispatcher already refuses such an ifname).
    let mut dots = env("tt-al-e", "eth0").with_allowlist("net.*\n");
    dots.ifname = "..".into();
    let out = dots.add(&dots.conf(
        "1.0.0",
        json!({"sysctl": {"net.ipv4.conf.IFNAME.rp_filter": "2"}}),
    ));
    assert_ne!(out.status, 0);
    assert!(matches!(out.code(), Some(4) | Some(7)), "{}", out.msg());
    // A key with a newline, a value with a newline, a host-only key.
    for (k, v) in [
        ("net.ipv4.tcp_syncookies\nkernel.hostname", "1"),
        ("net.ipv4.tcp_syncookies", "1\nkernel.hostname=x"),
        ("net.core.netdev_max_backlog", "1001"),
    ] {
        let out = e.add(&e.conf("1.0.0", json!({"sysctl": {k: v}})));
        assert_eq!(out.code(), Some(7), "{k:?}={v:?}: {}", out.msg());
    }
    assert_eq!(host_sysctl("kernel/hostname"), nix_hostname());

    // (e) only allowed keys: succeeds.
    let e = env("tt-al-f", "eth0");
    assert_eq!(e.add(&e.conf("1.0.0", keepalive())).status, 0);
}

fn nix_hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .unwrap()
        .trim_end()
        .to_string()
}

/// Link attributes: applied, reported (MAC in the result), checked, restored.
#[test]
fn link_attributes_applied_checked_restored() {
    let e = env("tt-link", "eth0");
    let before = e.hp.pod.ip(&["-d", "link", "show", "eth0"]);
    let conf = e.conf(
        "1.1.0",
        json!({"mac": "0a:58:0a:01:00:05", "mtu": 1300, "promisc": true, "allmulti": true, "txQLen": 123}),
    );
    let out = e.add(&conf);
    assert_eq!(out.status, 0, "{}", out.msg());
    assert_eq!(
        out.json.unwrap()["interfaces"][0]["mac"],
        "0a:58:0a:01:00:05"
    );
    let shown = e.hp.pod.ip(&["-d", "link", "show", "eth0"]);
    for want in [
        "0a:58:0a:01:00:05",
        "mtu 1300",
        "PROMISC",
        "ALLMULTI",
        "qlen 123",
    ] {
        assert!(shown.contains(want), "{want} missing: {shown}");
    }
    assert_eq!(e.check(&conf).status, 0);
    e.hp.pod.ip(&["link", "set", "eth0", "mtu", "1400"]);
    let out = e.check(&conf);
    assert_eq!(out.code(), Some(106), "{}", out.msg());
    assert!(
        out.msg().contains("mtu: expected 1300, current 1400"),
        "{}",
        out.msg()
    );

    assert_eq!(e.del(&conf).status, 0);
    let after = e.hp.pod.ip(&["-d", "link", "show", "eth0"]);
    let strip = |s: &str| {
        s.split_whitespace()
            .filter(|w| !w.starts_with("link-netns"))
            .collect::<Vec<_>>()
            .join(" ")
    };
    assert!(
        !after.contains("PROMISC") && !after.contains("ALLMULTI") && after.contains("mtu 1500"),
        "{after}"
    );
    let mac_before = before
        .split("link/ether ")
        .nth(1)
        .unwrap()
        .split(' ')
        .next()
        .unwrap()
        .to_string();
    assert!(after.contains(&mac_before), "mac not restored: {after}");
    assert!(strip(&after).contains("qlen 1000"), "{after}");
}

/// A kernel-rejected sysctl value: code 103 naming key, value and errno; the earlier sysctl is
/// rolled back, no link attribute changed, no backup left.
#[test]
fn rejected_sysctl_rolls_back_everything() {
    let e = env("tt-rb1", "eth0");
    let before = e.pod_sysctl("net.ipv4.tcp_keepalive_time");
    let conf = e.conf(
        "1.0.0",
        json!({"sysctl": {"net.ipv4.tcp_keepalive_time": "604", "net.ipv4.tcp_fin_timeout": "soon"}, "mtu": 1280}),
    );
    let out = e.add(&conf);
    assert_eq!(out.code(), Some(103), "{}", out.msg());
    let msg = out.msg();
    assert!(
        msg.contains("net.ipv4.tcp_fin_timeout") && msg.contains("soon") && msg.contains("EINVAL"),
        "{msg}"
    );
    assert_eq!(e.pod_sysctl("net.ipv4.tcp_keepalive_time"), before);
    assert!(e.hp.pod.ip(&["link", "show", "eth0"]).contains("mtu 1500"));
    assert!(!e.backup_file().exists());
}

/// A link attribute the kernel rejects after sysctls and the MAC were applied: all undone.
#[test]
fn failed_link_attribute_undoes_sysctls_and_earlier_attributes() {
    let e = env("tt-rb2", "eth0");
    let before = e.pod_sysctl("net.ipv4.tcp_keepalive_time");
    let mac_before = e.hp.pod.ip(&["link", "show", "eth0"]);
    let conf = e.conf(
        "1.0.0",
        json!({"sysctl": {"net.ipv4.tcp_keepalive_time": "605"}, "mac": "0a:58:0a:01:00:06", "mtu": 70000}),
    );
    let out = e.add(&conf);
    assert_eq!(out.code(), Some(101), "{}", out.msg());
    assert_eq!(e.pod_sysctl("net.ipv4.tcp_keepalive_time"), before);
    let now = e.hp.pod.ip(&["link", "show", "eth0"]);
    assert!(!now.contains("0a:58:0a:01:00:06"), "{now}");
    assert_eq!(
        mac_before
            .split("link/ether")
            .nth(1)
            .map(|s| s.split_whitespace().next()),
        now.split("link/ether")
            .nth(1)
            .map(|s| s.split_whitespace().next())
    );
    assert!(!e.backup_file().exists());
}

/// DEL succeeds when the netns is gone (backup removed), when CNI_NETNS is empty, and when the
/// link is gone.
#[test]
fn del_when_things_are_gone() {
    let e = env("tt-gone", "eth0");
    let conf = e.conf(
        "1.0.0",
        json!({"sysctl": {"net.ipv4.tcp_keepalive_time": "606"}, "mtu": 1400}),
    );
    assert_eq!(e.add(&conf).status, 0);
    // Link gone: sysctls still restored, attributes skipped.
    e.hp.pod.ip(&["link", "del", "eth0"]);
    assert!(!e.hp.pod.has_link("eth0"));
    let out = e.del(&conf);
    assert_eq!(out.status, 0, "{}", out.msg());
    assert_eq!(e.pod_sysctl("net.ipv4.tcp_keepalive_time"), "7200");
    assert!(!e.backup_file().exists());

    let e = env("tt-gone2", "eth0");
    assert_eq!(e.add(&conf_for(&e)).status, 0);
    let out = e.run(
        "DEL",
        Some(Path::new("/run/netns/tern-gone-for-good")),
        &conf_for(&e),
    );
    assert_eq!(out.status, 0, "{}", out.msg());
    assert!(!e.backup_file().exists());

    let e = env("tt-gone3", "eth0");
    assert_eq!(e.add(&conf_for(&e)).status, 0);
    assert_eq!(e.run("DEL", None, &conf_for(&e)).status, 0);
    assert!(!e.backup_file().exists());
}

fn conf_for(e: &Env) -> Value {
    e.conf("1.0.0", keepalive())
}

/// A repeated ADD keeps the original values in the backup, so DEL restores the pre-tuning state.
#[test]
fn repeated_add_keeps_original_backup() {
    let e = env("tt-twice", "eth0");
    let c1 = e.conf(
        "1.0.0",
        json!({"sysctl": {"net.ipv4.tcp_keepalive_time": "607"}}),
    );
    let c2 = e.conf(
        "1.0.0",
        json!({"sysctl": {"net.ipv4.tcp_keepalive_time": "608"}}),
    );
    assert_eq!(e.add(&c1).status, 0);
    assert_eq!(e.add(&c2).status, 0);
    assert_eq!(e.pod_sysctl("net.ipv4.tcp_keepalive_time"), "608");
    assert_eq!(e.del(&c2).status, 0);
    assert_eq!(e.pod_sysctl("net.ipv4.tcp_keepalive_time"), "7200");
}

/// The built binary, as a runtime runs it (default allowlist path; absent here → built-in).
#[test]
fn binary_add_and_validate() {
    assert!(
        !Path::new(tern_net::sysctl::DEFAULT_ALLOWLIST_PATH).exists(),
        "this test expects no allowlist file on the machine"
    );
    let e = env("tt-bin", "eth0");
    let bin = env!("CARGO_BIN_EXE_tern-tuning");
    let conf = e.conf("1.0.0", keepalive());
    let out = PluginCall::new(bin, "ADD")
        .netns(e.hp.pod.path())
        .container_id(&e.cid)
        .netconf(&conf)
        .unwrap()
        .run()
        .unwrap();
    assert!(out.success(), "{}", out.describe());
    assert_eq!(e.pod_sysctl("net.ipv4.tcp_keepalive_time"), "600");
    let out = PluginCall::new(bin, "DEL")
        .netns(e.hp.pod.path())
        .container_id(&e.cid)
        .netconf(&conf)
        .unwrap()
        .run()
        .unwrap();
    assert!(out.success(), "{}", out.describe());
    assert_eq!(e.pod_sysctl("net.ipv4.tcp_keepalive_time"), "7200");

    // validate: a good conflist and a bad one.
    let dir = tempfile::tempdir().unwrap();
    let good = dir.path().join("good.conflist");
    std::fs::write(
        &good,
        serde_json::to_vec(&json!({"cniVersion": "1.0.0", "name": "n", "plugins": [
            {"type": "ptp", "ipam": {"type": "host-local"}},
            {"type": "tern-tuning", "sysctl": {"net.ipv4.tcp_keepalive_time": "600"}}]}))
        .unwrap(),
    )
    .unwrap();
    let o = std::process::Command::new(bin)
        .args(["validate", good.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stdout));
    let bad = dir.path().join("bad.conflist");
    std::fs::write(
        &bad,
        serde_json::to_vec(&json!({"cniVersion": "1.0.0", "name": "n", "plugins": [
            {"type": "tuning", "sysctl": {"net.ipv4.ip_forward": "1", "kernel.hostname": "x", "net.ipv4.tcp_fin_timeout": "1\n"}}]}))
        .unwrap(),
    )
    .unwrap();
    let o = std::process::Command::new(bin)
        .args(["validate", bad.to_str().unwrap()])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1));
    let text = String::from_utf8_lossy(&o.stdout);
    assert_eq!(text.lines().count(), 3, "{text}");
    assert!(
        text.contains("plugins[0] (tuning)")
            && text.contains("net.ipv4.ip_forward")
            && text.contains("kernel.hostname"),
        "{text}"
    );
    let o = std::process::Command::new(bin)
        .args(["validate"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
}

/// DEL needs only the container ID, ifname and `dataDir` (CNI spec "DEL": complete without error
/// even if resources are missing). Fields of the wrong type, duplicated sysctl keys and unknown
/// `CNI_ARGS` fail ADD but must not stop DEL, or libcni would stop the chain's DEL there and the
/// main plugin's veth, state and lease would stay.
#[test]
fn del_ignores_fields_it_does_not_need() {
    let e = env("tt-delmal", "eth0");
    let before = e.pod_sysctl("net.ipv4.tcp_keepalive_time");
    let good = e.conf("1.0.0", keepalive());
    assert_eq!(e.add(&good).status, 0);
    assert_eq!(e.pod_sysctl("net.ipv4.tcp_keepalive_time"), "600");

    let mut bad = good.clone();
    bad["sysctl"]["net.ipv4.tcp_keepalive_time"] = json!(600);
    bad["mac"] = json!(5);
    bad["mtu"] = json!("big");
    bad["promisc"] = json!("yes");
    bad["args"] = json!({"cni": {"sysctl": "none"}});
    let out = e.add(&bad);
    assert_eq!(out.code(), Some(6), "{}", out.msg());
    assert!(e.backup_file().exists(), "a failed ADD removed the backup");

    let out = e.run_raw(
        "DEL",
        Some(&e.hp.pod.path()),
        serde_json::to_vec(&bad).unwrap(),
        "FOO=1",
    );
    assert_eq!(out.status, 0, "DEL: {}", out.msg());
    assert_eq!(e.pod_sysctl("net.ipv4.tcp_keepalive_time"), before);
    assert!(!e.backup_file().exists());

    // Duplicated sysctl keys: refused by ADD (7), ignored by DEL.
    assert_eq!(e.add(&good).status, 0);
    let raw = serde_json::to_string(&good).unwrap().replacen(
        '{',
        r#"{"sysctl":{"net.ipv4.tcp_fin_timeout":"30","net.ipv4.tcp_fin_timeout":"31"},"#,
        1,
    );
    let out = e.run_raw("DEL", Some(&e.hp.pod.path()), raw.into_bytes(), "");
    assert_eq!(out.status, 0, "DEL with duplicated keys: {}", out.msg());
    assert_eq!(e.pod_sysctl("net.ipv4.tcp_keepalive_time"), before);
    assert!(!e.backup_file().exists());

    // A dataDir of the wrong type: no ADD can have made a backup with it; nothing to do.
    let mut odd = bad.clone();
    odd["dataDir"] = json!(7);
    let out = e.del(&odd);
    assert_eq!(out.status, 0, "DEL with dataDir 7: {}", out.msg());
}

/// A backup somebody tampered with: invalid entries (a key escaping `/proc/sys/net`, a bad MAC)
/// are skipped with a warning naming them, never written; the valid ones are restored; DEL
/// succeeds and removes the backup (the binary, so the warning on stderr can be read).
#[test]
fn del_skips_invalid_backup_entries_and_restores_the_rest() {
    let e = env("tt-tamper", "eth0");
    let before = e.pod_sysctl("net.ipv4.tcp_keepalive_time");
    let domain_before = host_sysctl("kernel/domainname");
    let conf = e.conf(
        "1.0.0",
        json!({"sysctl": {"net.ipv4.tcp_keepalive_time": "609"}, "mtu": 1400}),
    );
    assert_eq!(e.add(&conf).status, 0);
    let mut saved: Value =
        serde_json::from_slice(&std::fs::read(e.backup_file()).unwrap()).unwrap();
    let list = saved["sysctl"].as_array_mut().unwrap();
    list.insert(0, json!(["net/../kernel/domainname", "pwned"]));
    list.push(json!(["kernel.domainname", "pwned2"]));
    saved["mac"] = json!("not-a-mac");
    std::fs::write(e.backup_file(), serde_json::to_vec(&saved).unwrap()).unwrap();

    let bin = env!("CARGO_BIN_EXE_tern-tuning");
    let out = PluginCall::new(bin, "DEL")
        .netns(e.hp.pod.path())
        .container_id(&e.cid)
        .netconf(&conf)
        .unwrap()
        .run()
        .unwrap();
    assert!(out.success(), "{}", out.describe());
    for named in ["net/../kernel/domainname", "kernel.domainname", "not-a-mac"] {
        assert!(out.stderr.contains(named), "{named}: {}", out.describe());
    }
    assert_eq!(host_sysctl("kernel/domainname"), domain_before);
    assert_eq!(e.pod_sysctl("net.ipv4.tcp_keepalive_time"), before);
    assert!(e.hp.pod.ip(&["link", "show", "eth0"]).contains("mtu 1500"));
    assert!(!e.backup_file().exists());
}

/// `validate --allowlist PATH` with a PATH that does not exist is a usage error naming the
/// path (exit 2), not a silent fall back to the built-in list (kept for the default path).
#[test]
fn validate_explicit_missing_allowlist_is_an_error() {
    let bin = env!("CARGO_BIN_EXE_tern-tuning");
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("good.conflist");
    std::fs::write(
        &file,
        serde_json::to_vec(&json!({"cniVersion": "1.0.0", "name": "n", "plugins": [
            {"type": "tern-tuning", "sysctl": {"net.ipv4.tcp_keepalive_time": "600"}}]}))
        .unwrap(),
    )
    .unwrap();
    let missing = dir.path().join("nonexistent-allowlist.conf");
    let o = std::process::Command::new(bin)
        .args(["validate", "--allowlist"])
        .arg(&missing)
        .arg(&file)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains(missing.to_str().unwrap()),
        "message does not name the path: {stderr}"
    );
    // An existing explicit allowlist is used.
    let list = dir.path().join("allowlist.conf");
    std::fs::write(&list, "net\\.ipv4\\.tcp_keepalive_time\n").unwrap();
    let o = std::process::Command::new(bin)
        .args(["validate", "--allowlist"])
        .arg(&list)
        .arg(&file)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert_eq!(o.status.code(), Some(0), "{stdout}");
    assert!(stdout.contains(list.to_str().unwrap()), "{stdout}");
}

/// The one case DEL keeps the backup and fails: a *valid* entry the kernel refuses on a sysctl
/// that still exists. The other entries are restored anyway; once the entry is fixed, a retried
/// DEL finishes and removes the backup.
#[test]
fn del_keeps_backup_when_a_valid_restore_fails() {
    let e = env("tt-keep", "eth0");
    let before = e.pod_sysctl("net.ipv4.tcp_keepalive_time");
    let conf = e.conf(
        "1.0.0",
        json!({"sysctl": {"net.ipv4.tcp_keepalive_time": "610", "net.ipv4.tcp_fin_timeout": "20"}}),
    );
    assert_eq!(e.add(&conf).status, 0);
    let mut saved: Value =
        serde_json::from_slice(&std::fs::read(e.backup_file()).unwrap()).unwrap();
    let good = saved["sysctl"].clone();
    // A well-formed value the kernel rejects (EINVAL).
    saved["sysctl"][1] = json!(["net.ipv4.tcp_fin_timeout", "soon"]);
    std::fs::write(e.backup_file(), serde_json::to_vec(&saved).unwrap()).unwrap();
    let out = e.del(&conf);
    assert_eq!(out.code(), Some(5), "{}", out.msg());
    assert!(
        out.msg().contains("net.ipv4.tcp_fin_timeout") && out.msg().contains("kept"),
        "{}",
        out.msg()
    );
    assert_eq!(e.pod_sysctl("net.ipv4.tcp_keepalive_time"), before);
    assert!(e.backup_file().exists());

    saved["sysctl"] = good;
    std::fs::write(e.backup_file(), serde_json::to_vec(&saved).unwrap()).unwrap();
    assert_eq!(e.del(&conf).status, 0);
    assert!(!e.backup_file().exists());
}
