//! The CRI-O tests' own helpers: a traced private CRI-O on the default chain, and the tracer's
//! log read back (shared by `crio_cri.rs` and `crio_restart.rs`: each binary uses a part).
#![allow(dead_code)]

use std::path::Path;

use serde_json::Value;
use tern_cri::chains::tern_chain;
use tern_cri::crio::Crio;

use crate::common::traced_on_free_range;

/// A private CRI-O on the default chain (named `net`, on `subnet`), tern and tern-tuning traced,
/// with the pod lookup against `kubeconfig` when given.
pub fn start(tag: &str, net: &str, subnet: &str, kubeconfig: Option<&Path>) -> (Crio, Value) {
    start_with(tag, net, subnet, kubeconfig, |_| {})
}

/// [`start`], with `edit` applied to the chain first.
pub fn start_with(
    tag: &str,
    net: &str,
    subnet: &str,
    kubeconfig: Option<&Path>,
    edit: impl FnOnce(&mut Value),
) -> (Crio, Value) {
    let mut chain = Value::Null;
    let c = Crio::start(&traced_on_free_range(tag, subnet), |dir| {
        chain = tern_chain(dir, net, subnet, kubeconfig).unwrap();
        edit(&mut chain);
        chain.clone()
    })
    .unwrap_or_else(|e| panic!("private CRI-O: {e}"));
    (c, chain)
}

/// The traced plugin calls so far: one JSON object each (plugin, command, containerId, netns,
/// ifname, args, path, conf).
pub fn trace(c: &Crio) -> Vec<Value> {
    std::fs::read_to_string(c.trace_log())
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("trace line {l:?}: {e}")))
        .collect()
}

/// `(plugin, command)` of each traced call.
pub fn pairs<'a>(calls: impl IntoIterator<Item = &'a Value>) -> Vec<(String, String)> {
    calls
        .into_iter()
        .map(|t| {
            pair(
                t["plugin"].as_str().unwrap(),
                t["command"].as_str().unwrap(),
            )
        })
        .collect()
}

/// `(plugin, command)` of every traced call for sandbox `id`, in order.
pub fn calls_for(c: &Crio, id: &str) -> Vec<(String, String)> {
    pairs(trace(c).iter().filter(|t| t["containerId"] == id))
}

/// `(plugin, command)` of every traced call from the `from`th on.
pub fn commands(c: &Crio, from: usize) -> Vec<(String, String)> {
    pairs(&trace(c)[from..])
}

pub fn pair(p: &str, c: &str) -> (String, String) {
    (p.to_owned(), c.to_owned())
}
