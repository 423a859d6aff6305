//! Kernel tests of tern-tuning's CNI 1.1.0 verbs (GC, STATUS) and of a sysctl-only ADD into a
//! netns without `CNI_IFNAME`, in throwaway namespaces, through the real dispatcher. Needs root.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers outside #[test] fns

use std::collections::HashMap;
use std::path::PathBuf;

use serde_json::{json, Value};
use tern_testkit::netns::{HostAndPod, TestNetns};
use tern_tuning::TuningPlugin;

const KEEPALIVE_TIME: &str = "net.ipv4.tcp_keepalive_time";

/// One run through the dispatcher: exit status and stdout JSON.
struct Out {
    status: i32,
    json: Option<Value>,
}

impl Out {
    fn code(&self) -> Option<u64> {
        self.json.as_ref().and_then(|j| j["code"].as_u64())
    }
    fn text(&self) -> String {
        self.json
            .as_ref()
            .map(ToString::to_string)
            .unwrap_or_default()
    }
}

/// A data dir (backups, allowlist) and the plugin pointed at an allowlist inside it.
struct Fixture {
    data: tempfile::TempDir,
    plugin: TuningPlugin,
}

fn fixture() -> Fixture {
    let data = tempfile::tempdir().unwrap();
    let allowlist = data.path().join("allowlist.conf");
    std::fs::write(
        &allowlist,
        "net\\.ipv4\\.tcp_keepalive_time\nnet\\.ipv4\\.conf\\.IFNAME\\.rp_filter\n",
    )
    .unwrap();
    let plugin = TuningPlugin {
        allowlist_path: allowlist,
    };
    Fixture { data, plugin }
}

impl Fixture {
    fn backups(&self) -> PathBuf {
        self.data.path().join("backups")
    }

    fn backup(&self, cid: &str, ifname: &str) -> PathBuf {
        self.backups().join(format!("{cid}_{ifname}.json"))
    }

    fn conf(&self, network: &str, extra: Value) -> Value {
        let mut c = json!({
            "cniVersion": "1.1.0",
            "name": network,
            "type": "tern-tuning",
            "dataDir": self.backups(),
        });
        for (k, v) in extra.as_object().unwrap() {
            c[k] = v.clone();
        }
        c
    }

    fn run(&self, cmd: &str, vars: &[(&str, &str)], conf: &Value) -> Out {
        let mut e: HashMap<String, String> = HashMap::new();
        e.insert("CNI_COMMAND".into(), cmd.into());
        e.insert("CNI_PATH".into(), "/nonexistent".into());
        for (k, v) in vars {
            e.insert((*k).into(), (*v).into());
        }
        let (mut stdout, mut stderr) = (Vec::new(), Vec::new());
        let stdin = serde_json::to_vec(conf).unwrap();
        let status = tern_cni::dispatch(
            &self.plugin,
            &e,
            &mut stdin.as_slice(),
            &mut stdout,
            &mut stderr,
        );
        Out {
            status,
            json: serde_json::from_slice(&stdout).ok(),
        }
    }

    /// ADD (or CHECK, DEL) of attachment `cid`/`ifname` in `pod`, with a prevResult naming it.
    fn verb(&self, cmd: &str, pod: &TestNetns, cid: &str, ifname: &str, conf: &Value) -> Out {
        let mut conf = conf.clone();
        conf["prevResult"] = json!({
            "cniVersion": "1.1.0",
            "interfaces": [{"name": ifname, "sandbox": pod.path()}],
            "ips": [{"address": "10.1.0.5/32", "interface": 0}],
        });
        let ns = pod.path().display().to_string();
        let vars = [
            ("CNI_CONTAINERID", cid),
            ("CNI_IFNAME", ifname),
            ("CNI_NETNS", ns.as_str()),
        ];
        self.run(cmd, &vars, &conf)
    }

    fn gc(&self, conf: &Value, valid: Option<Value>) -> Out {
        let mut conf = conf.clone();
        if let Some(v) = valid {
            conf["cni.dev/valid-attachments"] = v;
        }
        self.run("GC", &[], &conf)
    }
}

fn keepalive(value: &str) -> Value {
    json!({"sysctl": {KEEPALIVE_TIME: value}})
}

