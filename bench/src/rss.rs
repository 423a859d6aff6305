//! Peak RSS per invocation: the plugin process alone, `VmHWM` read under ptrace at its exit stop.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Child;

use nix::sys::ptrace;
use nix::sys::wait::{waitpid, WaitPidFlag, WaitStatus};
use nix::unistd::Pid;
use serde_json::Value;
use tern_kube::helper::{Call, PodCall, PodReply, HELPER};

use crate::env::Env;
use crate::exec::{drain, feed, plugin_cmd, with_prev};
use crate::opts::Opts;
use crate::report::verdict;
use crate::rounds::container_id;
use crate::subjects::{Step, Subject};
use crate::Res;

/// Execs one invocation under ptrace (untimed) and returns the process's own peak RSS in KiB:
/// `VmHWM` read at the `PTRACE_EVENT_EXIT` stop of its main thread. Other stops pass through,
/// signals re-injected. Must run on one thread from spawn to reap (ptrace ties tracer threads).
pub(crate) fn invoke_peak_rss(
    bin: &Path,
    verb: &str,
    cid: &str,
    netns: &str,
    cni_path: &str,
    args: &str,
    stdin: &[u8],
) -> Res<(u64, String)> {
    let mut child = plugin_cmd(bin, verb, cid, netns, cni_path, args)
        .spawn()
        .map_err(|e| format!("spawn {}: {e}", bin.display()))?;
    let (status, stop) = follow_to_exit(&mut child, stdin)?;
    let hwm = stop.hwm_kib;
    let out = drain(&mut child);
    if !matches!(status, WaitStatus::Exited(_, 0)) {
        return Err(format!(
            "{} {verb} {cid}: {status:?}: {}",
            bin.display(),
            out.trim()
        ));
    }
    hwm.map(|h| (h, out))
        .ok_or_else(|| format!("no VmHWM for {} {verb}", bin.display()))
}

/// What a traced process showed at its `PTRACE_EVENT_EXIT` stop: its own peak RSS (KiB) and
/// CPU seconds (user + system), before its address space is torn down.
pub(crate) struct ExitStop {
    pub(crate) hwm_kib: Option<u64>,
    pub(crate) cpu_s: f64,
}

/// Seizes CHILD, which must be blocked reading its stdin, feeds it STDIN and follows it (across
/// its execs: the pid stays) to its reaped exit, reading [`ExitStop`] at its main thread's exit
/// stop. Other stops pass through, signals re-injected. One thread from spawn to reap (ptrace
/// ties tracer threads).
pub(crate) fn follow_to_exit(child: &mut Child, stdin: &[u8]) -> Res<(WaitStatus, ExitStop)> {
    let raw = i32::try_from(child.id()).map_err(|e| format!("pid: {e}"))?;
    let pid = Pid::from_raw(raw);
    // Seize before feeding: the exit stop of a child that already ran would be missed.
    if let Err(e) = ptrace::seize(pid, ptrace::Options::PTRACE_O_TRACEEXIT) {
        let _ = child.kill();
        let _ = child.wait();
        return Err(format!("ptrace seize {pid}: {e}"));
    }
    feed(child, stdin)?;
    let mut stop = ExitStop {
        hwm_kib: None,
        cpu_s: 0.0,
    };
    let status = loop {
        match waitpid(pid, Some(WaitPidFlag::__WALL)).map_err(|e| format!("waitpid: {e}"))? {
            WaitStatus::PtraceEvent(p, _, ev) if ev == ptrace::Event::PTRACE_EVENT_EXIT as i32 => {
                if p == pid {
                    stop.hwm_kib = vm_hwm_kib(p);
                    stop.cpu_s = crate::cluster::cpu(child.id()).0;
                }
                let _ = ptrace::cont(p, None);
            }
            WaitStatus::Stopped(p, sig) => {
                let _ = ptrace::cont(p, Some(sig));
            }
            WaitStatus::PtraceEvent(p, _, _) | WaitStatus::PtraceSyscall(p) => {
                let _ = ptrace::cont(p, None);
            }
            s @ (WaitStatus::Exited(..) | WaitStatus::Signaled(..)) => break s,
            _ => {}
        }
    };
    Ok((status, stop))
}

/// `VmHWM` of a live process, in KiB.
pub(crate) fn vm_hwm_kib(pid: Pid) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    if std::env::var_os("TERN_BENCH_RSS_DETAIL").is_some() {
        // Where the resident memory is at exit: anonymous (heap, stacks) vs file-backed (text).
        let name = status.lines().next().unwrap_or_default();
        let rss: Vec<&str> = status
            .lines()
            .filter(|l| {
                l.starts_with("Rss")
                    || l.starts_with("VmHWM")
                    || l.starts_with("VmExe")
                    || l.starts_with("VmLib")
            })
            .collect();
        eprintln!(
            "  [{name}] {}",
            rss.join(" | ")
                .split_whitespace()
                .collect::<Vec<_>>()
                .join(" ")
        );
    }
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

