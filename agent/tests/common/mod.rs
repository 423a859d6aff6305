//! Shared fixture: a stand-in API server, in-cluster credential files, and an in-process agent
//! with a movable wall clock.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::PathBuf;
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tern_agent::{Agent, OffsetClock, RunConfig};
use tern_apiserver::ApiServer;

pub const NS: &str = "tern";
pub const TOKEN_PATH: &str = "/api/v1/namespaces/tern/serviceaccounts/tern-cni/token";

pub struct Fixture {
    pub s: Arc<ApiServer>,
    pub dir: tempfile::TempDir,
    pub clock: Arc<OffsetClock>,
    pub cfg: RunConfig,
}

impl Fixture {
    pub fn new() -> Self {
        let s = Arc::new(ApiServer::start().unwrap());
        s.add_service_account(NS, "tern-cni");
        let dir = tempfile::tempdir().unwrap();
        let sa = dir.path().join("sa");
        std::fs::create_dir_all(&sa).unwrap();
        s.write_ca(&sa.join("ca.crt")).unwrap();
        std::fs::write(sa.join("namespace"), NS).unwrap();
        let mut cfg = RunConfig::with_defaults(s.url(), NS.into());
        cfg.sa_dir = sa;
        cfg.kubeconfig = dir.path().join("net.d/tern-kubeconfig");
        std::fs::create_dir_all(dir.path().join("net.d")).unwrap();
        cfg.socket = dir.path().join("run/tern/agent.sock");
        cfg.metrics_socket = dir.path().join("run/tern/metrics.sock");
        cfg.listen = "127.0.0.1:0".parse().unwrap();
        cfg.wall_check = Duration::from_millis(100);
        cfg.policy.backoff_base = Duration::from_millis(20);
        cfg.policy.backoff_cap = Duration::from_millis(500);
        cfg.request_timeout = Duration::from_secs(2);
        let f = Fixture {
            s,
            dir,
            clock: Arc::new(OffsetClock::default()),
            cfg,
        };
        f.renew_own_token();
        f
    }

    /// What the kubelet does: (re)write the agent's projected token (30 days, so clock jumps keep it valid).
    pub fn renew_own_token(&self) {
        let t = self.s.issue_token(NS, "tern-agent", 30 * 86_400);
        std::fs::write(self.cfg.sa_dir.join("token"), t).unwrap();
    }

    pub fn start(&self) -> Agent {
        Agent::start(self.cfg.clone(), self.clock.clone()).unwrap()
    }

    /// Moves both the node's wall clock and the API server's clock.
    pub fn jump(&self, secs: i64) {
        self.s.advance_clock(secs);
        self.clock.advance_secs(secs);
    }

    pub fn token_requests(&self) -> usize {
        self.s.count(TOKEN_PATH)
    }

    pub fn kubeconfig_token(&self) -> String {
        tern_kube::kubeconfig::load(&self.cfg.kubeconfig)
            .unwrap()
            .token
            .expose()
            .to_owned()
    }
}

/// Waits for the start-up refresh to be complete (kubeconfig written, state updated), not merely
/// received by the server, and checks it was the only TokenRequest.
pub fn ready(f: &Fixture, a: &Agent) {
    assert!(wait_until(Duration::from_secs(5), || a
        .snapshot()
        .last_success
        .is_some()));
    assert_eq!(f.token_requests(), 1);
}

pub fn wait_until(timeout: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let end = Instant::now() + timeout;
    while Instant::now() < end {
        if cond() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    cond()
}

pub fn http_get(addr: SocketAddr, path: &str) -> (u16, String) {
    let mut c = TcpStream::connect(addr).unwrap();
    write!(
        c,
        "GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut s = String::new();
    c.read_to_string(&mut s).unwrap();
    let code = s.split_whitespace().nth(1).unwrap().parse().unwrap();
    let body = s
        .split_once("\r\n\r\n")
        .map(|x| x.1.to_owned())
        .unwrap_or_default();
    (code, body)
}

pub fn kubeconfig_path(f: &Fixture) -> PathBuf {
    f.cfg.kubeconfig.clone()
}

/// `tern-agent <args>` with none of the environment the agent reads.
pub fn agent(args: &[&str]) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_tern-agent"));
    c.args(args)
        .env_remove("KUBERNETES_SERVICE_HOST")
        .env_remove("KUBERNETES_SERVICE_PORT")
        .env_remove("POD_NAMESPACE")
        .env_remove("NODE_NAME")
        .env_remove("TERN_CONFLIST_TEMPLATE")
        .env_remove("CNI_TOKEN_REFRESH_DURATION")
        .env_remove("TERN_CNI_SERVICE_ACCOUNT");
    c
}

/// Bytes as (lossy) text.
pub fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// Drives `rewrites` kubeconfig rewrites through the agent's own path (the start-up refresh, then
/// channel-triggered refreshes) while a reader loads the file in a tight loop: every read must
/// parse with a token expiry (never a partial or missing file), and no temp file is left.
pub fn assert_kubeconfig_never_partial(rewrites: usize) {
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    let mut f = Fixture::new();
    f.cfg.channel_min_interval = Duration::ZERO;
    let a = f.start();
    ready(&f, &a);
    let stop = Arc::new(AtomicBool::new(false));
    let (reads, bad) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let path = kubeconfig_path(&f);
    let reader = {
        let (stop, reads, bad, path) = (stop.clone(), reads.clone(), bad.clone(), path.clone());
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                match tern_kube::kubeconfig::load(&path) {
                    Ok(c) if c.token.expiry().ok().flatten().is_some() => {
                        reads.fetch_add(1, Ordering::Relaxed)
                    }
                    _ => bad.fetch_add(1, Ordering::Relaxed),
                };
            }
        })
    };
    for _ in 1..rewrites {
        let o = tern_kube::AgentClient::request_refresh(
            &f.cfg.socket,
            "rewrite",
            Duration::from_secs(5),
        )
        .unwrap();
        assert!(matches!(o, tern_kube::Outcome::Refreshed { .. }), "{o:?}");
    }
    stop.store(true, Ordering::Relaxed);
    reader.join().unwrap();
    assert_eq!(f.token_requests(), rewrites);
    assert_eq!(
        bad.load(Ordering::Relaxed),
        0,
        "a read saw a partial or missing kubeconfig"
    );
    assert!(
        reads.load(Ordering::Relaxed) > rewrites,
        "reads: {}",
        reads.load(Ordering::Relaxed)
    );
    let leftovers: Vec<_> = std::fs::read_dir(path.parent().unwrap()).unwrap().collect();
    assert_eq!(leftovers.len(), 1, "no temp files left");
    a.shutdown();
}
