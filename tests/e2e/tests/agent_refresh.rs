//! The pod lookup's token refresh with a real `tern-agent run` process (`agent_fixture`): chain C0
//! with a pod lookup, driven through libcni, the agent and the API server stand-in all in one fake
//! host netns (the stand-in's loopback address exists only there).
//!
//! - the signing key rotates: the next ADD gets 401, the agent refreshes, the retry succeeds;
//! - the agent is down (killed, its socket left stale) and the token expired: ADD fails with
//!   code 11 within its deadline, leaving nothing of it; DEL of an earlier pod succeeds;
//! - 50 parallel ADDs that all see 401 (the TokenRequest is held until all 50 have their 401)
//!   cause exactly one TokenRequest, and all succeed.
//!
//! `tern-agent install` wiring a pod is `agent_install.rs`. Needs root.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod agent_fixture;
mod common;

use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use agent_fixture::{assert_attachment_gone, pod_args, Cluster, NS, TOKEN_PATH};
use common::*;
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use serde_json::Value;
use tern_apiserver::Fault;
use tern_testkit::netns::TestNetns;

/// The signing key rotates: the next ADD through libcni gets 401, asks the agent, which makes one
/// TokenRequest and rewrites the kubeconfig; tern re-reads it and the retried GET succeeds.
#[test]
fn key_rotation_401_then_agent_refresh_then_retry_succeeds() {
    if tern_testkit::root::skip() {
        return;
    }
    let mut c = Cluster::new("agrot", 5.0);
    c.start_agent();
    let pa = c.node.pod("agrota");
    c.use_pod("web-a");
    let add_a = c.node.tool.add(pa.path()).unwrap();
    ok(&add_a, "ADD before the rotation");
    assert_eq!(c.pod_statuses("web-a"), vec![200]);
    let token_before = c.cni_token();

    c.api().rotate_signing_key();
    c.renew_agent_token(); // the kubelet re-projects the agent's own token after a rotation
    let pb = c.node.pod("agrotb");
    c.use_pod("web-b");
    let add_b = c.node.tool.add(pb.path()).unwrap();
    ok(&add_b, "ADD after the rotation");
    assert_eq!(
        c.pod_statuses("web-b"),
        vec![401, 200],
        "expected one 401, then the retry's 200"
    );
    assert_eq!(c.token_requests(), 2, "start-up + exactly one refresh");
    assert_ne!(c.cni_token(), token_before, "kubeconfig not rewritten");
    assert!(pb.has_link("eth0"), "pod b not wired");
    assert_eq!(keepalive_of(&pb)[0], KEEPALIVE[0].1, "pod b not tuned");

    ok(&c.node.tool.del(pb.path()).unwrap(), "DEL b");
    c.node.tool.container_id("cid-web-a");
    ok(&c.node.tool.del(pa.path()).unwrap(), "DEL a");
    let mut addrs = result_addrs(add_a.json.as_ref().unwrap());
    addrs.extend(result_addrs(add_b.json.as_ref().unwrap()));
    c.node.assert_nothing_left(&addrs);
}

