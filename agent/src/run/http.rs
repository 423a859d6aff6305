//! The health and metrics endpoints (`/healthz`, `/metrics`) on the `--listen` address, served by
//! axum on one single-threaded tokio runtime: they read the shared state and never wait on the
//! refresher or the API.

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

/// `/healthz`: healthy while the token is valid and the next attempt is due before it expires.
fn health(s: &Shared) -> (StatusCode, String) {
    let snap = lock(&s.snap).clone();
    let now = s.clock.now_secs();
    match (snap.token_expiry, snap.next_attempt) {
        (None, _) => (
            StatusCode::SERVICE_UNAVAILABLE,
            "no token written yet\n".into(),
        ),
        (Some(exp), _) if exp <= now => (
            StatusCode::SERVICE_UNAVAILABLE,
            format!("token expired at {}\n", format_rfc3339(exp)),
        ),
        (Some(exp), Some(next)) if next >= exp => (
            StatusCode::SERVICE_UNAVAILABLE,
            format!(
                "token expires at {} before the next attempt at {}\n",
                format_rfc3339(exp),
                format_rfc3339(next)
            ),
        ),
        (Some(exp), _) => (
            StatusCode::OK,
            format!("ok: token valid until {}\n", format_rfc3339(exp)),
        ),
    }
}

async fn healthz(State(s): State<Arc<Shared>>) -> (StatusCode, String) {
    health(&s)
}

async fn metrics_text(
    State(s): State<Arc<Shared>>,
) -> ([(header::HeaderName, &'static str); 1], String) {
    let snap = lock(&s.snap).clone();
    (
        [(header::CONTENT_TYPE, metrics::CONTENT_TYPE)],
        metrics::render(snap),
    )
}

/// Serves until `stop` fires (or its sender is dropped).
pub(super) fn http_server(s: Arc<Shared>, listener: TcpListener, stop: oneshot::Receiver<()>) {
    let serve = async move {
        listener.set_nonblocking(true)?;
        let listener = tokio::net::TcpListener::from_std(listener)?;
        let app = Router::new()
            .route("/healthz", get(healthz))
            .route("/metrics", get(metrics_text))
            .with_state(s);
        axum::serve(listener, app)
            .with_graceful_shutdown(async {
                let _ = stop.await;
            })
            .await
    };
    let result = tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .build()
        .and_then(|rt| rt.block_on(serve));
    if let Err(e) = result {
        warn!(error = %e, "health/metrics server stopped");
    }
}
