//! Nodes as a collection: `GET /api/v1/nodes` as a paged `NodeList`, and `?watch=1` as the real
//! server streams it (chunked JSON lines, `BOOKMARK` events when asked, an `ERROR` event with a
//! 410 `Expired` Status for a resourceVersion older than the kept history), plus the controls a
//! test needs: compaction of the history and cutting every open watch mid-stream.
//!
//! Invariants: every change to a node bumps one global resourceVersion and is kept as an event;
//! a watch sends exactly the events after its resourceVersion, in order; a cut leaves a
//! half-written event on the wire and closes the connection without the final chunk.

use crate::*;

/// How a watch request is to be served, decided under the lock, streamed without it.
pub(crate) struct WatchPlan {
    from: Option<u64>,
    bookmarks: bool,
    timeout: Duration,
}

/// One entry of the node history: resourceVersion, event type, object.
pub(crate) type NodeEvent = (u64, &'static str, Value);

fn query_param<'a>(query: &'a str, key: &str) -> Option<&'a str> {
    query
        .split('&')
        .filter_map(|kv| kv.split_once('='))
        .find(|(k, _)| *k == key)
        .map(|(_, v)| v)
}

/// The RBAC verb of a request on the collection: `watch` or `list`.
pub(crate) fn verb(query: &str) -> &'static str {
    if matches!(query_param(query, "watch"), Some("1" | "true")) {
        "watch"
    } else {
        "list"
    }
}

/// Records a change: bumps the resourceVersion, stamps it into `node`, keeps the event.
pub(crate) fn record(s: &mut State, kind: &'static str, mut node: Value) -> Value {
    s.node_rv += 1;
    node["metadata"]["resourceVersion"] = json!(s.node_rv.to_string());
    s.node_events.push((s.node_rv, kind, node.clone()));
    node
}

/// `GET /api/v1/nodes[?watch=1...]`: the list as a response, or the plan of a watch.
pub(crate) fn collection(s: &State, query: &str) -> Result<WatchPlan, Response> {
    if verb(query) == "watch" {
        let from = query_param(query, "resourceVersion")
            .filter(|v| !v.is_empty() && *v != "0")
            .and_then(|v| v.parse().ok());
        let timeout = query_param(query, "timeoutSeconds")
            .and_then(|v| v.parse().ok())
            .map_or(Duration::from_secs(1800), Duration::from_secs);
        let bookmarks = query_param(query, "allowWatchBookmarks") == Some("true");
        return Ok(WatchPlan {
            from,
            bookmarks,
            timeout,
        });
    }
    let limit = query_param(query, "limit")
        .and_then(|v| v.parse::<usize>().ok())
        .filter(|l| *l > 0)
        .unwrap_or(usize::MAX);
    let offset = query_param(query, "continue")
        .and_then(|c| c.strip_prefix('c'))
        .and_then(|c| c.parse::<usize>().ok())
        .unwrap_or(0);
    let items: Vec<Value> = s
        .nodes
        .values()
        .skip(offset)
        .take(limit)
        .map(|n| {
            let mut n = n.clone();
            if let Some(o) = n.as_object_mut() {
                o.remove("kind");
                o.remove("apiVersion");
            }
            n
        })
        .collect();
    let mut meta = json!({"resourceVersion": s.node_rv.to_string()});
    if offset + items.len() < s.nodes.len() {
        meta["continue"] = json!(format!("c{}", offset + items.len()));
        meta["remainingItemCount"] = json!(s.nodes.len() - offset - items.len());
    }
    Err(json_response(
        200,
        &json!({"kind": "NodeList", "apiVersion": "v1", "metadata": meta, "items": items}),
    ))
}

fn bookmark_every(s: &State) -> Duration {
    if s.bookmark_interval.is_zero() {
        Duration::from_secs(1)
    } else {
        s.bookmark_interval.max(Duration::from_millis(50))
    }
}

fn chunk(w: &mut impl Write, data: &[u8]) -> std::io::Result<()> {
    w.write_all(format!("{:x}\r\n", data.len()).as_bytes())?;
    w.write_all(data)?;
    w.write_all(b"\r\n")?;
    w.flush()
}

fn event_line(kind: &str, object: &Value) -> Vec<u8> {
    let mut v = json!({"type": kind, "object": object})
        .to_string()
        .into_bytes();
    v.push(b'\n');
    v
}

