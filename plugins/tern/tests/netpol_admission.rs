//! `networkPolicy` in tern's netconf: ADD asks tern-agent to admit the pod before it returns.
//! Stand-in agents on a Unix socket (none listening, one that starts listening during the wait,
//! one that never answers, one that refuses, one that admits) against the real ADD in a throwaway host and pod netns: a refusal is code 11
//! and leaves nothing (no veth, no route, no state, no lease); an admission returns the result;
//! DEL never asks. Root is needed (netns, veth).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixListener;
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use tern_cni::code;
use tern_testkit::tern_host_veth;

mod common;
use common::{with_prev, Node};

/// `CNI_ARGS` as the kubelet passes them.
const POD: &str = "IgnoreUnknown=1;K8S_POD_NAMESPACE=x;K8S_POD_NAME=web;K8S_POD_UID=u1";

fn conf(node: &Node, socket: &Path, wait: f64) -> Value {
    let mut c = node.conf("1.1.0");
    c["agentSocket"] = json!(socket);
    c["networkPolicy"] = json!({"waitSeconds": wait});
    c
}

/// Nothing of the attachment `c1` is left on the node.
fn assert_nothing_left(node: &Node, what: &str) {
    let veth = tern_host_veth("c1", "eth0");
    assert!(!node.hp.host.has_link(&veth), "{what}: host veth");
    assert!(!node.hp.pod.has_link("eth0"), "{what}: pod eth0");
    assert!(
        !node.hp.host.ip(&["-4", "route"]).contains("10.98.0.2"),
        "{what}: host route"
    );
    assert!(!node.state_file("c1").exists(), "{what}: state");
    assert!(!node.lease("10.98.0.2").exists(), "{what}: lease");
}

/// A stand-in agent serving one connection: it sends the request line it read to the test and
/// answers `answer` (`None`: it keeps the connection open and never answers).
fn stand_in_agent(socket: &Path, answer: Option<&'static str>) -> mpsc::Receiver<Value> {
    let l = UnixListener::bind(socket).unwrap();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let (mut s, _) = l.accept().unwrap();
        let mut line = String::new();
        BufReader::new(&s).read_line(&mut line).unwrap();
        tx.send(serde_json::from_str(&line).unwrap()).unwrap();
        match answer {
            Some(a) => writeln!(s, "{a}").unwrap(),
            None => {
                let _ = tx.send(Value::Null);
                std::thread::park(); // holds the connection open, unanswered
            }
        }
    });
    rx
}

fn socket(node: &Node, name: &str) -> PathBuf {
    node.dir.join(name)
}

fn refused(node: &Node, c: &Value, args: &str) -> String {
    let (status, err) = node.call_with_args("ADD", "c1", c, &node.dir.join("bin"), Some(args));
    assert_eq!(status, 1, "{err}");
    assert_eq!(err["code"], json!(code::TRY_AGAIN_LATER), "{err}");
    let msg = err["msg"].as_str().unwrap().to_owned();
    assert!(msg.contains("pod x/web not admitted"), "{msg}");
    msg
}

#[test]
fn no_agent_listening_is_code_11_and_leaves_nothing() {
    if tern_testkit::root::skip() {
        return;
    }
    let node = Node::new("tern-np-none");
    let c = conf(&node, &socket(&node, "absent.sock"), 0.6);
    let started = Instant::now();
    let msg = refused(&node, &c, POD);
    // Tried again for the whole wait (an agent that restarts listens again within it).
    assert!(
        started.elapsed() >= Duration::from_millis(500),
        "{:?}",
        started.elapsed()
    );
    assert!(msg.contains("connect"), "{msg}");
    assert_nothing_left(&node, "no agent");
    // DEL never talks to the agent, and an ADD that names no pod (no policy can select it) is
    // not held.
    let (status, out) = node.call("ADD", "c1", &c, &node.dir.join("bin"));
    assert_eq!(status, 0, "{out}");
    assert_eq!(node.ok("DEL", "c1", &with_prev(&c, &out)), Value::Null);
    assert_nothing_left(&node, "after DEL");
}

#[test]
fn an_agent_that_refuses_or_never_answers_is_code_11_and_leaves_nothing() {
    if tern_testkit::root::skip() {
        return;
    }
    let node = Node::new("tern-np-refuse");
    let s = socket(&node, "refuse.sock");
    let seen = stand_in_agent(
        &s,
        Some(r#"{"outcome":"failed","reason":"this agent does not enforce NetworkPolicy"}"#),
    );
    let msg = refused(&node, &conf(&node, &s, 5.0), POD);
    assert!(msg.contains("does not enforce NetworkPolicy"), "{msg}");
    assert_nothing_left(&node, "refused");
    let mut req = seen.recv().unwrap();
    // What is left of the 5 s wait when the request was written.
    let wait_ms = req["waitMs"].take().as_u64().unwrap();
    assert!((4900..=5000).contains(&wait_ms), "{wait_ms}");
    assert_eq!(
        req,
        json!({"op": "admitPod", "namespace": "x", "name": "web", "uid": "u1",
               "ips": ["10.98.0.2", "fd00:98::2"], "waitMs": null})
    );

    let s = socket(&node, "silent.sock");
    let seen = stand_in_agent(&s, None);
    let msg = refused(&node, &conf(&node, &s, 0.5), POD);
    assert!(msg.contains("no answer within"), "{msg}");
    assert_eq!(seen.recv().unwrap()["op"], "admitPod");
    assert_nothing_left(&node, "no answer");
}

#[test]
fn an_agent_that_starts_listening_during_the_wait_admits_the_pod() {
    if tern_testkit::root::skip() {
        return;
    }
    let node = Node::new("tern-np-late");
    let s = socket(&node, "late.sock");
    let late = s.clone();
    let agent = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(800));
        stand_in_agent(&late, Some(r#"{"outcome":"admitted","isolated":true}"#))
    });
    let c = conf(&node, &s, 5.0);
    let started = Instant::now();
    let (status, out) = node.call_with_args("ADD", "c1", &c, &node.dir.join("bin"), Some(POD));
    let took = started.elapsed();
    assert_eq!(status, 0, "{out}");
    assert!(
        took >= Duration::from_millis(800) && took < Duration::from_secs(3),
        "{took:?}"
    );
    // The request the agent got carries what is left of the wait, not the whole of it.
    let req = agent.join().unwrap().recv().unwrap();
    let wait_ms = req["waitMs"].as_u64().unwrap();
    assert!(wait_ms < 4300 && wait_ms > 3000, "{req}");
    assert_eq!(node.ok("DEL", "c1", &with_prev(&c, &out)), Value::Null);
    assert_nothing_left(&node, "after DEL");
}

#[test]
fn an_admitted_pod_is_wired() {
    if tern_testkit::root::skip() {
        return;
    }
    let node = Node::new("tern-np-ok");
    let s = socket(&node, "ok.sock");
    let _seen = stand_in_agent(&s, Some(r#"{"outcome":"admitted","isolated":true}"#));
    let c = conf(&node, &s, 5.0);
    let (status, out) = node.call_with_args("ADD", "c1", &c, &node.dir.join("bin"), Some(POD));
    assert_eq!(status, 0, "{out}");
    assert_eq!(out["ips"][0]["address"], "10.98.0.2/32");
    assert!(node.hp.host.has_link(&tern_host_veth("c1", "eth0")));
    // The stand-in served its one connection: a DEL that asked would fail to connect.
    assert_eq!(node.ok("DEL", "c1", &with_prev(&c, &out)), Value::Null);
    assert_nothing_left(&node, "after DEL");
}
