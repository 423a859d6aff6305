//! Listing and watching Nodes (`GET /api/v1/nodes`, `?watch=1`), reduced to what a route
//! controller needs: name, `spec.podCIDRs` and the `InternalIP` addresses.
//!
//! Invariants: a list follows `metadata.continue` until the last page and returns the list's
//! `metadata.resourceVersion`; a watch is one chunked stream of JSON lines (`{"type", "object"}`,
//! `apimachinery/pkg/watch/json`) read one event at a time under a per-read deadline, so a
//! silent connection ends instead of hanging; "resource version too old" arrives either as HTTP
//! 410 or as an `ERROR` event carrying a `Status` with code 410 (the watch cache's way) and is
//! reported as [`WatchEvent::Gone`] / [`KubeError::UnexpectedStatus`] with code 410 alike.
//! The paging, the event lines and the event envelope are the generic ones of `objects.rs`.

use std::io::Read;
use std::net::IpAddr;
use std::time::Duration;

use serde::Deserialize;

use super::objects::{decode_envelope, EventKind, EventLines};
use super::Client;
use crate::error::KubeError;

/// The Node annotation in which `tern-agent run --node-routes=vxlan` publishes its VXLAN
/// device's MAC (`aa:bb:cc:dd:ee:ff`), as flannel's `flannel.alpha.coreos.com/backend-data`
/// carries its `VtepMAC`.
pub const VTEP_MAC_ANNOTATION: &str = "tern.io/vtep-mac";

/// What the route controller reads from a Node.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NodeEntry {
    /// `metadata.name`.
    pub name: String,
    /// `spec.podCIDRs` (at most one per family), else `[spec.podCIDR]`, else empty.
    pub pod_cidrs: Vec<String>,
    /// `status.addresses[type=InternalIP].address` that parse as IP addresses, in order.
    pub internal_ips: Vec<IpAddr>,
    /// `metadata.annotations["tern.io/vtep-mac"]` ([`VTEP_MAC_ANNOTATION`]), as written.
    pub vtep_mac: Option<String>,
}

/// A full list: the Nodes and the `metadata.resourceVersion` to watch from.
#[derive(Debug, Clone, Default)]
pub struct NodeList {
    /// Every Node.
    pub items: Vec<NodeEntry>,
    /// The list's resourceVersion.
    pub resource_version: String,
}

/// One watch event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WatchEvent {
    /// `ADDED` or `MODIFIED`: the Node as it now is, and its resourceVersion.
    Applied(NodeEntry, String),
    /// `DELETED`: the Node's last state, and the resourceVersion of the deletion.
    Deleted(NodeEntry, String),
    /// `BOOKMARK`: nothing changed up to this resourceVersion.
    Bookmark(String),
    /// `ERROR` with code 410 (`Expired`/`Gone`): the resourceVersion is too old; list again.
    Gone,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RawMeta {
    #[serde(default)]
    name: String,
    #[serde(default)]
    resource_version: String,
    #[serde(default)]
    annotations: Option<std::collections::BTreeMap<String, String>>,
}

#[derive(Default, Deserialize)]
struct RawSpec {
    #[serde(default, rename = "podCIDR")]
    pod_cidr: String,
    #[serde(default, rename = "podCIDRs")]
    pod_cidrs: Vec<String>,
}

#[derive(Default, Deserialize)]
struct RawAddress {
    #[serde(default, rename = "type")]
    kind: String,
    #[serde(default)]
    address: String,
}

#[derive(Default, Deserialize)]
struct RawStatus {
    #[serde(default)]
    addresses: Vec<RawAddress>,
}

#[derive(Deserialize)]
struct RawNode {
    metadata: RawMeta,
    #[serde(default)]
    spec: Option<RawSpec>,
    #[serde(default)]
    status: Option<RawStatus>,
}

impl RawSpec {
    fn cidrs(self) -> Vec<String> {
        if !self.pod_cidrs.is_empty() {
            self.pod_cidrs
        } else if !self.pod_cidr.is_empty() {
            vec![self.pod_cidr]
        } else {
            Vec::new()
        }
    }
}

impl RawNode {
    fn entry(self) -> (NodeEntry, String) {
        let internal_ips = self
            .status
            .unwrap_or_default()
            .addresses
            .into_iter()
            .filter(|a| a.kind == "InternalIP")
            .filter_map(|a| a.address.parse().ok())
            .collect();
        let vtep_mac = self
            .metadata
            .annotations
            .and_then(|mut a| a.remove(VTEP_MAC_ANNOTATION));
        let e = NodeEntry {
            vtep_mac,
            name: self.metadata.name,
            pod_cidrs: self.spec.map(RawSpec::cidrs).unwrap_or_default(),
            internal_ips,
        };
        (e, self.metadata.resource_version)
    }
}

