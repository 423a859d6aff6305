//! The libcni-chain tier: a subject's plugins run as libcni runs a conflist (ADD in order with
//! `prevResult`, DEL in reverse with the cached result).

use std::time::{Duration, Instant};

use serde_json::Value;

use crate::exec::{invoke, invoke_out, with_prev};
use crate::subjects::Subject;
use crate::Res;

/// One chain ADD as libcni runs it: returns its wall time and the final result.
pub(crate) fn chain_add(subj: &Subject, cid: &str, ns: &str, args: &str) -> Res<(Duration, Value)> {
    let t0 = Instant::now();
    let mut prev: Option<Value> = subj.first_prev(ns);
    for step in &subj.steps {
        let stdin = with_prev(&step.conf, prev.as_ref())?;
        let (_, out) = invoke_out(&step.binary, "ADD", cid, ns, &subj.cni_path, args, &stdin)?;
        prev = Some(
            serde_json::from_str(&out)
                .map_err(|e| format!("{} ADD result: {e}: {out}", step.binary.display()))?,
        );
    }
    let took = t0.elapsed();
    prev.map(|p| (took, p))
        .ok_or_else(|| "empty chain".to_owned())
}

/// One chain DEL as libcni runs it: every step in reverse, with the cached result.
pub(crate) fn chain_del(
    subj: &Subject,
    cid: &str,
    ns: &str,
    args: &str,
    cached: Option<&Value>,
) -> Res<Duration> {
    let t0 = Instant::now();
    for step in subj.steps.iter().rev() {
        let stdin = with_prev(&step.conf, cached)?;
        invoke(&step.binary, "DEL", cid, ns, &subj.cni_path, args, &stdin)?;
    }
    Ok(t0.elapsed())
}
