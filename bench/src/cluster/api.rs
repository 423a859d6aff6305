//! Writes to the kube-apiserver as its admin (client certificate): in bulk through curl's
//! `--parallel` (HTTP/2, one connection per curl, several curls at once), and one at a time for the
//! timed changes, each stamped right before its curl starts and right after it returns.
//!
//! Invariant: curl is the only HTTP client here; every request goes to `api` (HUB's address).

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::thread;

use serde_json::Value;

use crate::Res;

/// One write: method, API path, body, content type.
#[derive(Clone, Debug)]
pub(crate) struct Write {
    pub(crate) method: &'static str,
    pub(crate) path: String,
    pub(crate) body: String,
    pub(crate) ctype: &'static str,
}

impl Write {
    pub(crate) fn post(path: String, body: &Value) -> Self {
        Write {
            method: "POST",
            path,
            body: body.to_string(),
            ctype: "application/json",
        }
    }
    pub(crate) fn merge(path: String, body: &Value) -> Self {
        Write {
            method: "PATCH",
            path,
            body: body.to_string(),
            ctype: "application/merge-patch+json",
        }
    }
    pub(crate) fn delete(path: String) -> Self {
        Write {
            method: "DELETE",
            path,
            body: String::new(),
            ctype: "application/json",
        }
    }
}

/// The API server's address and the admin's credentials.
#[derive(Clone, Debug)]
pub(crate) struct Api {
    pub(crate) url: String,
    pub(crate) pki: PathBuf,
    pub(crate) work: PathBuf,
}

/// Seconds since the epoch, as a float (what the monitor stamps lines with).
pub(crate) fn now() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0)
}

fn quote(s: &str) -> String {
    let mut o = String::with_capacity(s.len() + 2);
    o.push('"');
    for c in s.chars() {
        if c == '"' || c == '\\' {
            o.push('\\');
        }
        o.push(c);
    }
    o.push('"');
    o
}

impl Api {
    pub(crate) fn tls(&self) -> [String; 3] {
        let p = |f: &str| self.pki.join(f).display().to_string();
        [p("ca.crt"), p("admin.crt"), p("admin.key")]
    }

    /// One curl config (`-K`) holding `ws`, every request its own operation.
    fn config(&self, ws: &[Write], path: &Path) -> Res<()> {
        let [ca, cert, key] = self.tls();
        let mut s = String::new();
        for (i, w) in ws.iter().enumerate() {
            if i > 0 {
                s.push_str("next\n");
            }
            let _ = writeln!(s, "url = {}\nrequest = {}\ncacert = {}\ncert = {}\nkey = {}\nsilent\noutput = \"/dev/null\"\nwrite-out = \"%{{http_code}}\\n\"",
                quote(&format!("{}{}", self.url, w.path)), w.method, quote(&ca), quote(&cert), quote(&key));
            if !w.body.is_empty() {
                let _ = writeln!(
                    s,
                    "header = {}\ndata-binary = {}",
                    quote(&format!("Content-Type: {}", w.ctype)),
                    quote(&w.body)
                );
            }
        }
        std::fs::write(path, s).map_err(|e| format!("write {}: {e}", path.display()))
    }

    /// Sends every write of `ws` with `procs` curls of `--parallel-max 32` each; fails when any
    /// answer is not 2xx.
    pub(crate) fn bulk(&self, what: &str, ws: &[Write], procs: usize) -> Res<()> {
        self.send(what, ws, procs, true)
    }

    /// [`Api::bulk`] without its line of output.
    pub(crate) fn bulk_quiet(&self, ws: &[Write], procs: usize) -> Res<()> {
        self.send("churn", ws, procs, false)
    }

    fn send(&self, what: &str, ws: &[Write], procs: usize, verbose: bool) -> Res<()> {
        if ws.is_empty() {
            return Ok(());
        }
        let t0 = std::time::Instant::now();
        let chunk = ws.len().div_ceil(procs.max(1));
        let results: Vec<Res<(usize, Vec<String>)>> = thread::scope(|sc| {
            let hs: Vec<_> = ws
                .chunks(chunk)
                .enumerate()
                .map(|(i, part)| {
                    sc.spawn(move || -> Res<(usize, Vec<String>)> {
                        let cfg = self.work.join(format!("bulk-{what}-{i}.curl"));
                        self.config(part, &cfg)?;
                        let out = Command::new("curl")
                            .args(["--parallel", "--parallel-max", "32", "-K"])
                            .arg(&cfg)
                            .output()
                            .map_err(|e| format!("curl: {e}"))?;
                        let _ = std::fs::remove_file(&cfg);
                        let text = String::from_utf8_lossy(&out.stdout);
                        let bad: Vec<String> = text
                            .lines()
                            .filter(|c| !c.starts_with('2'))
                            .map(str::to_string)
                            .collect();
                        Ok((text.lines().count(), bad))
                    })
                })
                .collect();
            hs.into_iter()
                .map(|h| {
                    h.join()
                        .unwrap_or_else(|_| Err("curl thread panicked".into()))
                })
                .collect()
        });
        let (mut n, mut bad) = (0, Vec::new());
        for r in results {
            let (k, b) = r?;
            n += k;
            bad.extend(b);
        }
        let secs = t0.elapsed().as_secs_f64();
        if verbose {
            println!(
                "  {what}: {n} writes in {secs:.1} s ({:.0}/s), {} not 2xx",
                n as f64 / secs.max(1e-3),
                bad.len()
            );
        }
        if !bad.is_empty() || n != ws.len() {
            let mut codes = bad.clone();
            codes.sort();
            codes.dedup();
            return Err(format!(
                "{what}: {} of {} writes failed (codes {codes:?})",
                ws.len() - n + bad.len(),
                ws.len()
            ));
        }
        Ok(())
    }

    /// One write; returns the times (epoch s) right before curl started and right after it
    /// returned. Fails unless the answer is 2xx.
    pub(crate) fn one(&self, w: &Write) -> Res<(f64, f64)> {
        let [ca, cert, key] = self.tls();
        let mut c = Command::new("curl");
        c.args([
            "-s",
            "-o",
            "/dev/null",
            "-w",
            "%{http_code}",
            "--cacert",
            &ca,
            "--cert",
            &cert,
            "--key",
            &key,
            "-X",
            w.method,
        ]);
        if !w.body.is_empty() {
            c.args([
                "-H",
                &format!("Content-Type: {}", w.ctype),
                "--data-binary",
                &w.body,
            ]);
        }
        c.arg(format!("{}{}", self.url, w.path));
        let t0 = now();
        let out = c.output().map_err(|e| format!("curl: {e}"))?;
        let t1 = now();
        let code = String::from_utf8_lossy(&out.stdout).to_string();
        if !code.starts_with('2') {
            return Err(format!("{} {}: HTTP {code}", w.method, w.path));
        }
        Ok((t0, t1))
    }

    /// GET of PATH's body (the API server's /metrics).
    pub(crate) fn get(&self, path: &str) -> Res<String> {
        let [ca, cert, key] = self.tls();
        let out = Command::new("curl")
            .args([
                "-sf", "-m", "60", "--cacert", &ca, "--cert", &cert, "--key", &key,
            ])
            .arg(format!("{}{path}", self.url))
            .output()
            .map_err(|e| format!("curl: {e}"))?;
        if !out.status.success() {
            return Err(format!("GET {path} failed"));
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }
}