/// Streams a watch on `w` until its timeout, a cut, the server's stop, or a write failure.
pub(crate) fn stream(shared: &Shared, w: &mut impl Write, plan: &WatchPlan) {
    let head = "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n";
    if w.write_all(head.as_bytes()).is_err() {
        return;
    }
    let started = Instant::now();
    let (mut sent_rv, generation, backlog) = {
        let s = shared.lock();
        match plan.from {
            Some(rv) if rv < s.node_compacted => {
                let status = status_body(
                    410,
                    "Expired",
                    &format!("too old resource version: {rv} ({})", s.node_compacted),
                    None,
                );
                let _ = chunk(w, &event_line("ERROR", &status));
                let _ = w.write_all(b"0\r\n\r\n");
                return;
            }
            Some(rv) => (rv, s.watch_generation, Vec::new()),
            // No resourceVersion: the current state as ADDED events, then changes.
            None => (
                s.node_rv,
                s.watch_generation,
                s.nodes
                    .values()
                    .map(|n| event_line("ADDED", n))
                    .collect::<Vec<_>>(),
            ),
        }
    };
    for line in backlog {
        if chunk(w, &line).is_err() {
            return;
        }
    }
    let mut last_bookmark = Instant::now();
    loop {
        let (lines, cut, interval) = {
            let mut s = shared.lock();
            loop {
                let pending = s.node_events.iter().any(|(rv, _, _)| *rv > sent_rv);
                let interval = bookmark_every(&s);
                if pending
                    || s.watch_generation != generation
                    || shared.stop.load(Ordering::SeqCst)
                    || started.elapsed() >= plan.timeout
                    || (plan.bookmarks && last_bookmark.elapsed() >= interval)
                {
                    break;
                }
                s = shared
                    .wake
                    .wait_timeout(s, Duration::from_millis(50))
                    .map(|(g, _)| g)
                    .unwrap_or_else(|e| e.into_inner().0);
            }
            let lines: Vec<(u64, Vec<u8>)> = s
                .node_events
                .iter()
                .filter(|(rv, _, _)| *rv > sent_rv)
                .map(|(rv, kind, obj)| (*rv, event_line(kind, obj)))
                .collect();
            (lines, s.watch_generation != generation, bookmark_every(&s))
        };
        if cut {
            // Half an event, then the connection closes without the last chunk.
            let half = event_line("MODIFIED", &json!({"metadata": {"name": "cut"}}));
            let _ = chunk(w, &half[..half.len() / 2]);
            return;
        }
        if shared.stop.load(Ordering::SeqCst) {
            return;
        }
        for (rv, line) in lines {
            if chunk(w, &line).is_err() {
                return;
            }
            sent_rv = rv;
        }
        if started.elapsed() >= plan.timeout {
            let _ = w.write_all(b"0\r\n\r\n");
            let _ = w.flush();
            return;
        }
        if plan.bookmarks && last_bookmark.elapsed() >= interval {
            last_bookmark = Instant::now();
            let bm = json!({"kind": "Node", "apiVersion": "v1",
                "metadata": {"resourceVersion": sent_rv.to_string(), "creationTimestamp": null},
                "spec": {}, "status": {}});
            if chunk(w, &event_line("BOOKMARK", &bm)).is_err() {
                return;
            }
        }
    }
}

impl ApiServer {
    /// Stores a node with `spec.podCIDRs` and `status.addresses` of type `InternalIP`
    /// (`ADDED` or `MODIFIED` for watchers); a node's annotations (from PATCH) are kept.
    pub fn set_node_with_ips(&self, name: &str, pod_cidrs: &[&str], internal_ips: &[&str]) {
        let mut spec = json!({});
        if let Some(first) = pod_cidrs.first() {
            spec = json!({"podCIDR": first, "podCIDRs": pod_cidrs});
        }
        let addresses: Vec<Value> = internal_ips
            .iter()
            .map(|a| json!({"type": "InternalIP", "address": a}))
            .chain(std::iter::once(
                json!({"type": "Hostname", "address": name}),
            ))
            .collect();
        let mut s = self.shared.lock();
        let uid = s
            .nodes
            .get(name)
            .and_then(|n| n.pointer("/metadata/uid").cloned())
            .unwrap_or_else(|| json!(uuid()));
        let mut node = json!({"kind": "Node", "apiVersion": "v1",
            "metadata": {"name": name, "uid": uid}, "spec": spec,
            "status": {"addresses": addresses}});
        // Annotations written through PATCH stay, as a kubelet's status update keeps them.
        if let Some(a) = s
            .nodes
            .get(name)
            .and_then(|n| n.pointer("/metadata/annotations").cloned())
        {
            node["metadata"]["annotations"] = a;
        }
        let kind = if s.nodes.contains_key(name) {
            "MODIFIED"
        } else {
            "ADDED"
        };
        let node = record(&mut s, kind, node);
        s.nodes.insert(name.into(), node);
        drop(s);
        self.shared.wake.notify_all();
    }

