//! `tern-bench trace-check`: what `tern-agent trace`'s kernel check reads (decision 0048) beside a
//! whole listing, on a NetworkPolicy table of fleet size in a throwaway network namespace: SETS
//! peer sets (200 by default) of ELEMENTS addresses each (2,000: 400,000 elements, the size
//! decision 0031 lists in 3 s), every other one an interval set, a verdict map and one pod chain
//! naming every set. Runs once each read the check makes (the verdict map, a plain and an
//! interval set, the limit: `nft -j list`; a chain: `nft -s list chain`), `nft get element`
//! (which the check does not use) and the whole listing, and prints each one's wall and CPU time
//! and peak RSS.
//!
//! Each read is one `ip netns exec NS nft ...`, followed under ptrace to its exit: CPU and peak
//! RSS are nft's own, read at its exit stop (GNU time's `%U+%S` and `%M` of the same process);
//! wall from its start to its reaped exit. Usage (root): `tern-bench trace-check [--sets N]
//! [--elements N]`. The netns and the script file are removed at exit.

use std::fmt::Write as _;
use std::process::{Command, Stdio};
use std::time::Instant;

use nix::sys::wait::WaitStatus;
use tern_testkit::netns::TestNetns;

use crate::rss::follow_to_exit;
use crate::Res;

const USAGE: &str = "usage: tern-bench trace-check [--sets N (200)] [--elements N (2000)]";

/// The table: SETS sets `p4_NNNN` of ELEMENTS distinct /32s (every other address, so an
/// interval set keeps each as its own range), even-numbered ones interval sets; chain `in_0`
/// with one rule per set; the limit `log_denied`; the verdict map `ingress4` jumping to `in_0`.
pub(crate) fn table(sets: usize, elements: usize) -> String {
    let mut t = String::from("table inet tern_netpol {\n");
    for s in 1..=sets {
        let flags = if s % 2 == 0 { "flags interval; " } else { "" };
        let _ = write!(
            t,
            "\tset p4_{s:04} {{ type ipv4_addr; {flags}elements = {{ "
        );
        for e in 0..elements {
            let a = e * 2;
            let sep = if e > 0 { ", " } else { "" };
            let _ = write!(t, "{sep}10.{}.{}.{}", s % 250, a / 256, a % 256);
        }
        t.push_str(" } }\n");
    }
    t.push_str("\tchain in_0 {\n");
    for s in 1..=sets {
        let _ = writeln!(t, "\t\tip saddr @p4_{s:04} tcp dport 80 accept");
    }
    t.push_str("\t\tdrop\n\t}\n\tlimit log_denied { rate 100/second burst 100 packets }\n");
    t.push_str(
        "\tmap ingress4 { type ipv4_addr : verdict; elements = { 10.255.0.5 : jump in_0 } }\n}\n",
    );
    t
}

/// One read: wall s, CPU s, peak RSS KiB of `nft ARGS` in NS.
fn measure(ns: &str, args: &[&str]) -> Res<(f64, f64, u64)> {
    // sh waits on its stdin so that the trace is in place before nft starts.
    let mut child = Command::new("sh")
        .args([
            "-c",
            "read _ && exec ip netns exec \"$0\" nft \"$@\" >/dev/null",
            ns,
        ])
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("spawn sh: {e}"))?;
    let t0 = Instant::now();
    let (status, stop) = follow_to_exit(&mut child, b"go\n")?;
    let wall = t0.elapsed().as_secs_f64();
    if !matches!(status, WaitStatus::Exited(_, 0)) {
        let mut err = String::new();
        if let Some(mut e) = child.stderr.take() {
            let _ = std::io::Read::read_to_string(&mut e, &mut err);
        }
        return Err(format!("nft {args:?}: {status:?}: {}", err.trim()));
    }
    let kib = stop
        .hwm_kib
        .ok_or_else(|| format!("nft {args:?}: no VmHWM"))?;
    Ok((wall, stop.cpu_s, kib))
}

fn parse(args: &[String]) -> Res<(usize, usize)> {
    let (mut sets, mut elements) = (200, 2000);
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let mut num = || -> Res<usize> {
            it.next()
                .ok_or_else(|| format!("{a} needs a value"))?
                .parse()
                .map_err(|e| format!("{a}: {e}"))
        };
        match a.as_str() {
            "--sets" => sets = num()?,
            "--elements" => elements = num()?,
            _ => return Err(format!("unknown argument {a}\n{USAGE}")),
        }
    }
    if sets < 2 || elements == 0 {
        return Err(format!("--sets >= 2 and --elements >= 1\n{USAGE}"));
    }
    Ok((sets, elements))
}

fn run(sets: usize, elements: usize) -> Res<()> {
    let ns = TestNetns::new("tern-bench-trace");
    let script = tempfile::Builder::new()
        .prefix("tern-bench-trace")
        .tempfile()
        .map_err(|e| format!("temp file: {e}"))?;
    std::fs::write(script.path(), table(sets, elements)).map_err(|e| format!("script: {e}"))?;
    let path = script.path().display().to_string();
    let load = ns.exec(&["nft", "-f", &path]);
    if !load.status.success() {
        return Err(format!(
            "nft -f: {}",
            String::from_utf8_lossy(&load.stderr).trim()
        ));
    }
    println!(
        "table: {sets} sets x {elements} elements = {} elements, a {sets}-rule chain; load {}",
        sets * elements,
        crate::host::load()
    );
    let t = ["inet", "tern_netpol"];
    let reads: [(&str, Vec<&str>); 7] = [
        (
            "verdict map (-j list map)",
            vec!["-j", "list", "map", t[0], t[1], "ingress4"],
        ),
        (
            "plain set (-j list set)",
            vec!["-j", "list", "set", t[0], t[1], "p4_0001"],
        ),
        (
            "interval set (-j list set)",
            vec!["-j", "list", "set", t[0], t[1], "p4_0002"],
        ),
        (
            "limit (-j list limit)",
            vec!["-j", "list", "limit", t[0], t[1], "log_denied"],
        ),
        (
            "chain (-s list chain)",
            vec!["-s", "list", "chain", t[0], t[1], "in_0"],
        ),
        (
            "one element (get element)",
            vec!["get", "element", t[0], t[1], "p4_0001", "{ 10.1.0.2 }"],
        ),
        (
            "whole table (-s list table)",
            vec!["-s", "list", "table", t[0], t[1]],
        ),
    ];
    for (what, args) in &reads {
        let (wall, cpu, kib) = measure(ns.name(), args)?;
        println!(
            "{what:<34} wall {wall:5.2} s  cpu {cpu:5.2} s  max RSS {:4} MB",
            kib / 1024
        );
    }
    Ok(())
}

/// Runs the bench with `args` (after `trace-check`); returns the exit status.
pub(crate) fn main(args: &[String]) -> i32 {
    match parse(args).and_then(|(s, e)| run(s, e)) {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("tern-bench trace-check: {e}");
            1
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_names_every_set_once_and_alternates_intervals() {
        let t = table(4, 3);
        assert_eq!(t.matches("flags interval").count(), 2);
        assert!(t.contains("set p4_0002 { type ipv4_addr; flags interval; elements = { 10.2.0.0, 10.2.0.2, 10.2.0.4 } }"));
        assert_eq!(t.matches("tcp dport 80 accept").count(), 4);
        assert!(t.contains("ip saddr @p4_0004 "));
    }
}
