//! tern-apiserver: an HTTPS stand-in for the kube-apiserver paths tern uses, for tests only.
//!
//! It serves `POST /api/v1/namespaces/{ns}/serviceaccounts/{name}/token` (TokenRequest),
//! `GET /api/v1/namespaces/{ns}/pods/{name}` and `GET /api/v1/nodes/{name}` with the status codes,
//! headers and `Status` bodies the real server sends, authenticates bearer
//! tokens it issued itself (HS256 JWTs, expiry checked with the real 60 s leeway against its own,
//! movable clock) and lets tests inject faults, stall, move its clock, rotate its signing key and
//! count requests per path. See README.md for what it leaves out.
//!
//! Invariants: every request is counted (path without query) before any fault applies; each
//! connection is served by its own thread and answered with `Connection: close`; a stalled
//! connection is held open without an answer until the fault is cleared or the server dropped.

#![allow(clippy::missing_panics_doc)]

mod jwt;
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
    /// Status answered (0 when stalled and never answered).
    pub status: u16,
}

#[derive(Default)]
struct State {
    clock_offset: i64,
    key: Vec<u8>,
    key_generation: u32,
    max_expiration: Option<i64>,
    service_accounts: BTreeMap<(String, String), String>,
    pods: BTreeMap<(String, String), Value>,
    nodes: BTreeMap<String, Value>,
    fault: Option<(Option<String>, Fault)>,
    forbidden: BTreeSet<(String, String, String)>,
    requests: Vec<RequestRecord>,
    issued: u64,
}

struct Shared {
    state: Mutex<State>,
    wake: Condvar,
    stop: AtomicBool,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
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

fn random_bytes(n: usize) -> Vec<u8> {
    let mut v = vec![0u8; n];
    let _ = ring::rand::SystemRandom::new().fill(&mut v);
    v
}

/// A random RFC 4122 version-4 UUID string.
pub fn uuid() -> String {
    let mut b = random_bytes(16);
    b[6] = (b[6] & 0x0f) | 0x40;
    b[8] = (b[8] & 0x3f) | 0x80;
    let h: String = b.iter().map(|x| format!("{x:02x}")).collect();
    format!(
        "{}-{}-{}-{}-{}",
        &h[0..8],
        &h[8..12],
        &h[12..16],
        &h[16..20],
        &h[20..32]
    )
}

fn unix_now() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0)
}

/// Unix seconds → `YYYY-MM-DDTHH:MM:SSZ` (the project's one calendar, in tern-kube).
pub fn rfc3339(unix: i64) -> String {
    tern_kube::time::format_rfc3339(unix)
}

impl ApiServer {
    /// Starts on `127.0.0.1:0` with a fresh CA and signing key.
    ///
    /// # Errors
    /// Binding or certificate generation failed.
    pub fn start() -> std::io::Result<Self> {
        Self::start_on("127.0.0.1:0".parse().map_err(std::io::Error::other)?)
    }

    /// Starts on `bind`.
    ///
    /// # Errors
    /// Binding or certificate generation failed.
    pub fn start_on(bind: SocketAddr) -> std::io::Result<Self> {
        let (config, ca_pem) = tls::generate()?;
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
            "metadata": {"name": name, "uid": uuid(), "resourceVersion": "1"}, "spec": spec});
        self.shared.lock().nodes.insert(name.into(), node);
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

fn mint(s: &mut State, ns: &str, name: &str, now: i64, exp: i64, warnafter: Option<i64>) -> String {
    s.issued += 1;
    let sa_uid = s
        .service_accounts
        .get(&(ns.to_owned(), name.to_owned()))
        .cloned()
        .unwrap_or_default();
    let mut k8s = json!({"namespace": ns, "serviceaccount": {"name": name, "uid": sa_uid}});
    if let Some(w) = warnafter {
        k8s["warnafter"] = json!(w);
    }
    let claims = json!({"aud": [ISSUER], "exp": exp, "iat": now, "iss": ISSUER, "jti": uuid(),
        "kubernetes.io": k8s, "nbf": now, "sub": format!("system:serviceaccount:{ns}:{name}")});
    jwt::sign(&s.key, &format!("standin-{}", s.key_generation), &claims)
}

