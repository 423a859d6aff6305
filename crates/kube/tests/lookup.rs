//! The plugin-side pod lookup against the stand-in, with a minimal in-test agent that mints a
#![allow(clippy::unwrap_used, clippy::expect_used)]
//! token through the stand-in and rewrites the kubeconfig (the real agent is tested in agent/).

use std::io::BufReader;
use std::os::unix::net::UnixListener;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tern_apiserver::{ApiServer, Fault};
use tern_kube::channel::{read_request, write_outcome, MAX_LINE};
use tern_kube::{
    kubeconfig, pod_lookup, write_atomic, BearerToken, LookupError, LookupRequest, Outcome,
};

const POD_PATH: &str = "/api/v1/namespaces/default/pods/web-0";

struct Fixture {
    s: Arc<ApiServer>,
    _dir: tempfile::TempDir,
    kc: PathBuf,
    sock: PathBuf,
    agent_calls: Arc<AtomicUsize>,
}

fn write_kc(s: &ApiServer, kc: &Path, secs: i64) {
    let tok = BearerToken::new(s.issue_token("kube-system", "cni", secs));
    write_atomic(
        kc,
        kubeconfig::render(&s.url(), s.ca_pem().as_bytes(), &tok).as_bytes(),
        0o600,
    )
    .unwrap();
}

fn fixture(with_agent: bool) -> Fixture {
    let s = Arc::new(ApiServer::start().unwrap());
    let dir = tempfile::tempdir().unwrap();
    let kc = dir.path().join("kc");
    let sock = dir.path().join("agent.sock");
    write_kc(&s, &kc, 3600);
    s.set_pod(
        "default",
        "web-0",
        "uid-0",
        &[("tern.io/ip-addrs", "[\"10.99.0.7\"]")],
        false,
    );
    let agent_calls = Arc::new(AtomicUsize::new(0));
    if with_agent {
        let l = UnixListener::bind(&sock).unwrap();
        let (s2, kc2, calls) = (Arc::clone(&s), kc.clone(), Arc::clone(&agent_calls));
        std::thread::spawn(move || {
            for c in l.incoming() {
                let Ok(mut c) = c else { return };
                let req = read_request(&mut BufReader::new(&c), MAX_LINE);
                calls.fetch_add(1, Ordering::SeqCst);
                assert!(req.is_ok());
                write_kc(&s2, &kc2, 3600);
                let _ = write_outcome(
                    &mut c,
                    &Outcome::Refreshed {
                        expires_at: "2030-01-01T00:00:00Z".into(),
                    },
                );
            }
        });
    }
    Fixture {
        s,
        _dir: dir,
        kc,
        sock,
        agent_calls,
    }
}

fn lookup(f: &Fixture, uid: &str, deadline: Duration) -> Result<tern_kube::PodInfo, LookupError> {
    pod_lookup(&LookupRequest {
        kubeconfig: &f.kc,
        agent_socket: &f.sock,
        namespace: "default",
        name: "web-0",
        uid: Some(uid),
        deadline,
    })
}

const D: Duration = Duration::from_secs(5);

#[test]
fn finds_the_pod_and_its_requested_addresses_in_one_get() {
    let f = fixture(true);
    let info = lookup(&f, "uid-0", D).unwrap();
    assert_eq!(
        info.ip_addrs,
        vec!["10.99.0.7".parse::<std::net::IpAddr>().unwrap()]
    );
    assert_eq!(f.s.count(POD_PATH), 1);
    assert_eq!(f.agent_calls.load(Ordering::SeqCst), 0);
}

#[test]
fn refuses_gone_terminating_recreated_and_bad_annotation() {
    let f = fixture(true);
    assert!(matches!(
        lookup(&f, "uid-OLD", D),
        Err(LookupError::UidMismatch { .. })
    ));
    f.s.set_pod("default", "web-0", "uid-0", &[], true);
    assert!(matches!(
        lookup(&f, "uid-0", D),
        Err(LookupError::Terminating { .. })
    ));
    f.s.set_pod(
        "default",
        "web-0",
        "uid-0",
        &[("tern.io/ip-addrs", "10.0.0.1")],
        false,
    );
    let e = lookup(&f, "uid-0", D).unwrap_err();
    assert!(
        matches!(e, LookupError::BadAnnotation { .. })
            && e.to_string().contains("tern.io/ip-addrs"),
        "{e}"
    );
    f.s.delete_pod("default", "web-0");
    let e = lookup(&f, "uid-0", D).unwrap_err();
    assert!(
        matches!(e, LookupError::PodGone { .. }) && !e.try_again_later(),
        "{e}"
    );
    assert_eq!(f.agent_calls.load(Ordering::SeqCst), 0);
}