/// A sysctl-only configuration works on the netns alone, as the reference's does: ADD, CHECK
/// and DEL succeed in a pod netns that has no `CNI_IFNAME`. A key with `IFNAME`, or a link
/// attribute, still needs the interface: code 7 and nothing written.
#[test]
fn sysctl_only_needs_no_interface() {
    if tern_testkit::root::skip() {
        return;
    }
    let f = fixture();
    let pod = TestNetns::new("ttg-noif");
    let before = pod.sysctl(KEEPALIVE_TIME);
    let conf = f.conf("n1", keepalive("611"));
    let out = f.verb("ADD", &pod, "c1", "eth0", &conf);
    assert_eq!(
        out.status,
        0,
        "sysctl-only ADD without eth0: {}",
        out.text()
    );
    assert_eq!(pod.sysctl(KEEPALIVE_TIME), "611");
    let out = f.verb("CHECK", &pod, "c1", "eth0", &conf);
    assert_eq!(out.status, 0, "CHECK: {}", out.text());
    pod.set_sysctl("net/ipv4/tcp_keepalive_time", "612");
    let out = f.verb("CHECK", &pod, "c1", "eth0", &conf);
    assert_eq!(
        out.code(),
        Some(106),
        "CHECK must see the drift: {}",
        out.text()
    );
    let out = f.verb("DEL", &pod, "c1", "eth0", &conf);
    assert_eq!(out.status, 0, "DEL: {}", out.text());
    assert_eq!(pod.sysctl(KEEPALIVE_TIME), before, "DEL did not restore");
    assert!(!f.backup("c1", "eth0").exists());

    for extra in [
        json!({"sysctl": {KEEPALIVE_TIME: "613", "net.ipv4.conf.IFNAME.rp_filter": "2"}}),
        json!({"sysctl": {KEEPALIVE_TIME: "613"}, "mtu": 1400}),
    ] {
        let conf = f.conf("n1", extra.clone());
        let out = f.verb("ADD", &pod, "c2", "eth0", &conf);
        assert_eq!(out.code(), Some(7), "{extra}: {}", out.text());
        assert!(out.text().contains("eth0 not found"), "{}", out.text());
        assert_eq!(
            pod.sysctl(KEEPALIVE_TIME),
            before,
            "{extra}: a sysctl was written"
        );
        assert!(
            !f.backup("c2", "eth0").exists(),
            "{extra}: a backup was written"
        );
        let out = f.verb("CHECK", &pod, "c2", "eth0", &conf);
        assert_eq!(out.code(), Some(106), "{extra}: CHECK {}", out.text());
    }
}

