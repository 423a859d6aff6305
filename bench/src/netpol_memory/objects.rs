//! The objects `--netpol-memory` lists, as kube-apiserver v1.34 sends them for the cluster
//! `tern-bench netpol-scale` loads (same generator, same seed): each Pod with the metadata,
//! defaults, managedFields and status the real server adds (about 2.6 kB of JSON, as one read
//! back from the harness's server), served in pages of 500 as one list body each.

use serde_json::{json, Value};
use tern_kube::client::objects::ObjectPage;
use tern_kube::KubeError;

use crate::netpol_scale::objects::PodSpec;

/// Items per page, as the agent's client asks (`limit=500`).
pub(crate) const PAGE: usize = 500;

fn uid(i: usize) -> String {
    let x = (i as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    format!(
        "{:08x}-{:04x}-4{:03x}-a{:03x}-{:012x}",
        x >> 32,
        (x >> 16) & 0xffff,
        x & 0xfff,
        (x >> 20) & 0xfff,
        x & 0xffff_ffff_ffff
    )
}

fn managed(labels: &Value) -> Value {
    let keys: serde_json::Map<String, Value> = labels
        .as_object()
        .into_iter()
        .flatten()
        .map(|(k, _)| (format!("f:{k}"), json!({})))
        .chain([(".".to_owned(), json!({}))])
        .collect();
    let port = |p: u16| {
        (
            format!("k:{{\"containerPort\":{p},\"protocol\":\"TCP\"}}"),
            json!({".": {}, "f:containerPort": {}, "f:name": {}, "f:protocol": {}}),
        )
    };
    let ports: serde_json::Map<String, Value> = [port(8080), port(9090)].into_iter().collect();
    json!([
        {"manager": "curl", "operation": "Update", "apiVersion": "v1", "time": "2026-12-06T18:25:26Z",
         "fieldsType": "FieldsV1", "fieldsV1": {"f:metadata": {"f:labels": keys},
            "f:spec": {"f:automountServiceAccountToken": {}, "f:containers": {"k:{\"name\":\"main\"}": {
                ".": {}, "f:image": {}, "f:imagePullPolicy": {}, "f:name": {}, "f:ports": ports,
                "f:resources": {}, "f:terminationMessagePath": {}, "f:terminationMessagePolicy": {}}},
            "f:dnsPolicy": {}, "f:enableServiceLinks": {}, "f:nodeName": {}, "f:restartPolicy": {},
            "f:schedulerName": {}, "f:securityContext": {}, "f:terminationGracePeriodSeconds": {}}}},
        {"manager": "curl", "operation": "Update", "apiVersion": "v1", "time": "2026-12-06T18:25:40Z",
         "fieldsType": "FieldsV1", "subresource": "status", "fieldsV1": {"f:status": {
            "f:conditions": {".": {}, "k:{\"type\":\"Ready\"}": {".": {}, "f:status": {}, "f:type": {}}},
            "f:phase": {}, "f:podIP": {}, "f:podIPs": {".": {}, "k:{\"ip\":\"x\"}": {".": {}, "f:ip": {}}}}}}
    ])
}

/// Pod `i` as the API server lists it.
pub(crate) fn pod(p: &PodSpec, i: usize) -> Value {
    let mut ports = vec![
        json!({"name": "http", "containerPort": 8080, "protocol": "TCP"}),
        json!({"name": "metrics", "containerPort": 9090, "protocol": "TCP"}),
    ];
    if p.dns {
        ports.push(json!({"name": "dns", "containerPort": 53, "protocol": "UDP"}));
    }
    let toleration = |key: &str| json!({"key": key, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300});
    json!({
        "metadata": {"name": p.name, "namespace": p.ns, "uid": uid(i), "resourceVersion": (10_000 + i).to_string(),
            "generation": 1, "creationTimestamp": "2026-12-06T18:25:26Z", "labels": p.labels,
            "managedFields": managed(&p.labels)},
        "spec": {"containers": [{"name": "main", "image": "localhost/none:1", "ports": ports, "resources": {},
                "terminationMessagePath": "/dev/termination-log", "terminationMessagePolicy": "File",
                "imagePullPolicy": "IfNotPresent"}],
            "restartPolicy": "Always", "terminationGracePeriodSeconds": 30, "dnsPolicy": "ClusterFirst",
            "serviceAccountName": "default", "serviceAccount": "default", "automountServiceAccountToken": false,
            "nodeName": p.node, "securityContext": {}, "schedulerName": "default-scheduler",
            "tolerations": [toleration("node.kubernetes.io/not-ready"), toleration("node.kubernetes.io/unreachable")],
            "priority": 0, "enableServiceLinks": true, "preemptionPolicy": "PreemptLowerPriority"},
        "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True",
                "lastProbeTime": null, "lastTransitionTime": null}],
            "podIP": p.ip, "podIPs": [{"ip": p.ip}], "qosClass": "BestEffort"}
    })
}

/// A POSTed body (`netpol_scale::objects`' writes) as the API server lists it: the namespace
/// from the path, a uid and a resourceVersion.
pub(crate) fn listed(path: &str, body: &str, i: usize) -> Value {
    let mut v: Value = serde_json::from_str(body).unwrap_or_default();
    let ns = path.split('/').skip_while(|s| *s != "namespaces").nth(1);
    let m = &mut v["metadata"];
    if let (Some(ns), true) = (ns, path.ends_with("networkpolicies")) {
        m["namespace"] = json!(ns);
    }
    m["uid"] = json!(uid(i));
    m["resourceVersion"] = json!((5_000 + i).to_string());
    m["creationTimestamp"] = json!("2026-12-06T18:25:20Z");
    v
}

/// One list page's body, as the server sends it: `items` `from..from+PAGE` of `item`.
fn body(n: usize, from: usize, item: &dyn Fn(usize) -> Value) -> String {
    let to = (from + PAGE).min(n);
    let items: Vec<Value> = (from..to).map(item).collect();
    let cont = if to < n {
        to.to_string()
    } else {
        String::new()
    };
    json!({"kind": "List", "apiVersion": "v1",
        "metadata": {"resourceVersion": "99999", "continue": cont}, "items": items})
    .to_string()
}

/// The page at `cont` (`None`: the first) of `n` objects, decoded as the agent's client decodes
/// one (`tern_kube::Client::list_page`): the body read whole, then its items.
pub(crate) fn page(
    n: usize,
    cont: Option<&str>,
    item: &dyn Fn(usize) -> Value,
) -> Result<ObjectPage, KubeError> {
    let from = cont
        .map_or(Ok(0), str::parse)
        .map_err(|e| KubeError::Decode(format!("{e}")))?;
    let text = body(n, from, item);
    tern_kube::client::objects::page_from_body(&text, "bench")
}
