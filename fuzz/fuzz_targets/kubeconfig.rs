//! Kubeconfig parsing (`tern_kube::kubeconfig`): arbitrary text must parse or fail cleanly; a
//! rendered kubeconfig (server, CA, token taken from the input) must parse back to the same
//! server and token; a token's expiry is read without panicking.
#![no_main]

use std::path::Path;

use libfuzzer_sys::fuzz_target;
use tern_kube::kubeconfig::{self, TlsTrust};
use tern_kube::token::BearerToken;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    // Relative file references resolve under a directory that does not exist.
    let path = Path::new("/nonexistent/tern-fuzz/kubeconfig");
    if let Ok(cfg) = kubeconfig::parse(text, path) {
        assert!(cfg.server.starts_with("https://"), "{}", cfg.server);
        let _ = cfg.token.expiry();
    }
    let mut parts = text.splitn(3, '\n');
    let host = parts.next().unwrap_or_default();
    let token = parts.next().unwrap_or_default().trim();
    let ca = parts.next().unwrap_or_default();
    if host.is_empty() || token.is_empty() || host.contains(|c: char| c.is_control()) {
        return;
    }
    let server = format!("https://{host}");
    let token = BearerToken::new(token.to_owned());
    let rendered = kubeconfig::render(&server, ca.as_bytes(), &token);
    let back = kubeconfig::parse(&rendered, path)
        .unwrap_or_else(|e| panic!("rendered kubeconfig does not parse: {e}\n{rendered}"));
    assert_eq!(back.server, server.trim_end_matches('/'));
    assert_eq!(
        back.token.expose(),
        token.expose(),
        "token changed through render + parse"
    );
    match back.trust {
        TlsTrust::CaPem(pem) => assert_eq!(pem, ca.as_bytes()),
        _ => assert!(ca.is_empty(), "CA lost through render + parse"),
    }
    let _ = back.token.expiry();
});