    /// Deletes a node (`DELETED` for watchers); false when there was none.
    pub fn delete_node(&self, name: &str) -> bool {
        let mut s = self.shared.lock();
        let Some(node) = s.nodes.remove(name) else {
            return false;
        };
        record(&mut s, "DELETED", node);
        drop(s);
        self.shared.wake.notify_all();
        true
    }

    /// Forgets the event history, as etcd compaction does: a watch from any resourceVersion
    /// handed out so far is answered with a 410 `Expired` ERROR event.
    pub fn compact_node_history(&self) {
        let mut s = self.shared.lock();
        // A new resourceVersion past every one handed out: each is now too old, a new list's
        // is not.
        s.node_rv += 1;
        s.node_compacted = s.node_rv;
        s.node_events.clear();
    }

    /// Cuts every open node watch mid-event.
    pub fn cut_node_watches(&self) {
        self.shared.lock().watch_generation += 1;
        self.shared.wake.notify_all();
    }

    /// How often an open watch that asked for bookmarks gets one (default 1 s, floor 50 ms; the
    /// real server sends one about every minute).
    pub fn set_bookmark_interval(&self, every: Duration) {
        self.shared.lock().bookmark_interval = every;
    }

    /// A node's `metadata.annotations[key]`, if the node and the annotation exist.
    pub fn node_annotation(&self, name: &str, key: &str) -> Option<String> {
        let s = self.shared.lock();
        s.nodes
            .get(name)?
            .pointer("/metadata/annotations")?
            .get(key)?
            .as_str()
            .map(str::to_owned)
    }

    /// The current resourceVersion of the node collection.
    pub fn node_resource_version(&self) -> u64 {
        self.shared.lock().node_rv
    }
}

/// `PATCH /api/v1/nodes/{name}/status` with a merge or strategic merge patch: only
/// `metadata.annotations` is applied (a `null` value removes the key), as the status
/// subresource keeps metadata changes; anything else in the patch is ignored (the stand-in
/// keeps no status a test would patch). 415 for another content type, 404 for a missing Node,
/// 400 for a body that is not a JSON object.
pub(crate) fn patch_node_status(
    s: &mut State,
    name: &str,
    headers: &[(String, String)],
    body: &[u8],
) -> Response {
    let ctype = headers
        .iter()
        .find(|(k, _)| k.eq_ignore_ascii_case("content-type"))
        .map(|(_, v)| {
            v.split(';')
                .next()
                .unwrap_or("")
                .trim()
                .to_ascii_lowercase()
        })
        .unwrap_or_default();
    if !matches!(
        ctype.as_str(),
        "application/merge-patch+json" | "application/strategic-merge-patch+json"
    ) {
        return status_response(
            415,
            "UnsupportedMediaType",
            &format!("the body of the request was in an unknown format - accepted media types include: application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml, application/strategic-merge-patch+json (got {ctype:?})"),
            None,
        );
    }
    let patch: Value = match serde_json::from_slice(body) {
        Ok(v @ Value::Object(_)) => v,
        _ => {
            return status_response(400, "BadRequest", "the patch is not a JSON object", None);
        }
    };
    let Some(mut node) = s.nodes.get(name).cloned() else {
        return not_found("nodes", name);
    };
    if let Some(Value::Object(ann)) = patch.pointer("/metadata/annotations") {
        let meta = &mut node["metadata"];
        if !meta["annotations"].is_object() {
            meta["annotations"] = json!({});
        }
        for (k, v) in ann {
            if let Some(a) = meta["annotations"].as_object_mut() {
                if v.is_null() {
                    a.remove(k);
                } else {
                    a.insert(k.clone(), v.clone());
                }
            }
        }
    }
    let node = record(s, "MODIFIED", node);
    s.nodes.insert(name.to_owned(), node.clone());
    json_response(200, &node)
}