/// What the route controller reads from one Node's JSON (a list item or a watch event's object).
///
/// # Errors
/// [`KubeError::Decode`] for JSON not of a Node's shape (a field of the wrong type).
pub fn node_from_json(v: &serde_json::Value) -> Result<NodeEntry, KubeError> {
    RawNode::deserialize(v)
        .map(|n| n.entry().0)
        .map_err(|e| KubeError::Decode(format!("node: {e}")))
}

/// Decodes one watch line (`{"type":..,"object":..}`).
///
/// # Errors
/// [`KubeError::Decode`] for a line that is not an event, an unknown type, or an `ERROR` that is
/// not a 410; an `ERROR` with another code becomes that status's error.
pub fn decode_event(line: &str) -> Result<WatchEvent, KubeError> {
    let Some((kind, object)) = decode_envelope(line)? else {
        return Ok(WatchEvent::Gone);
    };
    let (node, rv) = serde_json::from_value::<RawNode>(object)
        .map(RawNode::entry)
        .map_err(|e| KubeError::Decode(format!("watch event object: {e}")))?;
    Ok(match kind {
        EventKind::Applied => WatchEvent::Applied(node, rv),
        EventKind::Deleted => WatchEvent::Deleted(node, rv),
        EventKind::Bookmark => WatchEvent::Bookmark(rv),
    })
}

/// An open watch: [`NodeWatch::next_event`] until it returns `Ok(None)` (the server ended the
/// stream, e.g. at `timeoutSeconds`).
pub struct NodeWatch {
    lines: EventLines,
}

impl std::fmt::Debug for NodeWatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NodeWatch").finish_non_exhaustive()
    }
}

impl NodeWatch {
    /// Reads the next event; `Ok(None)` at the end of the stream.
    ///
    /// # Errors
    /// [`KubeError::Timeout`] when nothing arrived within the per-read deadline, transport
    /// errors, and [`decode_event`]'s errors.
    pub fn next_event(&mut self) -> Result<Option<WatchEvent>, KubeError> {
        self.lines.next(decode_event)
    }
}

impl Client {
    /// Lists every Node, page by page (`limit=500`, following `metadata.continue`), each page
    /// under `timeout`. Source: the API conventions' "Lists and chunking".
    ///
    /// # Errors
    /// As [`Client::get_node`]; 410 (a continue token expired mid-list) as
    /// [`KubeError::UnexpectedStatus`] with code 410.
    pub fn list_nodes(&self, timeout: Duration) -> Result<NodeList, KubeError> {
        let (items, resource_version) =
            self.list_pages::<RawNode>("/api/v1/nodes", "node list", timeout)?;
        Ok(NodeList {
            items: items.into_iter().map(|n| n.entry().0).collect(),
            resource_version,
        })
    }

    /// Opens `GET /api/v1/nodes?watch=1&resourceVersion=<rv>&allowWatchBookmarks=true
    /// &timeoutSeconds=<secs>`. The connection must answer within `timeout`; then each read
    /// may wait up to `idle` (longer than the server's bookmark interval, about a minute on a
    /// real server) and the whole stream lasts at most `timeout_seconds` plus `timeout`.
    ///
    /// # Errors
    /// As [`Client::get_node`]; HTTP 410 as [`KubeError::UnexpectedStatus`] with code 410.
    pub fn watch_nodes(
        &self,
        resource_version: &str,
        timeout_seconds: u64,
        timeout: Duration,
        idle: Duration,
    ) -> Result<NodeWatch, KubeError> {
        let lines = self
            .watch_objects(
                "/api/v1/nodes",
                resource_version,
                timeout_seconds,
                timeout,
                idle,
            )?
            .lines;
        Ok(NodeWatch { lines })
    }

    /// Opens a watch stream at `path` (with its query): answered within `timeout`, each read
    /// waiting up to `idle`, the whole lasting at most `timeout_seconds` plus `timeout`.
    pub(super) fn open_stream(
        &self,
        path: &str,
        timeout_seconds: u64,
        timeout: Duration,
        idle: Duration,
    ) -> Result<Box<dyn Read + Send>, KubeError> {
        let url = format!("{}{}", self.server, path);
        let total = Duration::from_secs(timeout_seconds) + timeout;
        let resp = self
            .agent
            .get(&url)
            .header("Authorization", &format!("Bearer {}", self.token.expose()))
            .header("Accept", "application/json")
            .config()
            .timeout_global(Some(total))
            .timeout_recv_response(Some(timeout))
            .timeout_per_read(Some(idle))
            .build()
            .call()
            .map_err(|e| Self::map_err(e, timeout))?;
        let code = resp.status().as_u16();
        if code != 200 {
            let mut resp = resp;
            let body = resp
                .body_mut()
                .with_config()
                .limit(super::MAX_BODY)
                .read_to_string()
                .unwrap_or_default();
            return Err(KubeError::from_response(code, &body, None));
        }
        Ok(Box::new(resp.into_body().into_reader()))
    }

