//! `tern-apiserver`: runs the stand-in as a process, for tests outside Rust (shell, Go driver).
//!
//! Usage: `tern-apiserver [--listen 127.0.0.1:6443] [--admin 127.0.0.1:6444] [--ca-out PATH]`
//! It prints `url=<https url>` and `admin=<http url>` on stdout, then serves until killed.
//!
//! Admin endpoint (plain HTTP, loopback only; every answer is JSON or text):
//! - `POST /fault?code=503` | `/fault?code=429&retryAfter=5` | `/fault?stall=1` | `/fault?clear=1`
//!   (optional `&path=<substring>` limits the fault to matching paths)
//! - `POST /clock?advance=<seconds>` (may be negative)
//! - `POST /rotate-key`
//! - `POST /max-token-expiration?seconds=<n>` (0 removes the cap)
//! - `POST /serviceaccount?ns=<ns>&name=<name>`
//! - `POST /token?ns=<ns>&name=<name>&seconds=<n>` → the token as text
//! - `POST /pod?ns=<ns>&name=<name>&uid=<uid>[&ipAddrs=<json list>][&deleting=1]`; `DELETE /pod?ns=&name=`
//! - `POST /node?name=<n>[&podCIDRs=<a,b>]`
//! - `POST /forbid?user=<u>&verb=<v>&resource=<r>`; `POST /allow-all`
//! - `GET /counts` → `{"<path>": n, ...}`; `POST /reset-counts`

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::net::TcpListener;

use tern_apiserver::{ApiServer, Fault};

fn query(target: &str) -> (String, HashMap<String, String>) {
    let (path, q) = target.split_once('?').unwrap_or((target, ""));
    let decode = |s: &str| {
        let mut out = Vec::new();
        let b = s.as_bytes();
        let mut i = 0;
        while i < b.len() {
            match b[i] {
                b'%' if i + 2 < b.len() => {
                    let h = std::str::from_utf8(&b[i + 1..i + 3])
                        .ok()
                        .and_then(|h| u8::from_str_radix(h, 16).ok());
                    if let Some(h) = h {
                        out.push(h);
                        i += 3;
                        continue;
                    }
                    out.push(b'%');
                }
                b'+' => out.push(b' '),
                c => out.push(c),
            }
            i += 1;
        }
        String::from_utf8_lossy(&out).into_owned()
    };
    let map = q.split('&').filter(|kv| !kv.is_empty()).map(|kv| {
        let (k, v) = kv.split_once('=').unwrap_or((kv, ""));
        (decode(k), decode(v))
    });
    (path.to_owned(), map.collect())
}

fn admin(s: &ApiServer, method: &str, target: &str) -> (u16, String) {
    let (path, q) = query(target);
    let get = |k: &str| q.get(k).cloned().unwrap_or_default();
    let num = |k: &str| get(k).parse::<i64>().unwrap_or(0);
    match (method, path.as_str()) {
        ("POST", "/fault") => {
            let fault = if q.contains_key("clear") {
                None
            } else if q.contains_key("stall") {
                Some(Fault::Stall)
            } else if num("code") == 429 {
                Some(Fault::TooManyRequests {
                    retry_after: num("retryAfter").max(1) as u64,
                })
            } else {
                Some(Fault::Status(num("code") as u16))
            };
            match (fault, q.get("path")) {
                (Some(f), Some(p)) => s.set_fault_on(p, f),
                (f, _) => s.set_fault(f),
            }
            (200, "ok".into())
        }
        ("POST", "/clock") => {
            s.advance_clock(num("advance"));
            (200, s.now().to_string())
        }
        ("POST", "/rotate-key") => {
            s.rotate_signing_key();
            (200, "ok".into())
        }
        ("POST", "/max-token-expiration") => {
            s.set_max_token_expiration(Some(num("seconds")).filter(|n| *n > 0));
            (200, "ok".into())
        }
        ("POST", "/serviceaccount") => (200, s.add_service_account(&get("ns"), &get("name"))),
        ("POST", "/token") => (200, s.issue_token(&get("ns"), &get("name"), num("seconds"))),
        ("POST", "/pod") => {
            let ips = get("ipAddrs");
            let ann: Vec<(&str, &str)> = if ips.is_empty() {
                vec![]
            } else {
                vec![("tern.io/ip-addrs", ips.as_str())]
            };
            s.set_pod(
                &get("ns"),
                &get("name"),
                &get("uid"),
                &ann,
                q.contains_key("deleting"),
            );
            (200, "ok".into())
        }
        ("DELETE", "/pod") => {
            s.delete_pod(&get("ns"), &get("name"));
            (200, "ok".into())
        }
        ("POST", "/node") => {
            let cidrs = get("podCIDRs");
            let list: Vec<&str> = cidrs.split(',').filter(|c| !c.is_empty()).collect();
            s.set_node(&get("name"), &list);
            (200, "ok".into())
        }
        ("POST", "/forbid") => {
            s.forbid(&get("user"), &get("verb"), &get("resource"));
            (200, "ok".into())
        }
        ("POST", "/allow-all") => {
            s.allow_all();
            (200, "ok".into())
        }
        ("GET", "/counts") => (200, serde_json::to_string(&s.counts()).unwrap_or_default()),
        ("POST", "/reset-counts") => {
            s.reset_counts();
            (200, "ok".into())
        }
        _ => (404, "unknown admin endpoint".into()),
    }
}

fn main() -> std::io::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let opt = |name: &str| {
        args.iter()
            .position(|a| a == name)
            .and_then(|i| args.get(i + 1))
            .cloned()
    };
    let listen = opt("--listen").unwrap_or_else(|| "127.0.0.1:0".into());
    let admin_addr = opt("--admin").unwrap_or_else(|| "127.0.0.1:0".into());
    let server = ApiServer::start_on(listen.parse().map_err(std::io::Error::other)?)?;
    if let Some(p) = opt("--ca-out") {
        server.write_ca(std::path::Path::new(&p))?;
    }
    let admin_listener = TcpListener::bind(&admin_addr)?;
    if !admin_listener.local_addr()?.ip().is_loopback() {
        return Err(std::io::Error::other("--admin must be a loopback address"));
    }
    println!("url={}", server.url());
    println!("admin=http://{}", admin_listener.local_addr()?);
    std::io::stdout().flush()?;
    for conn in admin_listener.incoming() {
        let Ok(mut conn) = conn else { continue };
        let mut reader = BufReader::new(match conn.try_clone() {
            Ok(c) => c,
            Err(_) => continue,
        });
        let mut line = String::new();
        if reader.read_line(&mut line).is_err() {
            continue;
        }
        // Drain headers.
        let mut h = String::new();
        while reader.read_line(&mut h).map(|n| n > 2).unwrap_or(false) {
            h.clear();
        }
        let mut parts = line.split_whitespace();
        let (method, target) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
        let (code, body) = admin(&server, method, target);
        let _ = write!(
            conn,
            "HTTP/1.1 {code} X\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        );
    }
    Ok(())
}
