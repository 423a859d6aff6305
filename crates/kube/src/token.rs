//! Bearer tokens: a wrapper that never prints its secret, and reading a JWT's `exp`
//! claim without verifying the signature (clients read it unverified; only the API server checks the signature).
//!
//! Invariant: [`BearerToken`]'s `Debug` shows only the length; it has no `Display`, so a token
//! can reach a log line or error message only through [`BearerToken::expose`].

use base64::Engine as _;

use crate::error::KubeError;

/// A bearer token. `Debug` is redacted; call [`BearerToken::expose`] only to build the
/// `Authorization` header or to write the kubeconfig.
#[derive(Clone, PartialEq, Eq)]
pub struct BearerToken(String);

impl std::fmt::Debug for BearerToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "BearerToken(<redacted, {} bytes>)", self.0.len())
    }
}

impl BearerToken {
    /// Wraps a token, trimming surrounding whitespace (client-go trims token files too).
    pub fn new(token: impl Into<String>) -> Self {
        let t: String = token.into();
        Self(t.trim().to_owned())
    }

    /// The secret itself.
    pub fn expose(&self) -> &str {
        &self.0
    }

    /// True when the token is empty (an empty token counts as no credentials on the server).
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The `exp` claim (Unix seconds) read without verification; `Ok(None)` for a token with no
    /// `exp` (a legacy Secret token, which never expires).
    ///
    /// # Errors
    /// [`KubeError::Decode`] when the token is not a three-part JWT with a base64url JSON payload
    /// or `exp` is not an integer. The message never contains the token.
    pub fn expiry(&self) -> Result<Option<i64>, KubeError> {
        jwt_exp(&self.0)
    }
}

/// Decodes the payload (second part) of a JWT as JSON, without verifying it.
///
/// Accepts base64url with or without padding.
///
/// # Errors
/// [`KubeError::Decode`] when the shape is wrong; the message never contains the token.
pub fn jwt_claims(token: &str) -> Result<serde_json::Value, KubeError> {
    let mut parts = token.split('.');
    let (Some(_), Some(payload), Some(_), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(KubeError::Decode(
            "token is not a JWT (expected three dot-separated parts)".into(),
        ));
    };
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(payload.trim_end_matches('='))
        .map_err(|_| KubeError::Decode("JWT payload is not base64url".into()))?;
    serde_json::from_slice(&bytes).map_err(|_| KubeError::Decode("JWT payload is not JSON".into()))
}

/// The `exp` claim of a JWT in Unix seconds; `Ok(None)` when absent (legacy token).
///
/// # Errors
/// As [`jwt_claims`], plus `exp` present but not an integer.
pub fn jwt_exp(token: &str) -> Result<Option<i64>, KubeError> {
    let claims = jwt_claims(token)?;
    match claims.get("exp") {
        None | Some(serde_json::Value::Null) => Ok(None),
        Some(v) => v
            .as_i64()
            .or_else(|| v.as_f64().filter(|f| f.is_finite()).map(|f| f as i64))
            .map(Some)
            .ok_or_else(|| KubeError::Decode("JWT exp claim is not a number".into())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn jwt(payload: &str, pad: bool) -> String {
        let e = if pad {
            base64::engine::general_purpose::URL_SAFE.encode(payload)
        } else {
            base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(payload)
        };
        format!("eyJhbGciOiJIUzI1NiJ9.{e}.c2ln")
    }

    #[test]
    fn reads_exp_with_and_without_padding() {
        let p = r#"{"aud":["https://kubernetes.default.svc"],"exp":1803691600,"sub":"system:serviceaccount:a:b?"}"#;
        assert_eq!(jwt_exp(&jwt(p, false)).unwrap(), Some(1_803_691_600));
        assert_eq!(jwt_exp(&jwt(p, true)).unwrap(), Some(1_803_691_600));
        assert_eq!(
            jwt_exp(&jwt(r#"{"iss":"kubernetes/serviceaccount"}"#, false)).unwrap(),
            None
        );
    }

    #[test]
    fn refuses_non_jwts_without_echoing_them() {
        for t in ["secret-token-value", "a.b", "a.!!!.c", "a.b.c.d"] {
            let e = jwt_exp(t).unwrap_err().to_string();
            assert!(!e.contains(t), "{e}");
        }
        assert!(jwt_exp(&jwt(r#"{"exp":"soon"}"#, false)).is_err());
    }

    #[test]
    fn debug_is_redacted() {
        let t = BearerToken::new("  s3cr3t-token\n");
        assert_eq!(t.expose(), "s3cr3t-token");
        assert!(!format!("{t:?}").contains("s3cr3t"));
    }
}
