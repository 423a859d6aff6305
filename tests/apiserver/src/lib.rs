//! tern-apiserver: an HTTPS stand-in for the kube-apiserver paths tern uses, for tests only.
//!
//! It serves `POST /api/v1/namespaces/{ns}/serviceaccounts/{name}/token` (TokenRequest),
//! `GET /api/v1/namespaces/{ns}/pods/{name}`, `GET /api/v1/nodes/{name}` and the node list and
//! watch (`GET /api/v1/nodes`, `?watch=1`) with the status codes,
//! headers and `Status` bodies the real server sends, authenticates bearer
//! tokens it issued itself (HS256 JWTs, expiry checked with the real 60 s leeway against its own,
//! movable clock) and lets tests inject faults, stall, move its clock, rotate its signing key and
//! count requests per path. See README.md for what it leaves out.
//!
//! Invariants: every request is counted (path without query) before any fault applies; each
//! connection is served by its own thread and answered with `Connection: close`; a stalled
//! connection is held open without an answer until the fault is cleared or the server dropped.

#![allow(clippy::missing_panics_doc)]

mod handlers;
mod http;
mod jwt;
mod nodes;
mod tls;

use std::collections::{BTreeMap, BTreeSet};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use ring::rand::SecureRandom as _;
use serde_json::{json, Value};

pub use jwt::ISSUER;

use handlers::*;
pub use handlers::{rfc3339, uuid};
use http::*;

/// TokenRequest default lifetime (`SetDefaultsTokenRequestSpec`).
pub const DEFAULT_EXPIRATION_SECONDS: i64 = 3600;
/// `MinTokenAgeSec`.
pub const MIN_EXPIRATION_SECONDS: i64 = 600;
/// `WarnOnlyBoundTokenExpirationSeconds`: the admission-injected lifetime that triggers the 1-year extension.
pub const WARN_ONLY_BOUND_SECONDS: i64 = 3607;
/// `ExpirationExtensionSeconds` (1 year).
pub const EXTENDED_EXPIRATION_SECONDS: i64 = 24 * 365 * 60 * 60;
/// go-jose's default leeway applied to `exp`/`nbf`.
pub const LEEWAY_SECONDS: i64 = 60;

/// An injected failure.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fault {
    /// Answer with this status and the real server's body for it (401, 403, 404, 500, 503, 504;
    /// others get a generic Status).
    Status(u16),
    /// Plain-text 429 with `Retry-After: <seconds>`, as max-in-flight/APF send.
    TooManyRequests {
        /// The `Retry-After` value.
        retry_after: u64,
    },
    /// Read the request, then never answer (until the fault is cleared; the connection is then closed).
    Stall,
    /// Read the request and hold it until the fault is cleared, then answer it normally: a slow
    /// server whose answer arrives exactly when the test says (e.g. a TokenRequest in flight
    /// while clients pile up behind it).
    Hold,
}

/// One request as the server saw it.
#[derive(Debug, Clone)]
pub struct RequestRecord {
    /// When it was read (monotonic).
    pub at: Instant,
    /// HTTP method.
    pub method: String,
    /// Path without query.
    pub path: String,
    /// Query string without `?` (empty when none): tells a list from a watch.
    pub query: String,
    /// Status answered (0 when stalled and never answered).
    pub status: u16,
}

#[derive(Default)]
pub(crate) struct State {
    pub(crate) clock_offset: i64,
    pub(crate) key: Vec<u8>,
    pub(crate) key_generation: u32,
    pub(crate) max_expiration: Option<i64>,
    pub(crate) service_accounts: BTreeMap<(String, String), String>,
    pub(crate) pods: BTreeMap<(String, String), Value>,
    pub(crate) nodes: BTreeMap<String, Value>,
    pub(crate) events: BTreeMap<(String, String), Value>,
    pub(crate) fault: Option<(Option<String>, Fault)>,
    pub(crate) forbidden: BTreeSet<(String, String, String)>,
    pub(crate) requests: Vec<RequestRecord>,
    pub(crate) issued: u64,
    pub(crate) node_rv: u64,
    pub(crate) node_events: Vec<nodes::NodeEvent>,
    pub(crate) node_compacted: u64,
    pub(crate) watch_generation: u64,
    pub(crate) bookmark_interval: Duration,
}

pub(crate) struct Shared {
    pub(crate) state: Mutex<State>,
    pub(crate) wake: Condvar,
    pub(crate) stop: AtomicBool,
}