/// The agent is down (SIGKILLed: its socket file is left, nobody listens) and the token in the
/// kubeconfig has expired: ADD fails with code 11 within its deadline, naming the kubeconfig and
/// the socket, and leaves nothing of itself; DEL of a pod added earlier succeeds at once.
#[test]
fn agent_down_and_token_expired_add_fails_11_del_succeeds() {
    if tern_testkit::root::skip() {
        return;
    }
    let deadline = Duration::from_secs(2);
    let mut c = Cluster::new("agdown", deadline.as_secs_f64());
    c.start_agent();
    let early = c.node.pod("agdowne");
    c.use_pod("early");
    let add = c.node.tool.add(early.path()).unwrap();
    ok(&add, "ADD while the agent runs");

    let mut agent = c.agent.take().unwrap();
    kill(
        Pid::from_raw(i32::try_from(agent.id()).unwrap()),
        Signal::SIGKILL,
    )
    .unwrap();
    agent.wait().unwrap();
    assert!(c.socket().exists(), "a killed agent leaves its socket file");
    // The token the dead agent last wrote expires: an expired one in its place (issued an hour
    // and a half ago for an hour), valid for nothing.
    c.api().advance_clock(-5400);
    let expired = c.api().issue_token(NS, "tern-cni", 3600);
    c.api().advance_clock(5400);
    let kc = tern_kube::kubeconfig::render(
        &c.api().url(),
        c.api().ca_pem().as_bytes(),
        &tern_kube::token::BearerToken::new(expired),
    );
    std::fs::write(c.kubeconfig(), kc).unwrap();
    let tokens = c.token_requests();

    let late = c.node.pod("agdownl");
    c.use_pod("late");
    let t0 = Instant::now();
    let out = c.node.tool.add(late.path()).unwrap();
    let took = t0.elapsed();
    failed_with(
        &out,
        11,
        &c.kubeconfig().display().to_string(),
        "ADD with the agent down",
    );
    failed_with(
        &out,
        11,
        &c.socket().display().to_string(),
        "ADD with the agent down",
    );
    assert!(
        took < deadline + Duration::from_millis(1500),
        "ADD took {took:?}, deadline {deadline:?}"
    );
    assert!(!late.has_link("eth0"), "late pod wired");
    assert_attachment_gone(&c.node, "cid-late");
    assert_eq!(
        c.token_requests(),
        tokens,
        "a TokenRequest without the agent?"
    );
    assert_eq!(
        c.api().count("/api/v1/namespaces/default/pods/late"),
        0,
        "an expired token was sent"
    );
    // libcni's DEL of the failed ADD, as a runtime does: succeeds.
    ok(
        &c.node.tool.del(late.path()).unwrap(),
        "DEL of the failed ADD",
    );

    c.node.tool.container_id("cid-early");
    c.node.tool.cni_args(Some(&pod_args("early")));
    let requests = c.api().requests().len();
    let t0 = Instant::now();
    let del = c.node.tool.del(early.path()).unwrap();
    ok(&del, "DEL of the earlier pod");
    assert!(t0.elapsed() < deadline, "DEL took {:?}", t0.elapsed());
    assert_eq!(
        c.api().requests().len(),
        requests,
        "DEL called the API server"
    );
    assert!(!early.has_link("eth0"));
    c.node
        .assert_nothing_left(&result_addrs(add.json.as_ref().unwrap()));
}

/// 50 parallel ADDs (50 pods) after a key rotation, the agent's TokenRequest held by the stand-in
/// until every one of the 50 got its 401: exactly one TokenRequest, and all 50 succeed on retry.
#[test]
fn fifty_parallel_adds_that_all_see_401_cause_one_token_request() {
    if tern_testkit::root::skip() {
        return;
    }
    const N: usize = 50;
    let mut c = Cluster::new("ag50", 30.0);
    c.start_agent();
    let pods: Vec<TestNetns> = (0..N).map(|i| c.node.pod(&format!("ag50-{i}"))).collect();
    for i in 0..N {
        c.api().set_pod(
            "default",
            &format!("p{i}"),
            &format!("uid-p{i}"),
            &[],
            false,
        );
    }
    c.api().rotate_signing_key();
    c.renew_agent_token();
    c.api().set_fault_on(TOKEN_PATH, Fault::Hold);

    let children: Vec<Child> = pods
        .iter()
        .enumerate()
        .map(|(i, pod)| {
            c.node.tool.container_id(&format!("cid-p{i}"));
            c.node.tool.cni_args(Some(&pod_args(&format!("p{i}"))));
            let mut cmd = c.node.tool.command("add", Some(&pod.path()));
            cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
            cmd.spawn().unwrap()
        })
        .collect();
    let unauthorized = |c: &Cluster| {
        c.api()
            .requests()
            .iter()
            .filter(|r| r.path.contains("/pods/p") && r.status == 401)
            .count()
    };
    let t0 = Instant::now();
    while unauthorized(&c) < N {
        assert!(
            t0.elapsed() < Duration::from_secs(25),
            "only {} of {N} ADDs got their 401",
            unauthorized(&c)
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(c.token_requests(), 2, "one TokenRequest in flight (held)");
    c.api().set_fault(None);

    let mut addrs = Vec::new();
    for (i, child) in children.into_iter().enumerate() {
        let out = child.wait_with_output().unwrap();
        assert!(
            out.status.success(),
            "ADD p{i}: {}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        let r: Value = serde_json::from_slice(&out.stdout).unwrap();
        addrs.extend(result_addrs(&r));
    }
    assert_eq!(
        c.token_requests(),
        2,
        "start-up + exactly one refresh for 50 ADDs"
    );
    assert_eq!(unauthorized(&c), N);
    for i in 0..N {
        assert_eq!(c.pod_statuses(&format!("p{i}")), vec![401, 200], "pod p{i}");
    }
    let mut distinct = addrs.clone();
    distinct.sort();
    distinct.dedup();
    assert_eq!(distinct.len(), N, "addresses not distinct");

    for (i, pod) in pods.iter().enumerate() {
        c.node.tool.container_id(&format!("cid-p{i}"));
        ok(&c.node.tool.del(pod.path()).unwrap(), &format!("DEL p{i}"));
    }
    c.node.assert_nothing_left(&addrs);
}
