//! Service-account-shaped JWTs signed with HMAC-SHA256 (`alg: HS256`).
//!
//! The real apiserver signs with RS256/ES256; a client never verifies the
//! signature, only the server does, so a symmetric key is enough for a stand-in and rotating it
//! invalidates every issued token, as a real signing-key rotation does. Claims follow the real
//! shape: `aud` (array), `exp`, `iat`, `nbf`, `iss`, `sub`, `jti`, `kubernetes.io`.

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use ring::hmac;
use serde_json::{json, Value};

/// Issuer and default audience of issued tokens.
pub const ISSUER: &str = "https://kubernetes.default.svc.cluster.local";

/// Signs `claims` with `key`.
pub fn sign(key: &[u8], kid: &str, claims: &Value) -> String {
    let header = json!({"alg": "HS256", "kid": kid, "typ": "JWT"});
    let h = URL_SAFE_NO_PAD.encode(header.to_string());
    let p = URL_SAFE_NO_PAD.encode(claims.to_string());
    let signing_input = format!("{h}.{p}");
    let tag = hmac::sign(
        &hmac::Key::new(hmac::HMAC_SHA256, key),
        signing_input.as_bytes(),
    );
    format!("{signing_input}.{}", URL_SAFE_NO_PAD.encode(tag.as_ref()))
}

/// Verifies the signature with `key` and returns the claims; `None` if anything is off.
pub fn verify(key: &[u8], token: &str) -> Option<Value> {
    let mut parts = token.split('.');
    let (h, p, s) = (parts.next()?, parts.next()?, parts.next()?);
    if parts.next().is_some() {
        return None;
    }
    let sig = URL_SAFE_NO_PAD.decode(s).ok()?;
    hmac::verify(
        &hmac::Key::new(hmac::HMAC_SHA256, key),
        format!("{h}.{p}").as_bytes(),
        &sig,
    )
    .ok()?;
    serde_json::from_slice(&URL_SAFE_NO_PAD.decode(p).ok()?).ok()
}
