//! Phase 6 of `tern-bench scale` (`--outage MIN`): the API server killed (connection refused at
//! once: the simulation's worst case for load) and restarted after MIN minutes with an audit log
//! of every TokenRequest (tests/scale/audit-policy.yaml). Its per-second count is the server's
//! own, to the microsecond, where /metrics sampled every second would bin by scrape time.
//!
//! Which agents fall due in the outage depends on the token lifetime and on when the agents
//! started: the prediction is the fleet simulation of this run's timeline (`--start-spread`,
//! `--outage-at`), whose command is printed (and run, when the example is built).

use std::collections::{BTreeMap, BTreeSet};
use std::process::Command;
use std::thread;
use std::time::Duration;

use serde_json::Value;

use super::phases::renew_sa_tokens;
use super::{node_ip, say, server, Opts};
use crate::cluster::api::{now, Api};
use crate::cluster::{agent_metrics, sum, Cluster};
use crate::Res;

const AGENT_USER: &str = "system:serviceaccount:tern:tern-agent";

fn sleep_until(t: f64) {
    let d = t - now();
    if d > 0.0 {
        thread::sleep(Duration::from_secs_f64(d));
    }
}

/// Seconds since the epoch of an RFC 3339 UTC time as the audit log writes it
/// (`2026-12-06T14:50:01.123456Z`).
pub(crate) fn epoch(ts: &str) -> Option<f64> {
    let (date, time) = ts.strip_suffix('Z')?.split_once('T')?;
    let d: Vec<i64> = date
        .split('-')
        .map(|x| x.parse().ok())
        .collect::<Option<_>>()?;
    let (hms, frac) = time.split_once('.').unwrap_or((time, "0"));
    let t: Vec<i64> = hms
        .split(':')
        .map(|x| x.parse().ok())
        .collect::<Option<_>>()?;
    let (&[y, m, day], &[h, mi, s]) = (d.as_slice(), t.as_slice()) else {
        return None;
    };
    // Days from civil (H. Hinnant's algorithm), March-based years.
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    let f: f64 = format!("0.{frac}").parse().ok()?;
    Some((days * 86_400 + h * 3600 + mi * 60 + s) as f64 + f)
}

/// One TokenRequest the restarted server audited: seconds after `t_back`, source, user, code.
struct Req {
    at: f64,
    ip: String,
    user: String,
    code: i64,
}

fn audited(c: &Cluster, t_back: f64) -> Vec<Req> {
    let log = std::fs::read_to_string(c.kt.join("apiserver/audit.log")).unwrap_or_default();
    log.lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|e| e["objectRef"]["subresource"] == "token")
        .filter_map(|e| {
            Some(Req {
                at: epoch(e["requestReceivedTimestamp"].as_str()?)? - t_back,
                ip: e["sourceIPs"][0].as_str().unwrap_or("").to_string(),
                user: e["user"]["username"].as_str().unwrap_or("").to_string(),
                code: e["responseStatus"]["code"].as_i64().unwrap_or(0),
            })
        })
        .collect()
}

fn agents_sum(n: usize, name: &str) -> f64 {
    (0..n).map(|k| sum(&agent_metrics(k), name)).sum()
}

/// The agents failing near the outage's end (their addresses) and those with an expired token.
fn failing(n: usize) -> (BTreeSet<String>, usize) {
    let t = now();
    let mut ips = BTreeSet::new();
    let mut expired = 0;
    for k in 0..n {
        let m = agent_metrics(k);
        if sum(&m, "tern_agent_consecutive_failures") > 0.0 {
            ips.insert(node_ip(k));
        }
        let e = sum(&m, "tern_agent_token_expiry_timestamp_seconds");
        if e > 0.0 && e <= t {
            expired += 1;
        }
    }
    (ips, expired)
}