impl Shared {
    pub(crate) fn lock(&self) -> MutexGuard<'_, State> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// A running stand-in. Dropping it stops the accept loop and releases stalled connections.
pub struct ApiServer {
    addr: SocketAddr,
    ca_pem: String,
    shared: Arc<Shared>,
    accept: Option<JoinHandle<()>>,
}

impl ApiServer {
    /// Starts on `127.0.0.1:0` with a fresh CA and signing key.
    ///
    /// # Errors
    /// Binding or certificate generation failed.
    pub fn start() -> std::io::Result<Self> {
        Self::start_on("127.0.0.1:0".parse().map_err(std::io::Error::other)?)
    }

    /// Starts on `bind` (its address also goes into the server certificate). To serve inside
    /// another network namespace, call it from a thread in that namespace: the listener and its
    /// accept thread stay there.
    ///
    /// # Errors
    /// Binding or certificate generation failed.
    pub fn start_on(bind: SocketAddr) -> std::io::Result<Self> {
        let (config, ca_pem) = tls::generate(bind.ip())?;
        let listener = TcpListener::bind(bind)?;
        let addr = listener.local_addr()?;
        let shared = Arc::new(Shared {
            state: Mutex::new(State {
                key: random_bytes(32),
                key_generation: 1,
                ..State::default()
            }),
            wake: Condvar::new(),
            stop: AtomicBool::new(false),
        });
        let s2 = Arc::clone(&shared);
        let accept = std::thread::Builder::new()
            .name("apiserver-accept".into())
            .spawn(move || {
                for conn in listener.incoming() {
                    if s2.stop.load(Ordering::SeqCst) {
                        break;
                    }
                    let Ok(conn) = conn else { continue };
                    let (s3, cfg) = (Arc::clone(&s2), Arc::clone(&config));
                    let _ = std::thread::Builder::new()
                        .name("apiserver-conn".into())
                        .spawn(move || serve(&s3, &cfg, conn));
                }
            })?;
        Ok(ApiServer {
            addr,
            ca_pem,
            shared,
            accept: Some(accept),
        })
    }

    /// `https://127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        format!("https://{}", self.addr)
    }

    /// The listening address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The CA certificate (PEM) that signed the server certificate.
    pub fn ca_pem(&self) -> &str {
        &self.ca_pem
    }

    /// Writes the CA PEM to `path`.
    ///
    /// # Errors
    /// The write failed.
    pub fn write_ca(&self, path: &Path) -> std::io::Result<()> {
        std::fs::write(path, &self.ca_pem)
    }

    /// The server's clock (Unix seconds): the real clock plus the offset tests set.
    pub fn now(&self) -> i64 {
        unix_now() + self.shared.lock().clock_offset
    }

    /// Moves the server's clock by `secs` (may be negative).
    pub fn advance_clock(&self, secs: i64) {
        self.shared.lock().clock_offset += secs;
    }

    /// Replaces the signing key: every token issued so far is refused with 401.
    pub fn rotate_signing_key(&self) {
        let mut s = self.shared.lock();
        s.key = random_bytes(32);
        s.key_generation += 1;
    }

    /// `--service-account-max-token-expiration` in seconds (`None`: no cap). The real server only
    /// accepts values in [3600, 2^32]; this is not enforced so tests can use shorter caps.
    pub fn set_max_token_expiration(&self, secs: Option<i64>) {
        self.shared.lock().max_expiration = secs;
    }

    /// Creates a service account (idempotent); returns its UID.
    pub fn add_service_account(&self, ns: &str, name: &str) -> String {
        self.shared
            .lock()
            .service_accounts
            .entry((ns.into(), name.into()))
            .or_insert_with(uuid)
            .clone()
    }

    /// Deletes a service account: its tokens stop authenticating.
    pub fn delete_service_account(&self, ns: &str, name: &str) {
        self.shared
            .lock()
            .service_accounts
            .remove(&(ns.to_owned(), name.to_owned()));
    }

    /// Issues a token for `ns/name` (created if missing) valid for `secs` from the server clock,
    /// as the kubelet's projected token would be.
    pub fn issue_token(&self, ns: &str, name: &str, secs: i64) -> String {
        self.add_service_account(ns, name);
        let mut s = self.shared.lock();
        let now = unix_now() + s.clock_offset;
        mint(&mut s, ns, name, now, now + secs, None)
    }

