//! HTTP plumbing of the stand-in: reading a request, writing a response, the `Status` bodies and reason phrases kube-apiserver sends, and the per-connection serve loop.

use crate::*;

/// An HTTP response about to be written.
pub(crate) struct Response {
    pub(crate) status: u16,
    pub(crate) headers: Vec<(&'static str, String)>,
    pub(crate) body: Vec<u8>,
}

pub(crate) fn reason_phrase(code: u16) -> &'static str {
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

pub(crate) fn json_response(status: u16, body: &Value) -> Response {
    Response {
        status,
        headers: vec![("Content-Type", "application/json".into())],
        body: body.to_string().into_bytes(),
    }
}

/// A `metav1.Status` failure body with the Go struct's key order.
pub(crate) fn status_body(code: u16, reason: &str, message: &str, details: Option<Value>) -> Value {
    let mut v = json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": message, "reason": reason});
    if let Some(d) = details {
        v["details"] = d;
    }
    v["code"] = json!(code);
    v
}

pub(crate) fn status_response(
    code: u16,
    reason: &str,
    message: &str,
    details: Option<Value>,
) -> Response {
    let mut r = json_response(code, &status_body(code, reason, message, details));
    if code == 403 || code == 503 {
        r.headers.push(("X-Content-Type-Options", "nosniff".into()));
    }
    if code == 503 {
        r.headers.push(("Retry-After", "1".into()));
    }
    r
}

pub(crate) fn unauthorized() -> Response {
    status_response(401, "Unauthorized", "Unauthorized", None)
}

pub(crate) fn not_found(kind: &str, name: &str) -> Response {
    status_response(
        404,
        "NotFound",
        &format!("{kind} \"{name}\" not found"),
        Some(json!({"name": name, "kind": kind})),
    )
}

pub(crate) fn forbidden(
    user: &str,
    verb: &str,
    resource: &str,
    name: &str,
    ns: Option<&str>,
) -> Response {
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

pub(crate) fn fault_response(code: u16) -> Response {
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

pub(crate) fn too_many(retry_after: u64) -> Response {
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

/// Method, path with query, headers, body.
pub(crate) type HttpRequest = (String, String, Vec<(String, String)>, Vec<u8>);

/// Reads one HTTP/1.1 request: method, path (query included), headers, body.
pub(crate) fn read_request<S: Read>(stream: &mut S) -> Option<HttpRequest> {
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
                let path = req.path?.to_owned();
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

pub(crate) fn serve(shared: &Shared, config: &Arc<rustls::ServerConfig>, tcp: TcpStream) {
    let _ = tcp.set_read_timeout(Some(Duration::from_secs(30)));
    let _ = tcp.set_write_timeout(Some(Duration::from_secs(30)));
    let Ok(conn) = rustls::ServerConnection::new(Arc::clone(config)) else {
        return;
    };
    let mut tls = rustls::StreamOwned::new(conn, tcp);
    let Some((method, target, headers, body)) = read_request(&mut tls) else {
        return;
    };
    let (path, query) = target.split_once('?').unwrap_or((&target, ""));
    let (path, query) = (path.to_owned(), query.to_owned());
    let at = Instant::now();
    let response = {
        let mut s = shared.lock();
        let idx = s.requests.len();
        s.requests.push(RequestRecord {
            at,
            method: method.clone(),
            path: path.clone(),
            query: query.clone(),
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
            None if method == "GET" && path == "/api/v1/nodes" => {
                let planned = authenticate(&s, &headers)
                    .and_then(|user| {
                        let verb = nodes::verb(&query);
                        authorize(&s, user.as_deref(), verb, "nodes", "", None)
                    })
                    .and_then(|()| nodes::collection(&s, &query));
                match planned {
                    Ok(plan) => {
                        if let Some(r) = s.requests.get_mut(idx) {
                            r.status = 200;
                        }
                        drop(s);
                        nodes::stream(shared, &mut tls, &plan);
                        tls.conn.send_close_notify();
                        let _ = tls.flush();
                        return;
                    }
                    Err(r) => r,
                }
            }
            None => handle(&mut s, &method, &path, &headers, &body),
        };
        if let Some(r) = s.requests.get_mut(idx) {
            r.status = resp.status;
        }
        resp
    };
    finish(&mut tls, response);
}

/// Writes `response` with `Connection: close` and closes the TLS session.
fn finish(tls: &mut rustls::StreamOwned<rustls::ServerConnection, TcpStream>, response: Response) {
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