pub(crate) fn run(o: &Opts, c: &Cluster, api: &Api) -> Res<()> {
    let (n, min) = (o.agents, o.outage_min as f64);
    say(&format!("phase 6: the API server down for {min} min"));
    renew_sa_tokens(c, n)?;
    let req0 = agents_sum(n, "tern_agent_token_requests_total");
    let starts: Vec<f64> = (0..n)
        .filter_map(|k| {
            std::fs::read_to_string(c.agent_dir(k).join("started"))
                .ok()?
                .trim()
                .parse()
                .ok()
        })
        .collect();
    let first = starts.iter().copied().fold(f64::INFINITY, f64::min);
    let spread = starts.iter().copied().fold(f64::NEG_INFINITY, f64::max) - first;
    let t_down = now();
    c.bash("stop_apiserver")?;
    sleep_until(t_down + min * 60.0 - 15.0);
    let req1 = agents_sum(n, "tern_agent_token_requests_total");
    let (fail, expired) = failing(n);
    sleep_until(t_down + min * 60.0);
    let t_back = now();
    c.bash("start_apiserver --service-account-max-token-expiration 1h --audit-policy-file \"$ROOT/tests/scale/audit-policy.yaml\" --audit-log-path \"$KT/apiserver/audit.log\" --audit-log-format json")?;
    say(&format!("  down {:.1} s (killed {:.0} s after the first agent's start; the agents started within {spread:.1} s); restarted, /readyz after {:.1} s", t_back - t_down, t_down - first, now() - t_back));
    let early = min * 60.0 - 15.0;
    say(&format!("  in the outage's first {early:.0} s, the agents' own counters: {} TokenRequests attempted ({:.3}/s), {} of {n} agents failing, {expired} with an expired token", req1 - req0, (req1 - req0) / early, fail.len()));
    sleep_until(t_back + 302.0);
    let m = server::read(api);
    let tm = now() - t_back;
    report_audit(c, t_back, tm, &fail, &m);
    let still = (0..n)
        .filter(|&k| sum(&agent_metrics(k), "tern_agent_consecutive_failures") > 0.0)
        .count();
    say(&format!(
        "  agents still failing by their own gauge at the end: {still}"
    ));
    let sim = format!(
        "--outage {} --outage-at {:.0} --start-spread {spread:.0} {n} 1 {}s",
        o.outage_min,
        t_down - first,
        o.granted()
    );
    say(&format!(
        "  prediction: cargo run --release -p tern-agent --example simulate -- {sim}"
    ));
    let bin = o.agent.with_file_name("examples").join("simulate");
    if bin.is_file() {
        if let Ok(out) = Command::new(&bin).args(sim.split(' ')).output() {
            let text = String::from_utf8_lossy(&out.stdout);
            say(&format!("    {}", text.lines().last().unwrap_or("")));
        }
    }
    Ok(())
}

/// The agents' TokenRequests in the first 300 s after the restart, from the audit log.
fn report_audit(c: &Cluster, t_back: f64, tm: f64, fail: &BTreeSet<String>, m: &server::Snapshot) {
    let reqs = audited(c, t_back);
    let ours = |r: &&Req| r.user == AGENT_USER;
    let window: Vec<&Req> = reqs
        .iter()
        .filter(ours)
        .filter(|r| (0.0..300.0).contains(&r.at))
        .collect();
    let mut per: BTreeMap<i64, usize> = BTreeMap::new();
    let mut codes: BTreeMap<i64, usize> = BTreeMap::new();
    let mut fresh: BTreeMap<&str, f64> = BTreeMap::new();
    for r in &window {
        *per.entry(r.at as i64).or_default() += 1;
        *codes.entry(r.code).or_default() += 1;
        if r.code == 201 {
            fresh.entry(r.ip.as_str()).or_insert(r.at);
        }
    }
    let (at, peak) = per
        .iter()
        .max_by_key(|(_, n)| **n)
        .map_or((0, 0), |(s, n)| (*s, *n));
    let codes: Vec<String> = codes.iter().map(|(c, n)| format!("{c}={n}")).collect();
    say(&format!("  the restarted server's audit log, the agents' TokenRequests in the first 300 s: {} = {:.4}/s, busiest second {peak} (second {at}); codes: {}", window.len(), window.len() as f64 / 300.0, codes.join(" ")));
    let got: Vec<f64> = fail
        .iter()
        .filter_map(|ip| fresh.get(ip.as_str()).copied())
        .collect();
    let slowest = got.iter().copied().fold(0.0, f64::max);
    say(&format!("  agents failing at the outage's end that got a token (201) in those 300 s: {} of {}, the slowest {slowest:.1} s after the restart began", got.len(), fail.len()));
    let upto = reqs.iter().filter(ours).filter(|r| r.at < tm).count();
    let own = reqs
        .iter()
        .filter(|r| r.user != AGENT_USER && r.at < tm)
        .count();
    say(&format!("  cross-check over the {tm:.1} s to the /metrics read: apiserver_request_total POST serviceaccounts/token {} [{}]; audit events the agents' {upto} + others' {own}", m.count("POST", "serviceaccounts", "token"), m.codes("POST", "serviceaccounts", "token")));
}

#[cfg(test)]
mod tests {
    use super::epoch;

    #[test]
    fn audit_timestamps() {
        assert_eq!(epoch("1970-01-01T00:00:00Z"), Some(0.0));
        // date -u -d 2026-12-06T14:50:01Z +%s
        assert_eq!(epoch("2026-12-06T14:50:01.500000Z"), Some(1_796_568_601.5));
        assert_eq!(epoch("2024-02-29T00:00:00Z"), Some(1_709_164_800.0));
        assert_eq!(epoch("garbage"), None);
    }
}
