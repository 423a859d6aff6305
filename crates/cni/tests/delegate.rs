//! Delegation: exec'd and built-in delegates.
//!
//! Delegation end to end: exec'd delegates (scripts standing in for IPAM plugins) and a built-in
//! one run through the dispatcher, their environment, stdin, errors, limits and deadline.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers outside #[test] fns

use std::path::{Path, PathBuf};
use std::time::Duration;

use std::os::unix::fs::PermissionsExt;
use tern_cni::env::Verb;
use tern_cni::{AddInput, CheckInput, CniResult, DelInput, Delegate, Error, GcInput, Plugin};

/// A directory holding executable scripts standing in for delegates, removed on drop.
struct PluginDir(PathBuf);

impl PluginDir {
    fn new(tag: &str) -> PluginDir {
        let d = std::env::temp_dir().join(format!("tern-cni-ipam-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        PluginDir(d)
    }
    fn script(&self, name: &str, body: &str) {
        let p = self.0.join(name);
        std::fs::write(&p, format!("#!/bin/sh\n{body}\n")).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    fn path(&self) -> String {
        format!("/nonexistent:{}", self.0.display())
    }
}

impl Drop for PluginDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[test]
fn runs_the_delegate_with_the_environment_and_stdin() {
    let dir = PluginDir::new("env");
    // Echo the environment and stdin back inside a result so the test can see them.
    dir.script(
        "fake",
        r#"in=$(cat); printf '{"cniVersion":"1.0.0","ips":[{"address":"10.0.0.7/24"}],"dns":{"domain":"%s|%s|%s|%s|%s"}}' "$CNI_COMMAND" "$CNI_CONTAINERID" "$CNI_IFNAME" "${CNI_NETNS-unset}" "$in""#,
    );
    let path = dir.path();
    let d = Delegate {
        plugin_type: "fake",
        cni_path: &path,
        container_id: Some("c1"),
        netns: None,
        ifname: Some("eth0"),
        cni_args: Some(""),
        builtin: None,
        deadline: None,
    };
    let r = d.add(b"{stdin}").unwrap();
    assert_eq!(r.ips[0].address.to_string(), "10.0.0.7/24");
    assert_eq!(r.dns.domain.as_deref(), Some("ADD|c1|eth0|unset|{stdin}"));
}

#[test]
fn keeps_the_delegates_error_code_or_explains_its_failure() {
    let dir = PluginDir::new("err");
    dir.script("coded", r#"echo '{"code": 11, "msg": "busy"}'; exit 1"#);
    dir.script("crash", "echo 'it broke' >&2; exit 3");
    dir.script("garbage", "echo 'not json'");
    let path = dir.path();
    let e = Delegate::without_attachment("coded", &path)
        .exec(Verb::Del, b"")
        .unwrap_err();
    assert_eq!((e.code, e.msg.as_str()), (11, "busy"));
    let e = Delegate::without_attachment("crash", &path)
        .exec(Verb::Del, b"")
        .unwrap_err();
    // Its stderr was captured (and forwarded): the error quotes it, as the reference does.
    assert_eq!(e.code, 5);
    assert_eq!(
        e.msg,
        r#"crash: netplugin failed: "it broke": exit status: 3"#
    );
    let e = Delegate::without_attachment("garbage", &path)
        .exec(Verb::Del, b"")
        .unwrap_err();
    assert_eq!(e.code, 6);
    let e = Delegate::without_attachment("absent", &path)
        .exec(Verb::Del, b"")
        .unwrap_err();
    assert_eq!(e.code, 7);
    assert!(
        e.msg.contains("failed to find plugin \"absent\""),
        "{}",
        e.msg
    );
    let e = Delegate::without_attachment("absent", &path)
        .status(b"")
        .unwrap_err();
    assert_eq!(e.code, 50);
    let e = Delegate::without_attachment("../bin/sh", &path)
        .find()
        .unwrap_err();
    assert_eq!(e.code, 7);
}

#[test]
fn a_deadline_kills_the_delegate_and_its_children() {
    let dir = PluginDir::new("deadline");
    let marker = dir.0.join("child-lived");
    // A child that keeps the pipes open and would leave a marker if it outlived the kill.
    dir.script(
        "stuck",
        &format!("(sleep 3; touch {}) & sleep 30", marker.display()),
    );
    let path = dir.path();
    let t0 = std::time::Instant::now();
    let e = Delegate::without_attachment("stuck", &path)
        .with_deadline(Duration::from_millis(300))
        .exec(Verb::Add, b"{}")
        .unwrap_err();
    assert!(t0.elapsed() < Duration::from_secs(2), "{:?}", t0.elapsed());
    assert_eq!(e.code, 11, "{e}");
    assert!(e.msg.contains("did not answer within"), "{}", e.msg);
    std::thread::sleep(Duration::from_millis(3500));
    assert!(!marker.exists(), "the delegate's child was killed with it");
}

#[test]
fn oversized_output_is_refused_and_code_0_is_no_error() {
    let dir = PluginDir::new("big-out");
    dir.script(
        "flood",
        "head -c 3000000 /dev/zero | tr '\\0' ' '; echo '{}'",
    );
    dir.script(
        "code0",
        r#"echo '{"code": 0, "msg": "weird"}'; echo 'it said 0' >&2; exit 1"#,
    );
    dir.script(
        "loud",
        "head -c 1000000 /dev/zero | tr '\\0' x >&2; echo '{}'",
    );
    let path = dir.path();
    let e = Delegate::without_attachment("flood", &path)
        .exec(Verb::Add, b"{}")
        .unwrap_err();
    assert_eq!(e.code, 6, "{e}");
    assert!(e.msg.contains("more than"), "{}", e.msg);
    let e = Delegate::without_attachment("code0", &path)
        .exec(Verb::Del, b"")
        .unwrap_err();
    assert_eq!(
        e.code, 5,
        "an error object with code 0 is not an error result: {e}"
    );
    // A delegate that floods stderr is drained (never blocked) and still succeeds.
    Delegate::without_attachment("loud", &path)
        .exec(Verb::Del, b"")
        .unwrap();
}

#[test]
fn a_large_stdin_is_written_while_stdout_is_read() {
    let dir = PluginDir::new("big");
    // Prints before reading: with a stdin larger than the pipe (64 KiB) this would deadlock a
    // synchronous writer; what the pipe takes at once is written before the rest.
    dir.script(
        "chatty",
        r#"head -c 70000 /dev/zero | tr '\0' ' '; n=$(wc -c); printf '{"cniVersion":"1.0.0","ips":[],"dns":{"domain":"%s"}}' "$n""#,
    );
    let path = dir.path();
    let d = Delegate::without_attachment("chatty", &path);
    let big = vec![b'x'; 200_000];
    assert_eq!(d.add(&big).unwrap().dns.domain.as_deref(), Some("200000"));
}

/// A built-in plugin that answers from what the dispatcher gave it.
struct Echo;

impl Plugin for Echo {
    fn about(&self) -> String {
        "echo".into()
    }
    fn add(&self, input: &AddInput) -> Result<CniResult, Error> {
        let mut r = CniResult::default();
        r.dns.domain = Some(format!(
            "{}|{}|{}|{}|{}",
            input.container_id,
            input.ifname,
            input.netns.display(),
            input.args_raw,
            input.config.name
        ));
        Ok(r)
    }
    fn del(&self, input: &DelInput) -> Result<(), Error> {
        Err(Error::new(11, format!("busy {}", input.container_id)))
    }
    fn check(&self, _: &CheckInput) -> Result<(), Error> {
        Ok(())
    }
    fn gc(&self, input: &GcInput) -> Result<(), Error> {
        match &input.valid_attachments {
            Some(v) if v.len() == 1 => Ok(()),
            other => Err(Error::new(5, format!("{other:?}"))),
        }
    }
}

#[test]
fn a_builtin_runs_in_process_through_the_dispatcher_once_found_in_cni_path() {
    let dir = PluginDir::new("builtin");
    // The binary is never run: it would fail every verb.
    dir.script("echo-ipam", "exit 9");
    let path = dir.path();
    let ns = Path::new("/run/netns/x");
    let d = Delegate {
        plugin_type: "echo-ipam",
        cni_path: &path,
        container_id: Some("c1"),
        netns: Some(ns),
        ifname: Some("eth0"),
        cni_args: Some("K8S_POD_NAME=p"),
        builtin: None,
        deadline: None,
    }
    .builtin(&Echo);
    let conf = br#"{"cniVersion":"1.0.0","name":"n1","type":"echo-ipam"}"#;
    let r = d.add(conf).unwrap();
    assert_eq!(
        r.dns.domain.as_deref(),
        Some("c1|eth0|/run/netns/x|K8S_POD_NAME=p|n1")
    );
    let e = d.exec(Verb::Del, conf).unwrap_err();
    assert_eq!((e.code, e.msg.as_str()), (11, "busy c1"));
    d.exec(Verb::Check, conf).unwrap();
    // The dispatcher's own checks apply, as in the binary: no CHECK before 0.4.0.
    let old = br#"{"cniVersion":"0.3.1","name":"n1","type":"echo-ipam"}"#;
    assert_eq!(d.exec(Verb::Check, old).unwrap_err().code, 1);
    let gc = br#"{"cniVersion":"1.1.0","name":"n1","type":"echo-ipam","cni.dev/valid-attachments":[{"containerID":"a","ifname":"eth0"}]}"#;
    Delegate::without_attachment("echo-ipam", &path)
        .builtin(&Echo)
        .exec(Verb::Gc, gc)
        .unwrap();
    // Not in CNI_PATH: the same errors as with exec.
    let missing = Delegate::without_attachment("absent", &path).builtin(&Echo);
    assert_eq!(missing.exec(Verb::Gc, gc).unwrap_err().code, 7);
    assert_eq!(missing.status(gc).unwrap_err().code, 50);
}

/// A built-in plugin whose ADD answers by network name: errors of every shape, results with
/// what only 1.1.0 carries, a result that would not parse back.
struct Shapes;

impl Plugin for Shapes {
    fn about(&self) -> String {
        "shapes".into()
    }
    fn add(&self, input: &AddInput) -> Result<CniResult, Error> {
        use tern_cni::{Interface, IpConfig, Route};
        let full = CniResult {
            interfaces: vec![Interface {
                name: "eth0".into(),
                mac: Some("0a:58:0a:63:00:02".into()),
                mtu: Some(1400),
                sandbox: Some(String::new()),
                socket_path: Some("/s".into()),
                pci_id: Some("0000:00:01.0".into()),
            }],
            ips: vec![
                IpConfig {
                    interface: Some(0),
                    address: "10.99.0.2/24".parse().unwrap(),
                    gateway: Some("10.99.0.1".parse().unwrap()),
                },
                IpConfig {
                    interface: None,
                    address: "fd00::2/64".parse().unwrap(),
                    gateway: Some("fe80::1".parse().unwrap()),
                },
            ],
            routes: vec![Route {
                mtu: Some(1300),
                table: Some(9),
                ..Route::new("::/0".parse().unwrap(), Some("fe80::1".parse().unwrap()))
            }],
            dns: tern_cni::Dns {
                domain: Some(String::new()),
                ..Default::default()
            },
        };
        match input.config.name.as_str() {
            "err" => Err(Error::new(104, "cannot write").with_details("why")),
            "bare" => Err(Error::new(11, "")),
            "zero" => Err(Error::new(0, "no code")),
            "dangling" => {
                let mut r = full;
                r.interfaces.clear();
                Ok(r)
            }
            _ => Ok(full),
        }
    }
    fn del(&self, _: &DelInput) -> Result<(), Error> {
        Ok(())
    }
    fn check(&self, _: &CheckInput) -> Result<(), Error> {
        Ok(())
    }
    fn gc(&self, _: &GcInput) -> Result<(), Error> {
        Ok(())
    }
}

/// `add_for` (the caller's parsed input, no dispatcher) gives what `add` (through the
/// dispatcher, the result printed and read back) gives: every version, every error shape.
#[test]
fn add_for_gives_what_add_gives_in_every_version() {
    let dir = PluginDir::new("add-for");
    dir.script("shapes", "exit 9");
    let path = dir.path();
    let ns = PathBuf::from("/run/netns/x");
    for v in tern_cni::Version::ALL {
        for name in ["ok", "err", "bare", "zero", "dangling"] {
            let conf =
                format!(r#"{{"cniVersion":"{v}","name":"{name}","type":"shapes"}}"#).into_bytes();
            let input = AddInput {
                container_id: tern_cni::ContainerId::parse("c1").unwrap(),
                netns: ns.clone(),
                ifname: tern_cni::IfName::parse("eth0").unwrap(),
                args: tern_cni::CniArgs::parse("K8S_POD_NAME=p").unwrap(),
                args_raw: "K8S_POD_NAME=p".into(),
                cni_path: path.clone(),
                config: tern_cni::NetConf::parse(conf.clone()).unwrap(),
            };
            let d = input.delegate("shapes").builtin(&Shapes);
            assert_eq!(d.add_for(&input, &conf), d.add(&conf), "{v} {name}");
        }
    }
}