/// GC keeps the backups of listed attachments and removes this network's others (and temp
/// files of killed writers), restoring nothing; other networks' backups and backups that name
/// no network (older builds, the reference plugin) are left alone; without a list nothing goes;
/// an empty list collects every backup of the network, also of a netns that is gone.
#[test]
fn gc_keeps_listed_attachments_and_removes_the_rest() {
    if tern_testkit::root::skip() {
        return;
    }
    let f = fixture();
    let hp = HostAndPod::with_pod_link("ttg-gc", "eth0", "vttgc0");
    let gone = TestNetns::new("ttg-gone");
    let conf = f.conf("n1", keepalive("621"));
    let other = f.conf("n2", keepalive("622"));
    for (cid, pod, c) in [
        ("keep", &hp.pod, &conf),
        ("stale", &hp.pod, &conf),
        ("gone", &gone, &conf),
        ("othernet", &hp.pod, &other),
    ] {
        let ifname = if cid == "stale" { "net1" } else { "eth0" };
        let out = f.verb("ADD", pod, cid, ifname, c);
        assert_eq!(out.status, 0, "ADD {cid}: {}", out.text());
        assert!(f.backup(cid, ifname).exists());
    }
    drop(gone);
    let legacy = f.backup("legacy", "eth0");
    std::fs::write(
        &legacy,
        br#"{"sysctl": [["net.ipv4.tcp_keepalive_time", "7200"]]}"#,
    )
    .unwrap();
    // 4194305 is above the kernel's largest pid_max: that writer cannot be running.
    // The unlocked lock file a SIGKILLed ADD leaves (tern_node::lock).
    let stale_lock = f.backups().join("stale_net1.lock");
    std::fs::write(&stale_lock, b"").unwrap();
    let dead_temp = f.backups().join(".stale_net1.json.tmp-4194305-0");
    std::fs::write(&dead_temp, b"{\"sysc").unwrap();
    let tuned = hp.pod.sysctl(KEEPALIVE_TIME);

    let out = f.gc(&conf, None);
    assert_eq!(out.status, 0, "GC without a list: {}", out.text());
    for (cid, ifname) in [("keep", "eth0"), ("stale", "net1"), ("gone", "eth0")] {
        assert!(f.backup(cid, ifname).exists(), "no list, yet {cid} went");
    }

    let valid = json!([{"containerID": "keep", "ifname": "eth0"}, {"containerID": "stale", "ifname": "eth0"}]);
    let out = f.gc(&conf, Some(valid));
    assert_eq!(out.status, 0, "GC: {}", out.text());
    assert!(
        f.backup("keep", "eth0").exists(),
        "a listed attachment's backup went"
    );
    assert!(
        !f.backup("stale", "net1").exists(),
        "an unlisted ifname's backup stayed"
    );
    assert!(
        !f.backup("gone", "eth0").exists(),
        "the gone netns's backup stayed"
    );
    assert!(!dead_temp.exists(), "a killed writer's temp file stayed");
    assert!(
        !stale_lock.exists(),
        "a collected attachment's lock file stayed"
    );
    assert!(
        f.backup("othernet", "eth0").exists(),
        "another network's backup went"
    );
    assert!(legacy.exists(), "a backup naming no network went");
    assert_eq!(hp.pod.sysctl(KEEPALIVE_TIME), tuned, "GC restored a sysctl");

    let out = f.gc(&conf, Some(json!([])));
    assert_eq!(out.status, 0, "GC []: {}", out.text());
    assert!(
        !f.backup("keep", "eth0").exists(),
        "[] means nothing is valid"
    );
    assert!(f.backup("othernet", "eth0").exists());
    // GC needs 1.1.0, like every plugin's.
    let mut old = conf.clone();
    old["cniVersion"] = json!("1.0.0");
    assert_eq!(f.gc(&old, Some(json!([]))).code(), Some(1));
}

/// STATUS: ready with a usable configuration; code 7 for one every ADD refuses; 50 when the
/// allowlist file or `dataDir` is unusable. It creates nothing.
#[test]
fn status_says_whether_add_can_work() {
    if tern_testkit::root::skip() {
        return;
    }
    let mut f = fixture();
    let conf = f.conf("n1", keepalive("631"));
    let out = f.run("STATUS", &[], &conf);
    assert_eq!(out.status, 0, "STATUS: {}", out.text());
    assert!(!f.backups().exists(), "STATUS created dataDir");
    let ifname_key = f.conf(
        "n1",
        json!({"sysctl": {"net.ipv4.conf.IFNAME.rp_filter": "2"}}),
    );
    assert_eq!(f.run("STATUS", &[], &ifname_key).status, 0);

    for bad in [
        json!({"sysctl": {"kernel.hostname": "x"}}),
        json!({"sysctl": {"net.core.somaxconn": "1024"}}),
        json!({"mac": "ff:ff:ff:ff:ff:ff"}),
        json!({"mtu": 70000}),
    ] {
        let out = f.run("STATUS", &[], &f.conf("n1", bad.clone()));
        assert_eq!(out.code(), Some(7), "{bad}: {}", out.text());
    }
    let file = f.data.path().join("a-file");
    std::fs::write(&file, b"").unwrap();
    let mut under_file = conf.clone();
    under_file["dataDir"] = json!(file.join("backups"));
    let out = f.run("STATUS", &[], &under_file);
    assert_eq!(out.code(), Some(50), "dataDir under a file: {}", out.text());

    let dir = f.data.path().join("allowlist-dir");
    std::fs::create_dir(&dir).unwrap();
    f.plugin.allowlist_path = dir;
    let out = f.run("STATUS", &[], &conf);
    assert_eq!(
        out.code(),
        Some(50),
        "allowlist a directory: {}",
        out.text()
    );
    let file = f.data.path().join("bad-allowlist.conf");
    std::fs::write(&file, "net\\.ipv4\\.tcp_keepalive_time\n(unclosed\n").unwrap();
    f.plugin.allowlist_path = file;
    let out = f.run("STATUS", &[], &conf);
    assert_eq!(out.code(), Some(50), "invalid allowlist: {}", out.text());
}