    /// Sets one annotation on a Node through its status subresource: `PATCH
    /// /api/v1/nodes/{name}/status` with a strategic merge patch
    /// `{"metadata":{"annotations":{key: value}}}` (200). The status subresource keeps
    /// `metadata` changes and drops `spec` ones, so the right it needs (`patch nodes/status`)
    /// cannot taint, cordon or re-address a Node; flannel writes its backend annotations the
    /// same way (`PatchStatus`).
    ///
    /// # Errors
    /// [`KubeError::Forbidden`] without `patch nodes/status`, [`KubeError::NotFound`] for a
    /// missing Node, the other status and transport errors as [`Client::get_node`].
    pub fn annotate_node(
        &self,
        name: &str,
        key: &str,
        value: &str,
        timeout: Duration,
    ) -> Result<(), KubeError> {
        let body = serde_json::json!({"metadata": {"annotations": {key: value}}});
        let bytes = serde_json::to_vec(&body).map_err(|e| KubeError::Decode(e.to_string()))?;
        let path = format!("/api/v1/nodes/{name}/status");
        Self::check(self.send("PATCH", &path, Some(bytes), timeout)?, 200).map(drop)
    }

    /// `GET path` answered 200: its body (at most `limit` bytes).
    pub(super) fn get_body(
        &self,
        path: &str,
        timeout: Duration,
        limit: u64,
    ) -> Result<String, KubeError> {
        let url = format!("{}{}", self.server, path);
        let mut resp = self
            .agent
            .get(&url)
            .header("Authorization", &format!("Bearer {}", self.token.expose()))
            .header("Accept", "application/json")
            .config()
            .timeout_global(Some(timeout))
            .build()
            .call()
            .map_err(|e| Self::map_err(e, timeout))?;
        let code = resp.status().as_u16();
        let retry_after = super::retry_after_secs(resp.headers());
        let body = resp
            .body_mut()
            .with_config()
            .limit(limit)
            .read_to_string()
            .map_err(|e| Self::map_err(e, timeout))?;
        if code == 200 {
            Ok(body)
        } else {
            Err(KubeError::from_response(code, &body, retry_after))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_decode_as_the_server_writes_them() {
        let line = r#"{"type":"ADDED","object":{"kind":"Node","apiVersion":"v1","metadata":{"name":"n2","resourceVersion":"7"},"spec":{"podCIDR":"10.244.1.0/24","podCIDRs":["10.244.1.0/24","fd00:1::/64"]},"status":{"addresses":[{"type":"Hostname","address":"n2"},{"type":"InternalIP","address":"192.168.0.2"},{"type":"InternalIP","address":"fd00::2"}]}}}"#;
        let WatchEvent::Applied(n, rv) = decode_event(line).unwrap() else {
            panic!()
        };
        assert_eq!(rv, "7");
        assert_eq!(n.pod_cidrs, ["10.244.1.0/24", "fd00:1::/64"]);
        assert_eq!(n.internal_ips.len(), 2);
        assert_eq!(n.vtep_mac, None);
        let annotated = r#"{"type":"MODIFIED","object":{"metadata":{"name":"n2","resourceVersion":"9","annotations":{"tern.io/vtep-mac":"0a:1b:2c:3d:4e:5f","other":"x"}}}}"#;
        let WatchEvent::Applied(n, _) = decode_event(annotated).unwrap() else {
            panic!()
        };
        assert_eq!(n.vtep_mac.as_deref(), Some("0a:1b:2c:3d:4e:5f"));
        let old = r#"{"type":"MODIFIED","object":{"metadata":{"name":"n","resourceVersion":"8"},"spec":{"podCIDR":"10.0.0.0/24"}}}"#;
        let WatchEvent::Applied(n, _) = decode_event(old).unwrap() else {
            panic!()
        };
        assert_eq!(n.pod_cidrs, ["10.0.0.0/24"]);
        let bm = r#"{"type":"BOOKMARK","object":{"kind":"Node","apiVersion":"v1","metadata":{"resourceVersion":"12","creationTimestamp":null},"spec":{},"status":{"daemonEndpoints":{"kubeletEndpoint":{"Port":0}},"nodeInfo":{}}}}"#;
        assert_eq!(decode_event(bm).unwrap(), WatchEvent::Bookmark("12".into()));
        let gone = r#"{"type":"ERROR","object":{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"too old resource version: 5 (10)","reason":"Expired","code":410}}"#;
        assert_eq!(decode_event(gone).unwrap(), WatchEvent::Gone);
        let e = r#"{"type":"ERROR","object":{"kind":"Status","message":"boom","code":500}}"#;
        assert!(matches!(
            decode_event(e),
            Err(KubeError::ServerError { code: 500, .. })
        ));
        assert!(decode_event("{not json").is_err());
    }
}