/// An HTTP response about to be written.
struct Response {
    status: u16,
    headers: Vec<(&'static str, String)>,
    body: Vec<u8>,
}

fn reason_phrase(code: u16) -> &'static str {
    match code {
        200 => "OK",
        201 => "Created",
        400 => "Bad Request",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "Not Found",
        405 => "Method Not Allowed",
        409 => "Conflict",
        422 => "Unprocessable Entity",
        429 => "Too Many Requests",
        500 => "Internal Server Error",
        503 => "Service Unavailable",
        504 => "Gateway Timeout",
        _ => "Status",
    }
}

fn json_response(status: u16, body: &Value) -> Response {
    Response {
        status,
        headers: vec![("Content-Type", "application/json".into())],
        body: body.to_string().into_bytes(),
    }
}

/// A `metav1.Status` failure body with the Go struct's key order.
fn status_body(code: u16, reason: &str, message: &str, details: Option<Value>) -> Value {
    let mut v = json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": message, "reason": reason});
    if let Some(d) = details {
        v["details"] = d;
    }
    v["code"] = json!(code);
    v
}

fn status_response(code: u16, reason: &str, message: &str, details: Option<Value>) -> Response {
    let mut r = json_response(code, &status_body(code, reason, message, details));
    if code == 403 || code == 503 {
        r.headers.push(("X-Content-Type-Options", "nosniff".into()));
    }
    if code == 503 {
        r.headers.push(("Retry-After", "1".into()));
    }
    r
}

fn unauthorized() -> Response {
    status_response(401, "Unauthorized", "Unauthorized", None)
}

fn not_found(kind: &str, name: &str) -> Response {
    status_response(
        404,
        "NotFound",
        &format!("{kind} \"{name}\" not found"),
        Some(json!({"name": name, "kind": kind})),
    )
}

fn forbidden(user: &str, verb: &str, resource: &str, name: &str, ns: Option<&str>) -> Response {
    let kind = resource.split('/').next().unwrap_or(resource);
    let scope = match ns {
        Some(ns) => format!("in the namespace \"{ns}\""),
        None => "at the cluster scope".into(),
    };
    let msg = format!("{kind} \"{name}\" is forbidden: User \"{user}\" cannot {verb} resource \"{resource}\" in API group \"\" {scope}");
    status_response(
        403,
        "Forbidden",
        &msg,
        Some(json!({"name": name, "kind": kind})),
    )
}

fn fault_response(code: u16) -> Response {
    match code {
        401 => unauthorized(),
        429 => too_many(1),
        500 => status_response(500, "InternalError", "Internal error occurred: injected fault",
            Some(json!({"causes": [{"message": "injected fault"}]}))),
        503 => status_response(503, "ServiceUnavailable", "apiserver is shutting down", None),
        504 => status_response(504, "Timeout",
            "Timeout: request did not complete within requested timeout - context deadline exceeded", Some(json!({}))),
        403 => status_response(403, "Forbidden", "forbidden: injected fault", Some(json!({}))),
        404 => status_response(404, "NotFound", "the server could not find the requested resource", Some(json!({}))),
        c => status_response(c, "Unknown", "injected fault", None),
    }
}

fn too_many(retry_after: u64) -> Response {
    Response {
        status: 429,
        headers: vec![
            ("Content-Type", "text/plain; charset=utf-8".into()),
            ("X-Content-Type-Options", "nosniff".into()),
            ("Retry-After", retry_after.to_string()),
        ],
        body: b"Too many requests, please try again later.\n".to_vec(),
    }
}

/// Authenticates the request: `Ok(Some(user))`, `Ok(None)` for anonymous, `Err(401)`.
fn authenticate(s: &State, headers: &[(String, String)]) -> Result<Option<String>, Response> {
    let Some((_, value)) = headers
        .iter()
        .find(|(k, _)| k.eq_ignore_ascii_case("authorization"))
    else {
        return Ok(None);
    };
    let value = value.trim();
    let token = match value.split_once(' ') {
        Some((scheme, t)) if scheme.eq_ignore_ascii_case("bearer") => t.trim(),
        // bearertoken.go: another scheme or a bare "Bearer" is "no credentials", not a failure.
        _ => return Ok(None),
    };
    if token.is_empty() {
        return Ok(None);
    }
    let claims = jwt::verify(&s.key, token).ok_or_else(unauthorized)?;
    let now = unix_now() + s.clock_offset;
    let exp = claims
        .get("exp")
        .and_then(Value::as_i64)
        .ok_or_else(unauthorized)?;
    let nbf = claims.get("nbf").and_then(Value::as_i64).unwrap_or(0);
    if now > exp + LEEWAY_SECONDS || now + LEEWAY_SECONDS < nbf {
        return Err(unauthorized());
    }
    let ns = claims
        .pointer("/kubernetes.io/namespace")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let name = claims
        .pointer("/kubernetes.io/serviceaccount/name")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let uid = claims
        .pointer("/kubernetes.io/serviceaccount/uid")
        .and_then(Value::as_str)
        .unwrap_or_default();
    match s.service_accounts.get(&(ns.to_owned(), name.to_owned())) {
        Some(u) if u == uid => {}
        _ => return Err(unauthorized()),
    }
    Ok(claims.get("sub").and_then(Value::as_str).map(str::to_owned))
}