#[test]
fn key_rotation_401_asks_the_agent_and_retries_once() {
    let f = fixture(true);
    f.s.rotate_signing_key();
    let info = lookup(&f, "uid-0", D).unwrap();
    assert_eq!(info.uid, "uid-0");
    assert_eq!(f.s.count(POD_PATH), 2);
    assert_eq!(f.agent_calls.load(Ordering::SeqCst), 1);
}

#[test]
fn persistent_401_is_try_again_later_naming_kubeconfig_and_socket() {
    let f = fixture(true);
    f.s.set_fault(Some(Fault::Status(401)));
    let e = lookup(&f, "uid-0", D).unwrap_err();
    assert!(
        matches!(e, LookupError::Unauthorized { .. }) && e.try_again_later(),
        "{e:?}"
    );
    let msg = e.to_string();
    assert!(
        msg.contains(f.kc.to_str().unwrap()) && msg.contains(f.sock.to_str().unwrap()),
        "{msg}"
    );
    assert_eq!(f.s.count(POD_PATH), 2, "exactly one retry");
    assert_eq!(f.agent_calls.load(Ordering::SeqCst), 1);
}

#[test]
fn expired_token_and_no_agent_fails_fast_without_calling_the_api() {
    let f = fixture(false);
    // Make the token expired on the node's clock: mint one whose exp is already past.
    let tok = BearerToken::new(f.s.issue_token("kube-system", "cni", -120));
    write_atomic(
        &f.kc,
        kubeconfig::render(&f.s.url(), f.s.ca_pem().as_bytes(), &tok).as_bytes(),
        0o600,
    )
    .unwrap();
    let start = Instant::now();
    let e = lookup(&f, "uid-0", Duration::from_secs(2)).unwrap_err();
    assert!(start.elapsed() < Duration::from_secs(2));
    assert!(
        matches!(e, LookupError::AgentUnreachable { .. }) && e.try_again_later(),
        "{e:?}"
    );
    assert!(e.to_string().contains(f.sock.to_str().unwrap()));
    assert_eq!(f.s.count(POD_PATH), 0);
}

#[test]
fn agent_down_and_401_is_try_again_later() {
    let f = fixture(false);
    f.s.rotate_signing_key();
    let e = lookup(&f, "uid-0", D).unwrap_err();
    assert!(
        matches!(e, LookupError::AgentUnreachable { .. }) && e.try_again_later(),
        "{e:?}"
    );
    assert_eq!(f.s.count(POD_PATH), 1);
}

#[test]
fn stall_times_out_within_the_deadline_and_5xx_is_unavailable() {
    let f = fixture(true);
    f.s.set_fault(Some(Fault::Stall));
    let start = Instant::now();
    let e = lookup(&f, "uid-0", Duration::from_millis(500)).unwrap_err();
    assert!(
        start.elapsed() < Duration::from_millis(1200),
        "{:?}",
        start.elapsed()
    );
    assert!(
        matches!(e, LookupError::Timeout { .. }) && e.try_again_later(),
        "{e:?}"
    );
    f.s.set_fault(Some(Fault::Status(503)));
    let e = lookup(&f, "uid-0", D).unwrap_err();
    assert!(
        matches!(e, LookupError::Unavailable { .. }) && e.try_again_later(),
        "{e:?}"
    );
    f.s.set_fault(None);
    assert!(lookup(&f, "uid-0", D).is_ok());
}

#[test]
fn forbidden_is_not_retried_and_missing_kubeconfig_names_the_path() {
    let f = fixture(true);
    f.s.forbid("system:serviceaccount:kube-system:cni", "get", "pods");
    let e = lookup(&f, "uid-0", D).unwrap_err();
    assert!(
        matches!(e, LookupError::Forbidden { .. }) && !e.try_again_later(),
        "{e:?}"
    );
    assert!(e.to_string().contains("cannot get resource \"pods\""));
    assert_eq!(f.s.count(POD_PATH), 1);
    assert_eq!(f.agent_calls.load(Ordering::SeqCst), 0);
    std::fs::remove_file(&f.kc).unwrap();
    let e = lookup(&f, "uid-0", D).unwrap_err();
    assert!(
        matches!(e, LookupError::Kubeconfig(_)) && e.to_string().contains(f.kc.to_str().unwrap()),
        "{e}"
    );
}
