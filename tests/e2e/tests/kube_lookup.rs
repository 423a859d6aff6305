//! tern's pod lookup on ADD against the API server stand-in (bug-report case 24): the plugin binary
//! runs in a fake host netns, exactly as a runtime execs it; the stand-in listens inside that
//! netns. No agent runs here: a 401 cannot be repaired, which is what that case asks about.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use tern_apiserver::{ApiServer, Fault};
use tern_net::netns::NetNs;
use tern_testkit::exec::{bin_dir, ref_plugin_dir};
use tern_testkit::netns::{HostAndPod, TestNetns};

/// Lookup deadline configured in the netconf for these tests.
const DEADLINE: Duration = Duration::from_secs(2);
/// Slack above the deadline for process start, IPAM and netlink work.
const SLACK: Duration = Duration::from_millis(1500);

struct Fixture {
    api: Option<ApiServer>,
    hp: HostAndPod,
    dir: tempfile::TempDir,
}

/// Stops the stand-in from inside the fake host netns: its shutdown connects to its own
/// loopback address, which exists only there.
fn stop_in_netns(hp: &HostAndPod, api: ApiServer) {
    let _ = NetNs::open(hp.host.path()).map(|ns| ns.run_in(move || drop(api)));
}

struct Outcome {
    ok: bool,
    json: Value,
    elapsed: Duration,
    stderr: String,
}

impl Drop for Fixture {
    fn drop(&mut self) {
        if let Some(api) = self.api.take() {
            stop_in_netns(&self.hp, api);
        }
    }
}

impl Fixture {
    fn new(tag: &str) -> Fixture {
        let hp = HostAndPod::new(tag);
        // The stand-in's sockets belong to the fake host netns, where the plugin runs.
        let api = NetNs::open(hp.host.path())
            .unwrap()
            .run_in(ApiServer::start)
            .unwrap()
            .unwrap();
        let dir = tempfile::tempdir().unwrap();
        let token = api.issue_token("kube-system", "tern-cni", 3600);
        let kubeconfig = tern_kube::kubeconfig::render(
            &api.url(),
            api.ca_pem().as_bytes(),
            &tern_kube::token::BearerToken::new(token),
        );
        std::fs::write(dir.path().join("kubeconfig"), kubeconfig).unwrap();
        Fixture {
            api: Some(api),
            hp,
            dir,
        }
    }

