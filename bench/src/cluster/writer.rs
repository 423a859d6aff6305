//! One kept-alive TLS connection to the API server as its admin (client certificate), for the
//! timed writes: curl's exec, TLS handshake and teardown per write cost about 20 ms of the
//! ~22 ms it took from a write's start to its return (netpol-scale at 20,000 Pods, 2026-12-07),
//! which loosened the "from start" bound by as much. A GET before each write (untimed) makes
//! sure the pooled connection is alive, so a write never pays for a reconnect (after an API
//! server restart, say).
//!
//! Invariant: the write's start and return are stamped around the request alone.

use std::time::Duration;

use ureq::tls::{Certificate, ClientCert, PrivateKey, RootCerts, TlsConfig, TlsProvider};

use super::api::{now, Api, Write};
use crate::Res;

/// The connection (ureq's pool, one connection to the one server).
pub(crate) struct Writer {
    agent: ureq::Agent,
    url: String,
}

fn read(api: &Api, f: &str) -> Res<Vec<u8>> {
    let p = api.pki.join(f);
    std::fs::read(&p).map_err(|e| format!("{}: {e}", p.display()))
}

impl Writer {
    /// A connection with `api`'s CA and admin certificate.
    pub(crate) fn new(api: &Api) -> Res<Writer> {
        let pem = |e: ureq::Error| format!("admin PEM: {e}");
        let ca = Certificate::from_pem(&read(api, "ca.crt")?).map_err(pem)?;
        let cert = Certificate::from_pem(&read(api, "admin.crt")?).map_err(pem)?;
        let key = PrivateKey::from_pem(&read(api, "admin.key")?).map_err(pem)?;
        let tls = TlsConfig::builder()
            .provider(TlsProvider::Rustls)
            .root_certs(RootCerts::Specific(std::sync::Arc::new(vec![ca])))
            .client_cert(Some(ClientCert::new_with_certs(&[cert], key)))
            .build();
        let config = ureq::Agent::config_builder()
            .tls_config(tls)
            .http_status_as_error(false)
            .timeout_global(Some(Duration::from_secs(60)))
            .max_idle_connections_per_host(1)
            .build();
        Ok(Writer {
            agent: ureq::Agent::new_with_config(config),
            url: api.url.clone(),
        })
    }

    /// GET /readyz until it answers (at most 3 tries): the pooled connection is alive after.
    fn warm(&self) -> Res<()> {
        let mut last = String::new();
        for _ in 0..3 {
            match self.agent.get(format!("{}/readyz", self.url)).call() {
                Ok(mut r) => {
                    let _ = r.body_mut().read_to_string();
                    return Ok(());
                }
                Err(e) => last = e.to_string(),
            }
        }
        Err(format!("GET /readyz: {last}"))
    }

    /// One write; returns the times (epoch s) right before the request and right after its
    /// answer was read. Fails unless the answer is 2xx.
    pub(crate) fn one(&self, w: &Write) -> Res<(f64, f64)> {
        self.warm()?;
        let url = format!("{}{}", self.url, w.path);
        let t0 = now();
        let sent = match w.method {
            "POST" => self
                .agent
                .post(&url)
                .header("Content-Type", w.ctype)
                .send(w.body.as_bytes()),
            "PATCH" => self
                .agent
                .patch(&url)
                .header("Content-Type", w.ctype)
                .send(w.body.as_bytes()),
            _ => self.agent.delete(&url).call(),
        };
        let mut r = sent.map_err(|e| format!("{} {}: {e}", w.method, w.path))?;
        let _ = r.body_mut().read_to_string();
        let t1 = now();
        let code = r.status().as_u16();
        if !(200..300).contains(&code) {
            return Err(format!("{} {}: HTTP {code}", w.method, w.path));
        }
        Ok((t0, t1))
    }
}
