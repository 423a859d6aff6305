//! The API paths the stand-in answers: authentication of its own bearer tokens, authorization, TokenRequest, GET pod and GET node, and injected faults.

use crate::*;

/// Authenticates the request: `Ok(Some(user))`, `Ok(None)` for anonymous, `Err(401)`.
pub(crate) fn authenticate(
    s: &State,
    headers: &[(String, String)],
) -> Result<Option<String>, Response> {
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

pub(crate) fn authorize(
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

pub(crate) fn handle(
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
        ("POST", ["api", "v1", "namespaces", ns, "events"]) => {
            if let Err(r) = authorize(s, user.as_deref(), "create", "events", "", Some(ns)) {
                return r;
            }
            create_event(s, ns, body)
        }
        ("PATCH", ["api", "v1", "nodes", name, "status"]) => {
            if let Err(r) = authorize(s, user.as_deref(), "patch", "nodes/status", name, None) {
                return r;
            }
            crate::nodes::patch_node_status(s, name, headers, body)
        }
        (_, ["api", "v1", "namespaces", _, "pods", _])
        | (_, ["api", "v1", "nodes", _])
        | (_, ["api", "v1", "nodes", _, "status"])
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

/// A core/v1 Event stored by its name: 201, or 409 AlreadyExists for a name taken.
fn create_event(s: &mut State, ns: &str, body: &[u8]) -> Response {
    let Ok(event) = serde_json::from_slice::<Value>(body) else {
        return status_response(400, "BadRequest", "the body is not JSON", Some(json!({})));
    };
    let name = event["metadata"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let key = (ns.to_owned(), name.clone());
    if s.events.contains_key(&key) {
        return status_response(
            409,
            "AlreadyExists",
            &format!("events \"{name}\" already exists"),
            Some(json!({"name": name, "kind": "events"})),
        );
    }
    s.events.insert(key, event.clone());
    json_response(201, &event)
}

pub(crate) fn invalid(name: &str, field: &str, value: &str, detail: &str) -> Response {
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
pub(crate) fn token_request(s: &mut State, ns: &str, sa: &str, body: &[u8]) -> Response {
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

pub(crate) fn fault_applies(part: Option<&str>, path: &str) -> bool {
    match part {
        None => true,
        Some(p) => path.contains(p),
    }
}

pub(crate) fn mint(
    s: &mut State,
    ns: &str,
    name: &str,
    now: i64,
    exp: i64,
    warnafter: Option<i64>,
) -> String {
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

pub(crate) fn random_bytes(n: usize) -> Vec<u8> {
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

pub(crate) fn unix_now() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0)
}

/// Unix seconds → `YYYY-MM-DDTHH:MM:SSZ` (the project's one calendar, in tern-kube).
pub fn rfc3339(unix: i64) -> String {
    tern_kube::time::format_rfc3339(unix)
}