    /// Stores a pod object; `uid` and the annotations go into `metadata`. `deleting` sets
    /// `metadata.deletionTimestamp` to the server's now.
    pub fn set_pod(
        &self,
        ns: &str,
        name: &str,
        uid: &str,
        annotations: &[(&str, &str)],
        deleting: bool,
    ) {
        let mut meta = json!({"name": name, "namespace": ns, "uid": uid, "resourceVersion": "1",
            "creationTimestamp": rfc3339(self.now())});
        if !annotations.is_empty() {
            let map: serde_json::Map<String, Value> = annotations
                .iter()
                .map(|(k, v)| ((*k).to_owned(), Value::String((*v).to_owned())))
                .collect();
            meta["annotations"] = Value::Object(map);
        }
        if deleting {
            meta["deletionTimestamp"] = Value::String(rfc3339(self.now()));
        }
        let pod = json!({"kind": "Pod", "apiVersion": "v1", "metadata": meta,
            "spec": {"nodeName": "node-1", "serviceAccountName": "default", "containers": [{"name": "c", "image": "busybox"}]},
            "status": {"phase": "Pending"}});
        self.shared
            .lock()
            .pods
            .insert((ns.into(), name.into()), pod);
    }

    /// Stores a pod object as given.
    pub fn set_pod_json(&self, ns: &str, name: &str, pod: Value) {
        self.shared
            .lock()
            .pods
            .insert((ns.into(), name.into()), pod);
    }

    /// Every Event created, in name order.
    pub fn events(&self) -> Vec<Value> {
        self.shared.lock().events.values().cloned().collect()
    }

    /// Removes a pod.
    pub fn delete_pod(&self, ns: &str, name: &str) {
        self.shared
            .lock()
            .pods
            .remove(&(ns.to_owned(), name.to_owned()));
    }

    /// Stores a node with `spec.podCIDRs` (and `spec.podCIDR` = the first one).
    pub fn set_node(&self, name: &str, pod_cidrs: &[&str]) {
        let mut spec = json!({});
        if let Some(first) = pod_cidrs.first() {
            spec = json!({"podCIDR": first, "podCIDRs": pod_cidrs});
        }
        let node = json!({"kind": "Node", "apiVersion": "v1",
            "metadata": {"name": name, "uid": uuid()}, "spec": spec});
        let mut s = self.shared.lock();
        let kind = if s.nodes.contains_key(name) {
            "MODIFIED"
        } else {
            "ADDED"
        };
        let node = nodes::record(&mut s, kind, node);
        s.nodes.insert(name.into(), node);
        drop(s);
        self.shared.wake.notify_all();
    }

    /// Injects `fault` for every request (`None` clears it).
    pub fn set_fault(&self, fault: Option<Fault>) {
        self.shared.lock().fault = fault.map(|f| (None, f));
        self.shared.wake.notify_all();
    }

    /// Injects `fault` only for requests whose path contains `path_part`.
    pub fn set_fault_on(&self, path_part: &str, fault: Fault) {
        self.shared.lock().fault = Some((Some(path_part.into()), fault));
        self.shared.wake.notify_all();
    }

    /// Makes `user` (e.g. `system:serviceaccount:tern:tern-cni`) get 403 for `verb` on
    /// `resource` (e.g. `pods`, `serviceaccounts/token`, `nodes`). Everything else an
    /// authenticated user asks is allowed; anonymous requests always get 403.
    pub fn forbid(&self, user: &str, verb: &str, resource: &str) {
        self.shared
            .lock()
            .forbidden
            .insert((user.into(), verb.into(), resource.into()));
    }

    /// Lifts every [`ApiServer::forbid`].
    pub fn allow_all(&self) {
        self.shared.lock().forbidden.clear();
    }

    /// Requests seen for `path` (any method, query excluded).
    pub fn count(&self, path: &str) -> usize {
        self.shared
            .lock()
            .requests
            .iter()
            .filter(|r| r.path == path)
            .count()
    }

    /// Request counts per path.
    pub fn counts(&self) -> BTreeMap<String, usize> {
        let mut m = BTreeMap::new();
        for r in &self.shared.lock().requests {
            *m.entry(r.path.clone()).or_insert(0) += 1;
        }
        m
    }

    /// Every request seen so far, in order.
    pub fn requests(&self) -> Vec<RequestRecord> {
        self.shared.lock().requests.clone()
    }

    /// Forgets the request log.
    pub fn reset_counts(&self) {
        self.shared.lock().requests.clear();
    }

    /// Tokens issued so far (TokenRequests answered 201 plus [`ApiServer::issue_token`]).
    pub fn issued(&self) -> u64 {
        self.shared.lock().issued
    }
}

impl Drop for ApiServer {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        self.shared.wake.notify_all();
        let _ = TcpStream::connect(self.addr);
        if let Some(h) = self.accept.take() {
            let _ = h.join();
        }
    }
}