/// Peak RSS samples (KiB) of one binary: ADD, DEL.
pub(crate) type AddDelKib = [Vec<u64>; 2];

/// What [`bench_rss`] measured: per chain step; host-local exec'd directly; and for a lookup
/// subject, `tern-lookup` exec'd directly with the pod call tern makes (another pod of the
/// stand-in, so each pod is still read exactly once).
pub(crate) type RssSamples = (Vec<AddDelKib>, Option<AddDelKib>, Option<Vec<u64>>);

/// Peak RSS (KiB) of `samples` chain ADDs and DELs: per step, its ADD samples and its DEL
/// samples; then, when the subject asks for it, host-local invoked directly with the first step's
/// netconf (ADD, DEL). Untimed, sequential, in the host netns.
pub(crate) fn bench_rss(
    env: &mut Env,
    subj: &Subject,
    samples: usize,
    host_local: &Path,
) -> Res<RssSamples> {
    let names = env.make_pods(samples)?;
    let r = rss_on(env, subj, &names, host_local);
    env.drop_pods(&names);
    r
}

/// [`bench_rss`] on pod netns `names`, made by the caller.
pub(crate) fn rss_on(
    env: &Env,
    subj: &Subject,
    names: &[String],
    host_local: &Path,
) -> Res<RssSamples> {
    if subj.on_iface {
        env.add_ifaces(names)?;
    }
    let cp = subj.cni_path.as_str();
    let r = env.host_ns.run_in(|| -> Res<_> {
        let mut steps: Vec<AddDelKib> = subj.steps.iter().map(|_| Default::default()).collect();
        let mut hl: AddDelKib = Default::default();
        let mut helper: Vec<u64> = Vec::new();
        for (i, n) in names.iter().enumerate() {
            let ns = format!("/run/netns/{n}");
            let cid = container_id(subj, &env.tag, "rss", i);
            let args = if subj.lookup {
                env.pod_args(&cid)?
            } else {
                String::new()
            };
            let mut prev: Option<Value> = subj.first_prev(&ns);
            for (k, step) in subj.steps.iter().enumerate() {
                let stdin = with_prev(&step.conf, prev.as_ref())?;
                let (kib, out) =
                    invoke_peak_rss(&step.binary, "ADD", &cid, &ns, cp, &args, &stdin)?;
                steps[k][0].push(kib);
                prev = Some(serde_json::from_str(&out).map_err(|e| format!("ADD result: {e}"))?);
            }
            let cached = if subj.steps.len() > 1 {
                prev
            } else {
                subj.first_prev(&ns)
            };
            for (k, step) in subj.steps.iter().enumerate().rev() {
                let stdin = with_prev(&step.conf, cached.as_ref())?;
                let (kib, _) = invoke_peak_rss(&step.binary, "DEL", &cid, &ns, cp, &args, &stdin)?;
                steps[k][1].push(kib);
            }
            if subj.lookup {
                let (kib, _) = lookup_helper_peak_rss(env, &subj.steps[0], &cid, cp)?;
                helper.push(kib);
            }
            if subj.rss_host_local {
                let stdin = with_prev(&subj.steps[0].conf, None)?;
                let hcid = format!("hl-{cid}");
                for (j, verb) in ["ADD", "DEL"].into_iter().enumerate() {
                    let (kib, _) = invoke_peak_rss(host_local, verb, &hcid, &ns, cp, "", &stdin)?;
                    hl[j].push(kib);
                }
            }
        }
        Ok((
            steps,
            subj.rss_host_local.then_some(hl),
            subj.lookup.then_some(helper),
        ))
    });
    r.map_err(|e| e.to_string())?
}

/// Peak RSS of `tern-lookup` (beside `step`'s binary) exec'd directly with the pod call tern
/// makes for `step`'s netconf, for a fresh pod named after `cid`.
pub(crate) fn lookup_helper_peak_rss(
    env: &Env,
    step: &Step,
    cid: &str,
    cni_path: &str,
) -> Res<(u64, String)> {
    let name = format!("lk-{cid}");
    let args = env.pod_args(&name)?;
    let uid = args
        .split(';')
        .find_map(|kv| kv.strip_prefix("K8S_POD_UID="))
        .ok_or("pod args without a UID")?;
    let path = |v: &Value| v.as_str().map(PathBuf::from).ok_or("netconf path missing");
    let call = Call::Pod(PodCall {
        kubeconfig: path(&step.conf["kubernetes"]["kubeconfig"])?,
        agent_socket: path(&step.conf["agentSocket"])?,
        namespace: "default".into(),
        name,
        uid: Some(uid.to_owned()),
        deadline_ms: 5000,
    });
    let helper = step.binary.with_file_name(HELPER);
    let stdin = serde_json::to_vec(&call).map_err(|e| e.to_string())?;
    let (kib, out) = invoke_peak_rss(&helper, "ADD", cid, "", cni_path, "", &stdin)?;
    serde_json::from_str::<PodReply>(&out).map_err(|e| format!("{HELPER} answered {out}: {e}"))?;
    Ok((kib, out))
}

