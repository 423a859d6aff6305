//! The harness's own watch of the collections the timed changes write (np-free's Pods and
//! NetworkPolicies, every Namespace): one long-lived `curl -N` per collection, each event line
//! stamped on receipt. It gives a change the instant the API server had committed the write and
//! its watch cache sent the event to watchers — the same stream each agent reads, on the same
//! host — so "seen → kernel" is the agent's own part (decode, store, compile, the kernel write)
//! plus whatever separates two watchers of one event; the write's start and return bound the
//! whole from above and below.
//!
//! A watch that ends (its `timeoutSeconds`, an API server restart) resumes from the last
//! resourceVersion it saw; after 410 Gone (a compaction) it lists one item for the collection's
//! current resourceVersion and watches from there, so no initial ADDED events arrive (which
//! would be stamped late and mistaken for a change's).
//!
//! Invariant: an event is matched by its collection, object name and type (MODIFIED and DELETED
//! are never initial events), the first at or after the write's start.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::{self, JoinHandle};
use std::time::Duration;

use serde_json::Value;

use crate::cluster::api::{now, Api};

/// The collections watched: a short name and the API path.
pub(crate) const COLLECTIONS: [(&str, &str); 3] = [
    ("pods", "/api/v1/namespaces/np-free/pods"),
    (
        "networkpolicies",
        "/apis/networking.k8s.io/v1/namespaces/np-free/networkpolicies",
    ),
    ("namespaces", "/api/v1/namespaces"),
];

/// One event as received.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Seen {
    pub(crate) at: f64,
    pub(crate) collection: &'static str,
    pub(crate) name: String,
    pub(crate) kind: String,
    pub(crate) rv: String,
}

/// What one watch line said: the event (a BOOKMARK too: its resourceVersion is where to
/// resume), or `Err(code)` for an ERROR event (410: the resourceVersion was compacted) or a
/// line that is not an event (code 0).
pub(crate) fn parse_line(collection: &'static str, at: f64, line: &str) -> Result<Seen, u64> {
    let v: Value = serde_json::from_str(line).map_err(|_| 0u64)?;
    let kind = v["type"].as_str().unwrap_or("").to_owned();
    if kind == "ERROR" || kind.is_empty() {
        return Err(v["object"]["code"].as_u64().unwrap_or(0));
    }
    let meta = &v["object"]["metadata"];
    Ok(Seen {
        at,
        collection,
        name: meta["name"].as_str().unwrap_or("").to_owned(),
        rv: meta["resourceVersion"].as_str().unwrap_or("").to_owned(),
        kind,
    })
}

/// The first event of `collection`'s `name` of type `kind` at or after `t0`, in `events`.
pub(crate) fn first_seen(
    events: &[Seen],
    collection: &str,
    name: &str,
    kind: &str,
    t0: f64,
) -> Option<f64> {
    events
        .iter()
        .find(|e| e.at >= t0 && e.collection == collection && e.name == name && e.kind == kind)
        .map(|e| e.at)
}

/// The watches, running until dropped.
pub(crate) struct ApiWatch {
    events: Arc<Mutex<Vec<Seen>>>,
    stop: Arc<AtomicBool>,
    children: Arc<Mutex<Vec<Child>>>,
    readers: Vec<JoinHandle<()>>,
}

/// The curl that streams `path` from `rv` (empty: the first list's).
fn stream(api: &Api, path: &str, rv: &str) -> Option<Child> {
    let [ca, cert, key] = api.tls();
    Command::new("curl")
        .args(["-sN", "--cacert", &ca, "--cert", &cert, "--key", &key])
        .arg(format!(
            "{}{path}?watch=1&allowWatchBookmarks=true&timeoutSeconds=600&resourceVersion={rv}",
            api.url
        ))
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .ok()
}

/// The collection's current resourceVersion (a list of one item).
fn list_rv(api: &Api, path: &str) -> Option<String> {
    let body = api.get(&format!("{path}?limit=1")).ok()?;
    let v: Value = serde_json::from_str(&body).ok()?;
    v["metadata"]["resourceVersion"].as_str().map(str::to_owned)
}