fn authorize(
    s: &State,
    user: Option<&str>,
    verb: &str,
    resource: &str,
    name: &str,
    ns: Option<&str>,
) -> Result<(), Response> {
    let user_name = user.unwrap_or("system:anonymous");
    if user.is_none()
        || s.forbidden
            .contains(&(user_name.to_owned(), verb.to_owned(), resource.to_owned()))
    {
        return Err(forbidden(user_name, verb, resource, name, ns));
    }
    Ok(())
}

fn handle(
    s: &mut State,
    method: &str,
    path: &str,
    headers: &[(String, String)],
    body: &[u8],
) -> Response {
    let segs: Vec<&str> = path.trim_matches('/').split('/').collect();
    let user = match authenticate(s, headers) {
        Ok(u) => u,
        Err(r) => return r,
    };
    match (method, segs.as_slice()) {
        ("GET", ["api", "v1", "namespaces", ns, "pods", name]) => {
            if let Err(r) = authorize(s, user.as_deref(), "get", "pods", name, Some(ns)) {
                return r;
            }
            match s.pods.get(&((*ns).to_owned(), (*name).to_owned())) {
                Some(p) => json_response(200, p),
                None => not_found("pods", name),
            }
        }
        ("GET", ["api", "v1", "nodes", name]) => {
            if let Err(r) = authorize(s, user.as_deref(), "get", "nodes", name, None) {
                return r;
            }
            match s.nodes.get(*name) {
                Some(n) => json_response(200, n),
                None => not_found("nodes", name),
            }
        }
        ("POST", ["api", "v1", "namespaces", ns, "serviceaccounts", name, "token"]) => {
            if let Err(r) = authorize(
                s,
                user.as_deref(),
                "create",
                "serviceaccounts/token",
                name,
                Some(ns),
            ) {
                return r;
            }
            token_request(s, ns, name, body)
        }
        (_, ["api", "v1", "namespaces", _, "pods", _])
        | (_, ["api", "v1", "nodes", _])
        | (_, ["api", "v1", "namespaces", _, "serviceaccounts", _, "token"]) => status_response(
            405,
            "MethodNotAllowed",
            "the server does not allow this method on the requested resource",
            Some(json!({})),
        ),
        _ => status_response(
            404,
            "NotFound",
            "the server could not find the requested resource",
            Some(json!({})),
        ),
    }
}

fn invalid(name: &str, field: &str, value: &str, detail: &str) -> Response {
    let cause = format!("Invalid value: {value}: {detail}");
    status_response(
        422,
        "Invalid",
        &format!("TokenRequest.authentication.k8s.io \"{name}\" is invalid: {field}: {cause}"),
        Some(
            json!({"group": "authentication.k8s.io", "kind": "TokenRequest",
            "causes": [{"reason": "FieldValueInvalid", "message": cause, "field": field}]}),
        ),
    )
}