/// Median (upper) of KiB samples, 0 when empty.
pub(crate) fn median(v: &[u64]) -> u64 {
    let mut s = v.to_vec();
    s.sort_unstable();
    s.get(s.len() / 2).copied().unwrap_or(0)
}

pub(crate) fn kib_stats(v: &[u64]) -> String {
    let mut s = v.to_vec();
    s.sort_unstable();
    let med = s.get(s.len() / 2).copied().unwrap_or(0);
    let max = s.last().copied().unwrap_or(0);
    format!(
        "median {:>6.2} MiB  max {:>6.2} MiB",
        med as f64 / 1024.0,
        max as f64 / 1024.0
    )
}

/// Runs the RSS pass of every subject and prints it, with the 3 MiB target of tern's own peak.
///
/// # Errors
/// An invocation that fails, or a stand-in that saw other than one GET per looked-up call.
pub(crate) fn report_rss(o: &Opts, env: &mut Env, subs: &[Subject], host_local: &Path) -> Res<()> {
    println!(
        "\npeak RSS per invocation ({} samples each; the process itself, VmHWM at exit):",
        o.rss_samples
    );
    let mut tern_max = 0;
    // The largest peak of each of tern's plugins, for the 2 MiB target.
    let mut plugin_max: Vec<(String, u64)> = Vec::new();
    let mut tuning_alone: HashMap<&str, [u64; 2]> = HashMap::new();
    for s in subs.iter().filter(|s| s.label != "hl") {
        let (steps, hl, helper) = bench_rss(env, s, o.rss_samples, host_local)?;
        if s.lookup {
            // One GET per tern ADD, one per direct tern-lookup run, each of its own pod.
            let (gets, odd) = env.take_pod_gets();
            if gets != 2 * o.rss_samples || !odd.is_empty() {
                return Err(format!(
                    "RSS pass: the stand-in saw {gets} pod GETs for {} tern+lookup ADDs and as many tern-lookup runs ({odd:?})",
                    o.rss_samples
                ));
            }
        }
        if let (true, [[add, del]]) = (s.on_iface, steps.as_slice()) {
            tuning_alone.insert(s.label, [median(add), median(del)]);
        }
        for (step, [add, del]) in s.steps.iter().zip(&steps) {
            // The 3 MiB target is tern's own, with or without the lookup (whose TLS client runs in
            // tern-lookup, shown below it).
            if step.binary == o.tern {
                tern_max = add
                    .iter()
                    .chain(del)
                    .copied()
                    .max()
                    .unwrap_or(tern_max)
                    .max(tern_max);
            }
            let bin = step
                .binary
                .file_name()
                .map(|f| f.to_string_lossy().into_owned())
                .unwrap_or_default();
            if bin.starts_with("tern") && s.label != "tern-b" {
                let m = add.iter().chain(del).copied().max().unwrap_or(0);
                match plugin_max.iter_mut().find(|(b, _)| *b == bin) {
                    Some(slot) => slot.1 = slot.1.max(m),
                    None => plugin_max.push((bin.clone(), m)),
                }
            }
            println!(
                "  {:<11} {:<11} ADD: {}   DEL: {}",
                s.label,
                bin,
                kib_stats(add),
                kib_stats(del)
            );
        }
        if let Some(h) = helper {
            println!(
                "  tern-lookup (the helper tern execs for the lookup), exec'd directly: {}",
                kib_stats(&h)
            );
        }
        if let Some([add, del]) = hl {
            println!(
                "  host-local under {:<5} netconf, exec'd directly: ADD: {}   DEL: {}",
                s.label,
                kib_stats(&add),
                kib_stats(&del)
            );
        }
    }
    println!(
        "  target: tern peak RSS < 3 MiB: {} (max {:.2} MiB)",
        verdict(tern_max < 3 * 1024),
        tern_max as f64 / 1024.0
    );
    for (bin, m) in &plugin_max {
        println!(
            "  target: peak RSS of {bin} <= 2.0 MiB: {} (max {:.2} MiB over every row and sample)",
            verdict(*m <= 2 * 1024),
            *m as f64 / 1024.0
        );
    }
    if let (Some(t), Some(r)) = (tuning_alone.get("tern-tuning"), tuning_alone.get("tuning")) {
        println!(
            "  tern-tuning / tuning alone, median peak RSS: ADD {:.2}x ({:.2} / {:.2} MiB), DEL {:.2}x ({:.2} / {:.2} MiB)",
            t[0] as f64 / r[0] as f64,
            t[0] as f64 / 1024.0,
            r[0] as f64 / 1024.0,
            t[1] as f64 / r[1] as f64,
            t[1] as f64 / 1024.0,
            r[1] as f64 / 1024.0
        );
    }
    Ok(())
}
