//! The health and metrics endpoints (`/healthz`, `/metrics`) on the `--listen` address: read
//! the shared state, never wait on the refresher or the API.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use tern_kube::time::format_rfc3339;

use super::{lock, Shared};

/// `/healthz`: healthy while the token is valid and the next attempt is due before it expires.
fn health(s: &Shared) -> (u16, String) {
    let snap = lock(&s.snap).clone();
    let now = s.clock.now_secs();
    match (snap.token_expiry, snap.next_attempt) {
        (None, _) => (503, "no token written yet\n".into()),
        (Some(exp), _) if exp <= now => {
            (503, format!("token expired at {}\n", format_rfc3339(exp)))
        }
        (Some(exp), Some(next)) if next >= exp => (
            503,
            format!(
                "token expires at {} before the next attempt at {}\n",
                format_rfc3339(exp),
                format_rfc3339(next)
            ),
        ),
        (Some(exp), _) => (
            200,
            format!("ok: token valid until {}\n", format_rfc3339(exp)),
        ),
    }
}

/// `/metrics` in the Prometheus text format.
fn metrics(s: &Shared) -> String {
    let snap = lock(&s.snap).clone();
    let mut o = String::new();
    let mut gauge = |name: &str, help: &str, v: Option<i64>| {
        o.push_str(&format!("# HELP {name} {help}\n# TYPE {name} gauge\n"));
        if let Some(v) = v {
            o.push_str(&format!("{name} {v}\n"));
        }
    };
    gauge(
        "tern_agent_token_expiry_timestamp_seconds",
        "Expiry of the CNI token in the kubeconfig (Unix seconds).",
        snap.token_expiry,
    );
    gauge(
        "tern_agent_last_success_timestamp_seconds",
        "Time of the last successful refresh (Unix seconds).",
        snap.last_success,
    );
    gauge(
        "tern_agent_next_attempt_timestamp_seconds",
        "When the next refresh attempt is due (Unix seconds).",
        snap.next_attempt,
    );
    gauge(
        "tern_agent_consecutive_failures",
        "Refresh attempts failed in a row.",
        Some(i64::from(snap.consecutive_failures)),
    );
    gauge(
        "tern_agent_token_granted_seconds",
        "Lifetime the API server granted for the current token.",
        snap.granted_seconds,
    );
    let mut counter = |name: &str, help: &str, label: &str, m: &BTreeMap<&'static str, u64>| {
        o.push_str(&format!("# HELP {name} {help}\n# TYPE {name} counter\n"));
        for (k, v) in m {
            o.push_str(&format!("{name}{{{label}=\"{k}\"}} {v}\n"));
        }
    };
    counter(
        "tern_agent_refreshes_total",
        "Successful token refreshes by trigger.",
        "trigger",
        &snap.refreshes,
    );
    counter(
        "tern_agent_refresh_failures_total",
        "Failed token refreshes by cause.",
        "cause",
        &snap.failures,
    );
    counter(
        "tern_agent_channel_requests_total",
        "Agent channel requests by outcome.",
        "outcome",
        &snap.channel,
    );
    o
}

fn serve_http_conn(s: &Shared, mut stream: TcpStream) {
    let _ = stream.set_read_timeout(Some(Duration::from_secs(2)));
    let _ = stream.set_write_timeout(Some(Duration::from_secs(2)));
    let mut buf = Vec::with_capacity(1024);
    let mut chunk = [0u8; 1024];
    while !buf.windows(4).any(|w| w == b"\r\n\r\n") && buf.len() < 8192 {
        match stream.read(&mut chunk) {
            Ok(0) | Err(_) => break,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    }
    let line = String::from_utf8_lossy(&buf);
    let mut parts = line.split_whitespace();
    let (method, path) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
    let (code, ctype, body) = match (method, path.split('?').next().unwrap_or("")) {
        ("GET", "/healthz") => {
            let (c, b) = health(s);
            (c, "text/plain; charset=utf-8", b)
        }
        ("GET", "/metrics") => (200, "text/plain; version=0.0.4; charset=utf-8", metrics(s)),
        _ => (404, "text/plain; charset=utf-8", "not found\n".into()),
    };
    let reason = match code {
        200 => "OK",
        404 => "Not Found",
        _ => "Service Unavailable",
    };
    let _ = write!(
        stream,
        "HTTP/1.1 {code} {reason}\r\nContent-Type: {ctype}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
}

pub(super) fn http_server(s: &Arc<Shared>, listener: TcpListener) {
    for conn in listener.incoming() {
        if s.stop.load(Ordering::SeqCst) {
            return;
        }
        let Ok(stream) = conn else { continue };
        let s2 = Arc::clone(s);
        let _ = std::thread::Builder::new()
            .name("http-conn".into())
            .spawn(move || serve_http_conn(&s2, stream));
    }
}