/// The TokenRequest handler, in the real order: body name vs URL (422), service account (404),
/// validation (422), bound object (404/409), then the max-expiration cap and the 3607 s extension.
fn token_request(s: &mut State, ns: &str, sa: &str, body: &[u8]) -> Response {
    let req: Value = if body.is_empty() {
        json!({})
    } else {
        match serde_json::from_slice(body) {
            Ok(v) => v,
            Err(e) => {
                return status_response(
                    400,
                    "BadRequest",
                    &format!("error decoding request body: {e}"),
                    None,
                );
            }
        }
    };
    let body_name = req
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or("");
    if !body_name.is_empty() && body_name != sa {
        return invalid(
            body_name,
            "metadata.name",
            &format!("\"{body_name}\""),
            "must match the service account name if specified",
        );
    }
    let Some(sa_uid) = s
        .service_accounts
        .get(&(ns.to_owned(), sa.to_owned()))
        .cloned()
    else {
        return not_found("serviceaccounts", sa);
    };
    let requested = req
        .pointer("/spec/expirationSeconds")
        .and_then(Value::as_i64)
        .unwrap_or(DEFAULT_EXPIRATION_SECONDS);
    if requested < MIN_EXPIRATION_SECONDS {
        return invalid(
            body_name,
            "spec.expirationSeconds",
            &requested.to_string(),
            "may not specify a duration less than 10 minutes",
        );
    }
    if requested > 1_i64 << 32 {
        return invalid(
            body_name,
            "spec.expirationSeconds",
            &requested.to_string(),
            "may not specify a duration larger than 2^32 seconds",
        );
    }
    let bound = req
        .pointer("/spec/boundObjectRef")
        .filter(|v| !v.is_null())
        .cloned();
    if let Some(b) = &bound {
        let kind = b.get("kind").and_then(Value::as_str).unwrap_or("");
        let bname = b.get("name").and_then(Value::as_str).unwrap_or("");
        if kind != "Pod" {
            return status_response(
                400,
                "BadRequest",
                &format!("cannot bind token to object of type /v1, Kind={kind}"),
                None,
            );
        }
        let Some(pod) = s.pods.get(&(ns.to_owned(), bname.to_owned())) else {
            return not_found("pods", bname);
        };
        let puid = pod
            .pointer("/metadata/uid")
            .and_then(Value::as_str)
            .unwrap_or("");
        if let Some(want) = b
            .get("uid")
            .and_then(Value::as_str)
            .filter(|u| !u.is_empty())
        {
            if want != puid {
                return status_response(409, "Conflict", &format!("Operation cannot be fulfilled on Pod \"{bname}\": the UID in the bound object reference ({want}) does not match the UID in record. The object might have been deleted and then recreated"), Some(json!({"name": bname, "kind": "Pod"})));
            }
        }
    }
    let mut granted = requested;
    let mut warning = None;
    if let Some(max) = s.max_expiration {
        if requested > max {
            granted = max;
            warning = Some(format!(
                "299 - \"requested expiration of {requested} seconds shortened to {max} seconds\""
            ));
        }
    }
    let audiences: Vec<String> = req
        .pointer("/spec/audiences")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(|x| x.as_str().map(str::to_owned))
                .collect()
        })
        .filter(|a: &Vec<String>| !a.is_empty())
        .unwrap_or_else(|| vec![ISSUER.to_owned()]);
    let now = unix_now() + s.clock_offset;
    let extend = granted == WARN_ONLY_BOUND_SECONDS
        && bound.is_some()
        && audiences.iter().all(|a| a == ISSUER);
    let (jwt_exp, warnafter) = if extend {
        (
            now + EXTENDED_EXPIRATION_SECONDS,
            Some(now + WARN_ONLY_BOUND_SECONDS),
        )
    } else {
        (now + granted, None)
    };
    let token = mint(s, ns, sa, now, jwt_exp, warnafter);
    let out = json!({"kind": "TokenRequest", "apiVersion": "authentication.k8s.io/v1",
        "metadata": {"name": sa, "namespace": ns, "uid": sa_uid, "creationTimestamp": rfc3339(now)},
        "spec": {"audiences": audiences, "expirationSeconds": granted, "boundObjectRef": bound.unwrap_or(Value::Null)},
        "status": {"token": token, "expirationTimestamp": rfc3339(now + granted)}});
    let mut r = json_response(201, &out);
    if let Some(w) = warning {
        r.headers.push(("Warning", w));
    }
    r
}

/// Method, path, headers, body.
type HttpRequest = (String, String, Vec<(String, String)>, Vec<u8>);

fn fault_applies(part: Option<&str>, path: &str) -> bool {
    match part {
        None => true,
        Some(p) => path.contains(p),
    }
}