    fn api(&self) -> &ApiServer {
        self.api.as_ref().expect("stand-in running")
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    fn netconf(&self) -> Value {
        json!({
            "cniVersion": "1.0.0",
            "name": "kubenet",
            "type": "tern",
            "stateDir": self.path("state"),
            "agentSocket": self.path("agent.sock"),
            "kubernetes": {
                "kubeconfig": self.path("kubeconfig"),
                "lookupTimeoutSeconds": DEADLINE.as_secs_f64()
            },
            "ipam": {
                "type": "host-local",
                "dataDir": self.path("ipam"),
                "ranges": [[{"subnet": "10.98.0.0/24"}]]
            }
        })
    }

    /// Runs tern as a runtime does, in the fake host netns.
    fn run(&self, command: &str, cid: &str, pod: &Path, args: &str) -> Outcome {
        let path = format!("{}:{}", bin_dir().display(), ref_plugin_dir().display());
        self.run_with(command, cid, pod, args, &path, &self.netconf())
    }

    /// [`Fixture::run`] with another `CNI_PATH` and netconf.
    fn run_with(
        &self,
        command: &str,
        cid: &str,
        pod: &Path,
        args: &str,
        cni_path: &str,
        conf: &Value,
    ) -> Outcome {
        let mut cmd = Command::new("ip");
        cmd.args(["netns", "exec", self.hp.host.name()])
            .arg(bin_dir().join("tern"))
            .env_clear()
            .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
            .env("CNI_COMMAND", command)
            .env("CNI_CONTAINERID", cid)
            .env("CNI_NETNS", pod)
            .env("CNI_IFNAME", "eth0")
            .env("CNI_ARGS", args)
            .env("CNI_PATH", cni_path)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        if command == "STATUS" {
            // As libcni runs STATUS: no attachment variables.
            for v in ["CNI_CONTAINERID", "CNI_NETNS", "CNI_IFNAME", "CNI_ARGS"] {
                cmd.env_remove(v);
            }
        }
        let mut child = cmd.spawn().unwrap();
        let start = Instant::now();
        child
            .stdin
            .take()
            .unwrap()
            .write_all(&serde_json::to_vec(conf).unwrap())
            .unwrap();
        let out = child.wait_with_output().unwrap();
        Outcome {
            ok: out.status.success(),
            json: serde_json::from_slice(&out.stdout).unwrap_or(Value::Null),
            elapsed: start.elapsed(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        }
    }

    fn pod_args(name: &str, uid: &str) -> String {
        format!("IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME={name};K8S_POD_INFRA_CONTAINER_ID=x;K8S_POD_UID={uid}")
    }

    /// Nothing of attachment `cid` is left: no tern veth, no route into 10.98.0.0/24, no lease,
    /// no state file.
    fn assert_nothing_left(&self, cid: &str) {
        let veth = host_veth_name(cid);
        assert!(
            !self.hp.host.has_link(&veth),
            "host veth {veth} of {cid} left"
        );
        let routes = self.hp.host.ip(&["route", "show"]);
        assert!(
            !routes.contains(&veth),
            "host route via {veth} left: {routes}"
        );
        let leases: Vec<String> = std::fs::read_dir(self.path("ipam/kubenet"))
            .map(|d| {
                d.flatten()
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .filter(|n| n.starts_with("10.98."))
                    .collect()
            })
            .unwrap_or_default();
        for l in &leases {
            let owner = std::fs::read_to_string(self.path("ipam/kubenet").join(l)).unwrap();
            assert!(!owner.starts_with(cid), "lease {l} of {cid} left");
        }
        let state = self.path("state/kubenet").join(format!("{cid}_eth0.json"));
        assert!(!state.exists(), "state file left: {}", state.display());
    }
}

/// tern's host veth name for `cid` on eth0 (DESIGN.md).
fn host_veth_name(cid: &str) -> String {
    tern_testkit::tern_host_veth(cid, "eth0")
}

#[test]
fn a_pod_whose_uid_changed_is_refused_and_nothing_is_wired() {
    let f = Fixture::new("kluid");
    f.api().set_pod("default", "web", "uid-new", &[], false);
    let o = f.run(
        "ADD",
        "cuid",
        &f.hp.pod.path(),
        &Fixture::pod_args("web", "uid-old"),
    );
    assert!(!o.ok);
    assert_eq!(o.json["code"], 3, "{}", o.json);
    assert!(
        o.json["msg"].as_str().unwrap().contains("uid-new"),
        "{}",
        o.json
    );
    f.assert_nothing_left("cuid");
    assert!(!f.hp.pod.has_link("eth0"));
    assert_eq!(f.api().count("/api/v1/namespaces/default/pods/web"), 1);
}

#[test]
fn a_gone_or_terminating_pod_is_refused() {
    let f = Fixture::new("klgone");
    let o = f.run(
        "ADD",
        "cgone",
        &f.hp.pod.path(),
        &Fixture::pod_args("ghost", "u1"),
    );
    assert_eq!(o.json["code"], 3, "{}", o.json);
    f.api().set_pod("default", "leaving", "u2", &[], true);
    let o = f.run(
        "ADD",
        "cgone",
        &f.hp.pod.path(),
        &Fixture::pod_args("leaving", "u2"),
    );
    assert_eq!(o.json["code"], 3, "{}", o.json);
    assert!(
        o.json["msg"].as_str().unwrap().contains("terminating"),
        "{}",
        o.json
    );
    f.assert_nothing_left("cgone");
}

#[test]
fn the_ip_addrs_annotation_gives_the_pod_the_asked_address() {
    let f = Fixture::new("klip");
    f.api().set_pod(
        "default",
        "fixed",
        "u3",
        &[("tern.io/ip-addrs", r#"["10.98.0.77"]"#)],
        false,
    );
    let o = f.run(
        "ADD",
        "cfixed",
        &f.hp.pod.path(),
        &Fixture::pod_args("fixed", "u3"),
    );
    assert!(o.ok, "{} {}", o.json, o.stderr);
    assert_eq!(o.json["ips"][0]["address"], "10.98.0.77/32");
    assert!(f
        .hp
        .pod
        .ip(&["addr", "show", "eth0"])
        .contains("10.98.0.77/32"));
    // A malformed annotation is a clear configuration error, and nothing is wired.
    let other = TestNetns::new("klip2");
    f.api().set_pod(
        "default",
        "bad",
        "u4",
        &[("tern.io/ip-addrs", "10.98.0.8")],
        false,
    );
    let o = f.run(
        "ADD",
        "cbad",
        &other.path(),
        &Fixture::pod_args("bad", "u4"),
    );
    assert_eq!(o.json["code"], 7, "{}", o.json);
    assert!(
        o.json["msg"].as_str().unwrap().contains("tern.io/ip-addrs"),
        "{}",
        o.json
    );
    f.assert_nothing_left("cbad");
    let d = f.run("DEL", "cfixed", &f.hp.pod.path(), "");
    assert!(d.ok, "{}", d.json);
    f.assert_nothing_left("cfixed");
}

#[test]
fn case_24_unauthorized_or_silent_api_server() {
    let f = Fixture::new("kl24");
    f.api().set_pod("default", "early", "u-early", &[], false);
    let early = f.run(
        "ADD",
        "cearly",
        &f.hp.pod.path(),
        &Fixture::pod_args("early", "u-early"),
    );
    assert!(early.ok, "{} {}", early.json, early.stderr);

    for (what, fault) in [
        ("401 to everything", Fault::Status(401)),
        ("never answers", Fault::Stall),
    ] {
        f.api().set_fault(Some(fault));
        f.api().set_pod("default", "late", "u-late", &[], false);
        let pod = TestNetns::new("kl24late");
        let o = f.run(
            "ADD",
            "clate",
            &pod.path(),
            &Fixture::pod_args("late", "u-late"),
        );
        assert!(!o.ok, "{what}: ADD succeeded");
        assert_eq!(o.json["code"], 11, "{what}: {}", o.json);
        let msg = o.json["msg"].as_str().unwrap().to_owned();
        assert!(
            msg.contains(f.path("kubeconfig").to_str().unwrap()),
            "{what}: {msg}"
        );
        assert!(o.elapsed < DEADLINE + SLACK, "{what}: took {:?}", o.elapsed);
        assert!(!pod.has_link("eth0"), "{what}: pod wired");
        f.assert_nothing_left("clate");
    }

    // DEL of the earlier pod needs no API server: it succeeds at once and leaves nothing.
    let before = f.api().requests().len();
    let d = f.run(
        "DEL",
        "cearly",
        &f.hp.pod.path(),
        &Fixture::pod_args("early", "u-early"),
    );
    assert!(d.ok, "{}", d.json);
    assert!(d.elapsed < DEADLINE, "DEL took {:?}", d.elapsed);
    assert_eq!(
        f.api().requests().len(),
        before,
        "DEL called the API server"
    );
    f.assert_nothing_left("cearly");

    // Healthy again: ADD succeeds.
    f.api().set_fault(None);
    let o = f.run(
        "ADD",
        "cafter",
        &f.hp.pod.path(),
        &Fixture::pod_args("late", "u-late"),
    );
    assert!(o.ok, "{} {}", o.json, o.stderr);
    let d = f.run("DEL", "cafter", &f.hp.pod.path(), "");
    assert!(d.ok);
    f.assert_nothing_left("cafter");
}

#[test]
fn no_lookup_without_pod_args_and_no_api_call_on_del_check() {
    let f = Fixture::new("klnone");
    let o = f.run("ADD", "cnone", &f.hp.pod.path(), "");
    assert!(o.ok, "{} {}", o.json, o.stderr);
    assert!(f.api().requests().is_empty(), "{:?}", f.api().requests());
    let d = f.run(
        "DEL",
        "cnone",
        &f.hp.pod.path(),
        &Fixture::pod_args("x", "y"),
    );
    assert!(d.ok);
    assert!(f.api().requests().is_empty(), "DEL called the API server");
}

/// A `tern-lookup` that never answers (and leaves a child holding its pipes) is killed a second
/// after the lookup deadline: ADD fails with 11 and leaves nothing. Without `tern-lookup` in
/// `CNI_PATH`, ADD fails with 7 naming it and STATUS reports 50.
#[test]
fn a_stuck_or_missing_tern_lookup_fails_add_in_time_and_status_says_so() {
    use std::os::unix::fs::PermissionsExt;
    let f = Fixture::new("klstuck");
    f.api().set_pod("default", "web", "uid-1", &[], false);
    let stuck = f.path("stuck-bin");
    std::fs::create_dir_all(&stuck).unwrap();
    let script = stuck.join("tern-lookup");
    std::fs::write(&script, "#!/bin/sh\n(sleep 30) &\nsleep 30\n").unwrap();
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    for name in ["tern", "tern-ipam"] {
        std::fs::copy(bin_dir().join(name), stuck.join(name)).unwrap();
    }
    let path = format!("{}:{}", stuck.display(), ref_plugin_dir().display());
    let args = Fixture::pod_args("web", "uid-1");
    let o = f.run_with(
        "ADD",
        "cstuck",
        &f.hp.pod.path(),
        &args,
        &path,
        &f.netconf(),
    );
    assert!(!o.ok);
    assert_eq!(o.json["code"], 11, "{}", o.json);
    assert!(
        o.elapsed < DEADLINE + Duration::from_secs(1) + SLACK,
        "ADD took {:?}",
        o.elapsed
    );
    f.assert_nothing_left("cstuck");

    std::fs::remove_file(&script).unwrap();
    let o = f.run_with("ADD", "cmiss", &f.hp.pod.path(), &args, &path, &f.netconf());
    assert_eq!(o.json["code"], 7, "{}", o.json);
    assert!(
        o.json["msg"].as_str().unwrap().contains("tern-lookup"),
        "{}",
        o.json
    );
    f.assert_nothing_left("cmiss");
    let mut conf = f.netconf();
    conf["cniVersion"] = json!("1.1.0");
    // Debian's host-local predates STATUS; tern-ipam answers it.
    conf["ipam"]["type"] = json!("tern-ipam");
    let o = f.run_with("STATUS", "", Path::new(""), "", &path, &conf);
    assert_eq!(o.json["code"], 50, "{} {}", o.json, o.stderr);
    assert!(
        o.json["msg"].as_str().unwrap().contains("tern-lookup"),
        "{}",
        o.json
    );
}

/// STATUS has no deadline of its own: a kubeconfig path that is a FIFO nobody writes is refused
/// at once with 50 naming it, never waited on; only a missing one points at tern-agent.
#[test]
fn status_refuses_a_fifo_kubeconfig_without_waiting_on_it() {
    use std::os::unix::fs::OpenOptionsExt;
    let f = Fixture::new("klfifo");
    let kc = f.path("kubeconfig");
    let _ = std::fs::remove_file(&kc);
    assert!(Command::new("mkfifo").arg(&kc).status().unwrap().success());
    // A STATUS stuck on the FIFO is released after 5 s (a writer opens and closes it), so a
    // regression fails the elapsed-time assertion instead of hanging the test run.
    let release = {
        let kc = kc.clone();
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_secs(5));
            let _ = std::fs::OpenOptions::new()
                .write(true)
                .custom_flags(nix::fcntl::OFlag::O_NONBLOCK.bits())
                .open(&kc);
        })
    };
    let path = format!("{}:{}", bin_dir().display(), ref_plugin_dir().display());
    let mut conf = f.netconf();
    conf["cniVersion"] = json!("1.1.0");
    // Debian's host-local predates STATUS; tern-ipam answers it.
    conf["ipam"]["type"] = json!("tern-ipam");
    let o = f.run_with("STATUS", "", Path::new(""), "", &path, &conf);
    assert!(
        o.elapsed < Duration::from_secs(2),
        "STATUS took {:?}",
        o.elapsed
    );
    assert_eq!(o.json["code"], 50, "{} {}", o.json, o.stderr);
    let msg = o.json["msg"].as_str().unwrap();
    assert!(msg.contains("a FIFO"), "{}", o.json);
    assert!(
        !msg.contains("tern-agent"),
        "a bad file is not the agent's: {msg}"
    );
    release.join().unwrap();

    // A missing kubeconfig is the agent's to write: then the hint names it.
    std::fs::remove_file(&kc).unwrap();
    let o = f.run_with("STATUS", "", Path::new(""), "", &path, &conf);
    assert_eq!(o.json["code"], 50, "{} {}", o.json, o.stderr);
    let msg = o.json["msg"].as_str().unwrap();
    assert!(msg.contains("is tern-agent running?"), "{msg}");
}