/// Watches one collection until `stop`.
fn follow(
    api: &Api,
    (collection, path): (&'static str, &'static str),
    events: &Mutex<Vec<Seen>>,
    stop: &AtomicBool,
    children: &Mutex<Vec<Child>>,
) {
    let mut rv = String::new();
    while !stop.load(Ordering::Relaxed) {
        if rv.is_empty() {
            match list_rv(api, path) {
                Some(r) => rv = r,
                None => {
                    thread::sleep(Duration::from_millis(500));
                    continue;
                }
            }
        }
        let Some(mut child) = stream(api, path, &rv) else {
            thread::sleep(Duration::from_millis(500));
            continue;
        };
        let Some(out) = child.stdout.take() else {
            continue;
        };
        if let Ok(mut c) = children.lock() {
            c.push(child);
        }
        for line in BufReader::new(out).lines() {
            let Ok(line) = line else { break };
            match parse_line(collection, now(), &line) {
                Ok(seen) => {
                    rv.clone_from(&seen.rv);
                    if seen.kind != "BOOKMARK" {
                        if let Ok(mut e) = events.lock() {
                            e.push(seen);
                        }
                    }
                }
                Err(_) => {
                    rv.clear();
                    break;
                }
            }
        }
        if !stop.load(Ordering::Relaxed) {
            thread::sleep(Duration::from_millis(200));
        }
    }
}

impl ApiWatch {
    /// Starts one watch per collection of [`COLLECTIONS`].
    pub(crate) fn start(api: &Api) -> ApiWatch {
        let events = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let children = Arc::new(Mutex::new(Vec::new()));
        let readers = COLLECTIONS
            .iter()
            .map(|&col| {
                let (api, ev, st, ch) = (
                    api.clone(),
                    Arc::clone(&events),
                    Arc::clone(&stop),
                    Arc::clone(&children),
                );
                thread::spawn(move || follow(&api, col, &ev, &st, &ch))
            })
            .collect();
        ApiWatch {
            events,
            stop,
            children,
            readers,
        }
    }

    /// When the harness's watch received `collection`'s `name` event of type `kind`, the first
    /// at or after `t0`.
    pub(crate) fn seen(&self, collection: &str, name: &str, kind: &str, t0: f64) -> Option<f64> {
        self.events
            .lock()
            .ok()
            .and_then(|e| first_seen(&e, collection, name, kind, t0))
    }
}

impl Drop for ApiWatch {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Ok(mut cs) = self.children.lock() {
            for c in cs.iter_mut() {
                let _ = c.kill();
                let _ = c.wait();
            }
        }
        for r in self.readers.drain(..) {
            let _ = r.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_bookmarks_and_gone_are_told_apart_and_matched_by_name_and_type() {
        let ev = |t: &str, name: &str, rv: &str| {
            format!(
                r#"{{"type":"{t}","object":{{"metadata":{{"name":"{name}","resourceVersion":"{rv}"}}}}}}"#
            )
        };
        let a = parse_line("pods", 1.0, &ev("ADDED", "newpeer-3", "10")).unwrap();
        let m = parse_line("pods", 2.0, &ev("MODIFIED", "newpeer-3", "11")).unwrap();
        let b = parse_line("pods", 3.0, &ev("BOOKMARK", "", "12")).unwrap();
        assert_eq!((b.kind.as_str(), b.rv.as_str()), ("BOOKMARK", "12"));
        let gone = r#"{"type":"ERROR","object":{"kind":"Status","code":410}}"#;
        assert_eq!(parse_line("pods", 4.0, gone), Err(410));
        assert_eq!(parse_line("pods", 4.0, "not json"), Err(0));
        let events = vec![a, m];
        assert_eq!(events[1].rv, "11");
        assert_eq!(
            first_seen(&events, "pods", "newpeer-3", "MODIFIED", 0.5),
            Some(2.0)
        );
        assert_eq!(
            first_seen(&events, "pods", "newpeer-3", "ADDED", 1.5),
            None,
            "before the write's start"
        );
        assert_eq!(
            first_seen(&events, "namespaces", "newpeer-3", "MODIFIED", 0.0),
            None
        );
    }
}