/// Reads one HTTP/1.1 request: method, path (no query), headers, body.
fn read_request<S: Read>(stream: &mut S) -> Option<HttpRequest> {
    let mut buf = Vec::with_capacity(2048);
    let mut chunk = [0u8; 4096];
    loop {
        let n = stream.read(&mut chunk).ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&chunk[..n]);
        let mut hdrs = [httparse::EMPTY_HEADER; 64];
        let mut req = httparse::Request::new(&mut hdrs);
        match req.parse(&buf) {
            Ok(httparse::Status::Complete(head_len)) => {
                let method = req.method?.to_owned();
                let path = req.path?.split('?').next().unwrap_or("").to_owned();
                let headers: Vec<(String, String)> = req
                    .headers
                    .iter()
                    .map(|h| {
                        (
                            h.name.to_owned(),
                            String::from_utf8_lossy(h.value).into_owned(),
                        )
                    })
                    .collect();
                let len = headers
                    .iter()
                    .find(|(k, _)| k.eq_ignore_ascii_case("content-length"))
                    .and_then(|(_, v)| v.trim().parse::<usize>().ok())
                    .unwrap_or(0);
                let mut body = buf[head_len..].to_vec();
                while body.len() < len {
                    let n = stream.read(&mut chunk).ok()?;
                    if n == 0 {
                        return None;
                    }
                    body.extend_from_slice(&chunk[..n]);
                }
                body.truncate(len);
                return Some((method, path, headers, body));
            }
            Ok(httparse::Status::Partial) if buf.len() < 64 * 1024 => {}
            _ => return None,
        }
    }
}

fn serve(shared: &Shared, config: &Arc<rustls::ServerConfig>, tcp: TcpStream) {
    let _ = tcp.set_read_timeout(Some(Duration::from_secs(30)));
    let _ = tcp.set_write_timeout(Some(Duration::from_secs(30)));
    let Ok(conn) = rustls::ServerConnection::new(Arc::clone(config)) else {
        return;
    };
    let mut tls = rustls::StreamOwned::new(conn, tcp);
    let Some((method, path, headers, body)) = read_request(&mut tls) else {
        return;
    };
    let at = Instant::now();
    let response = {
        let mut s = shared.lock();
        let idx = s.requests.len();
        s.requests.push(RequestRecord {
            at,
            method: method.clone(),
            path: path.clone(),
            status: 0,
        });
        let fault = s
            .fault
            .clone()
            .filter(|(part, _)| fault_applies(part.as_deref(), &path));
        let resp = match fault.map(|(_, f)| f) {
            Some(Fault::Stall) => {
                while !shared.stop.load(Ordering::SeqCst)
                    && matches!(s.fault, Some((ref part, Fault::Stall)) if fault_applies(part.as_deref(), &path))
                {
                    s = shared
                        .wake
                        .wait_timeout(s, Duration::from_millis(200))
                        .map(|(g, _)| g)
                        .unwrap_or_else(|e| e.into_inner().0);
                }
                return;
            }
            Some(Fault::Hold) => {
                while !shared.stop.load(Ordering::SeqCst)
                    && matches!(s.fault, Some((ref part, Fault::Hold)) if fault_applies(part.as_deref(), &path))
                {
                    s = shared
                        .wake
                        .wait_timeout(s, Duration::from_millis(200))
                        .map(|(g, _)| g)
                        .unwrap_or_else(|e| e.into_inner().0);
                }
                if shared.stop.load(Ordering::SeqCst) {
                    return;
                }
                handle(&mut s, &method, &path, &headers, &body)
            }
            Some(Fault::TooManyRequests { retry_after }) => too_many(retry_after),
            Some(Fault::Status(code)) => fault_response(code),
            None => handle(&mut s, &method, &path, &headers, &body),
        };
        if let Some(r) = s.requests.get_mut(idx) {
            r.status = resp.status;
        }
        resp
    };
    let mut out = format!(
        "HTTP/1.1 {} {}\r\n",
        response.status,
        reason_phrase(response.status)
    );
    for (k, v) in &response.headers {
        out.push_str(&format!("{k}: {v}\r\n"));
    }
    out.push_str(&format!(
        "Content-Length: {}\r\nConnection: close\r\n\r\n",
        response.body.len()
    ));
    let mut bytes = out.into_bytes();
    bytes.extend_from_slice(&response.body);
    let _ = tls.write_all(&bytes);
    let _ = tls.flush();
    tls.conn.send_close_notify();
    let _ = tls.flush();
}
