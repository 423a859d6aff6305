//! The probe and metrics endpoints on the `--listen` address, served by axum on one
//! single-threaded tokio runtime: `/livez` (the refresher loop makes progress), `/readyz` and its
//! alias `/healthz` (the plugins can start pods: a valid token in a written kubeconfig),
//! `/metrics`; and on `--metrics-address`, when given, `/metrics` alone. They read the shared state and never wait on the refresher or the API, so an API
//! outage can fail readiness but never liveness.

use std::net::TcpListener;
use std::sync::Arc;

use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::routing::get;
use axum::Router;
use tern_kube::time::format_rfc3339;
use tokio::sync::oneshot;
use tracing::warn;

use super::{lock, metrics, Shared};

/// `/readyz`: ready while the kubeconfig holds a token that is valid now and will be refreshed
/// (or retried) before it expires, and the file is still there.
fn readiness(s: &Shared) -> (StatusCode, String) {
    let snap = lock(&s.snap).clone();
    let now = s.clock.now_secs();
    let unavailable = StatusCode::SERVICE_UNAVAILABLE;
    match (snap.token_expiry, snap.next_attempt) {
        (None, _) => (unavailable, "no token written yet\n".into()),
        (Some(exp), _) if exp <= now => (
            unavailable,
            format!("token expired at {}\n", format_rfc3339(exp)),
        ),
        (Some(exp), Some(next)) if next >= exp => (
            unavailable,
            format!(
                "token expires at {} before the next attempt at {}\n",
                format_rfc3339(exp),
                format_rfc3339(next)
            ),
        ),
        (Some(_), _) if !s.cfg.kubeconfig.is_file() => (
            unavailable,
            format!("kubeconfig {} is missing\n", s.cfg.kubeconfig.display()),
        ),
        (Some(exp), _) => (
            StatusCode::OK,
            format!("ok: token valid until {}\n", format_rfc3339(exp)),
        ),
    }
}

/// `/livez`: live while the refresher loop made progress within its stall limit, whatever the
/// API server does (an attempt is bounded by the request deadline, a wait by the wall check).
fn liveness(s: &Shared) -> (StatusCode, String) {
    let idle = lock(&s.heartbeat).elapsed();
    let limit = s.stall_limit();
    if idle > limit {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            format!(
                "refresher loop stuck: no progress for {} s (limit {} s)\n",
                idle.as_secs(),
                limit.as_secs()
            ),
        )
    } else {
        (StatusCode::OK, "ok: refresher loop running\n".into())
    }
}

async fn readyz(State(s): State<Arc<Shared>>) -> (StatusCode, String) {
    readiness(&s)
}

async fn livez(State(s): State<Arc<Shared>>) -> (StatusCode, String) {
    liveness(&s)
}

async fn metrics_text(
    State(s): State<Arc<Shared>>,
) -> ([(header::HeaderName, &'static str); 1], String) {
    let snap = lock(&s.snap).clone();
    (
        [(header::CONTENT_TYPE, metrics::CONTENT_TYPE)],
        metrics::render(
            snap,
            &s.latency,
            s.routes.as_ref().map(|f| f()),
            s.netpol.as_ref().map(|f| f()),
            &s.verbs,
        ),
    )
}

/// Serves until `stop` fires (or its sender is dropped): the probes and `/metrics` on
/// `listener`, `/metrics` alone on `metrics`.
pub(super) fn http_server(
    s: Arc<Shared>,
    listener: TcpListener,
    metrics: Option<TcpListener>,
    stop: oneshot::Receiver<()>,
) {
    let serve = async move {
        let (stop_all, stopped) = tokio::sync::watch::channel(false);
        let until_stopped = |mut rx: tokio::sync::watch::Receiver<bool>| async move {
            let _ = rx.wait_for(|v| *v).await;
        };
        let metrics_server = match metrics {
            Some(l) => {
                l.set_nonblocking(true)?;
                let l = tokio::net::TcpListener::from_std(l)?;
                let app = Router::new()
                    .route("/metrics", get(metrics_text))
                    .with_state(Arc::clone(&s));
                let done = until_stopped(stopped.clone());
                Some(tokio::spawn(async move {
                    axum::serve(l, app).with_graceful_shutdown(done).await
                }))
            }
            None => None,
        };
        listener.set_nonblocking(true)?;
        let listener = tokio::net::TcpListener::from_std(listener)?;
        let app = Router::new()
            .route("/livez", get(livez))
            .route("/readyz", get(readyz))
            .route("/healthz", get(readyz))
            .route("/metrics", get(metrics_text))
            .with_state(s);
        tokio::spawn(async move {
            let _ = stop.await;
            let _ = stop_all.send(true);
        });
        let main = axum::serve(listener, app)
            .with_graceful_shutdown(until_stopped(stopped))
            .await;
        if let Some(m) = metrics_server {
            m.await.map_err(std::io::Error::other)??;
        }
        main
    };
    let result = tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .build()
        .and_then(|rt| rt.block_on(serve));
    if let Err(e) = result {
        warn!(error = %e, "health/metrics server stopped");
    }
}
