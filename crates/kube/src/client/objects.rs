//! Listing and watching any collection as raw JSON objects (`GET <collection>`, `?watch=1`):
//! what the NetworkPolicy controller reads (`/api/v1/pods`, `/api/v1/namespaces`,
//! `/apis/networking.k8s.io/v1/networkpolicies`), on the same blocking client, pages, deadlines
//! and 410 handling as the Node watch (`nodes.rs`), the objects left for the caller to read.
//!
//! Invariants: as `nodes.rs` — a list follows `metadata.continue` to the last page; a watch
//! reads one event line at a time under a per-read deadline; 410 is [`ObjectEvent::Gone`].
//! The paging (`Client::list_pages`), the watch and its event-line reading
//! ([`Client::watch_objects`], `EventLines`) and the event envelope (`decode_envelope`) here
//! serve the Node list and watch too.

use std::io::{BufRead, BufReader, Read};
use std::time::Duration;

use serde::de::DeserializeOwned;
use serde::Deserialize;

use super::Client;
use crate::error::KubeError;

/// Items per list page (`limit`), as client-go's reflector pages.
pub(super) const PAGE: u32 = 500;
/// Largest list page body read (64 MiB: 500 large Nodes).
pub(super) const MAX_PAGE: u64 = 64 << 20;
/// Longest watch event line (4 MiB: one Node).
pub(super) const MAX_EVENT: usize = 4 << 20;

/// A full list: the objects and the `metadata.resourceVersion` to watch from.
#[derive(Debug, Clone, Default)]
pub struct ObjectList {
    /// Every object, as the API server sent it.
    pub items: Vec<serde_json::Value>,
    /// The list's resourceVersion.
    pub resource_version: String,
}

/// One page of a list ([`Client::list_page`]).
#[derive(Debug, Clone, Default)]
pub struct ObjectPage {
    /// This page's objects, as the API server sent them.
    pub items: Vec<serde_json::Value>,
    /// The list's resourceVersion (the same on every page of one list).
    pub resource_version: String,
    /// `metadata.continue`: the token of the next page; `None` on the last.
    pub cont: Option<String>,
}

/// One watch event.
#[derive(Debug, Clone, PartialEq)]
pub enum ObjectEvent {
    /// `ADDED` or `MODIFIED`: the object as it now is.
    Applied(serde_json::Value),
    /// `DELETED`: the object's last state.
    Deleted(serde_json::Value),
    /// `BOOKMARK`: nothing changed up to this resourceVersion.
    Bookmark(String),
    /// `ERROR` with code 410: the resourceVersion is too old; list again.
    Gone,
}

/// `metadata.namespace` + `/` + `metadata.name` of an object (`name` alone when cluster-scoped).
pub fn key_of(v: &serde_json::Value) -> String {
    let m = &v["metadata"];
    let name = m["name"].as_str().unwrap_or_default();
    match m["namespace"].as_str() {
        Some(ns) if !ns.is_empty() => format!("{ns}/{name}"),
        _ => name.to_owned(),
    }
}

/// `metadata.resourceVersion` of an object.
pub fn resource_version_of(v: &serde_json::Value) -> String {
    v["metadata"]["resourceVersion"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

#[derive(Deserialize)]
struct RawEvent {
    #[serde(rename = "type")]
    kind: String,
    object: serde_json::Value,
}

/// A watch event's `type`, once an `ERROR` has been read.
pub(super) enum EventKind {
    /// `ADDED` or `MODIFIED`.
    Applied,
    /// `DELETED`.
    Deleted,
    /// `BOOKMARK`.
    Bookmark,
}

/// Decodes one watch line's envelope (`{"type":..,"object":..}`): the type and the object, or
/// `None` for an `ERROR` with code 410 (`Expired`/`Gone`).
///
/// # Errors
/// [`KubeError::Decode`] for a line that is not an event or of an unknown type; an `ERROR` other
/// than 410 becomes that status's error.
pub(super) fn decode_envelope(
    line: &str,
) -> Result<Option<(EventKind, serde_json::Value)>, KubeError> {
    let raw: RawEvent =
        serde_json::from_str(line).map_err(|e| KubeError::Decode(format!("watch event: {e}")))?;
    let kind = match raw.kind.as_str() {
        "ADDED" | "MODIFIED" => EventKind::Applied,
        "DELETED" => EventKind::Deleted,
        "BOOKMARK" => EventKind::Bookmark,
        "ERROR" => {
            let code = raw.object["code"]
                .as_u64()
                .and_then(|c| u16::try_from(c).ok())
                .unwrap_or(500);
            if code == 410 {
                return Ok(None);
            }
            return Err(KubeError::from_response(
                code,
                &raw.object.to_string(),
                None,
            ));
        }
        other => return Err(KubeError::Decode(format!("watch event type {other:?}"))),
    };
    Ok(Some((kind, raw.object)))
}

/// Decodes one watch line (`{"type":..,"object":..}`).
///
/// # Errors
/// [`KubeError::Decode`] for a line that is not an event or of an unknown type; an `ERROR` other
/// than 410 becomes that status's error.
pub fn decode_object_event(line: &str) -> Result<ObjectEvent, KubeError> {
    Ok(match decode_envelope(line)? {
        Some((EventKind::Applied, v)) => ObjectEvent::Applied(v),
        Some((EventKind::Deleted, v)) => ObjectEvent::Deleted(v),
        Some((EventKind::Bookmark, v)) => ObjectEvent::Bookmark(resource_version_of(&v)),
        None => ObjectEvent::Gone,
    })
}

/// A watch response read one JSON line at a time: each read waits at most `idle`, a line is at
/// most [`MAX_EVENT`] bytes, blank lines are passed over.
pub(super) struct EventLines {
    reader: BufReader<Box<dyn Read + Send>>,
    line: Vec<u8>,
    idle: Duration,
}

impl EventLines {
    /// Reads the next non-blank line and decodes it with `decode`; `Ok(None)` at the end of the
    /// stream.
    ///
    /// # Errors
    /// [`KubeError::Timeout`] when nothing arrived within `idle`, [`KubeError::Connect`] for
    /// other transport errors, [`KubeError::Decode`] for a line over [`MAX_EVENT`] bytes, and
    /// `decode`'s errors.
    pub(super) fn next<E>(
        &mut self,
        decode: impl Fn(&str) -> Result<E, KubeError>,
    ) -> Result<Option<E>, KubeError> {
        loop {
            self.line.clear();
            let n = (&mut self.reader)
                .take(MAX_EVENT as u64 + 1)
                .read_until(b'\n', &mut self.line)
                .map_err(|e| match e.kind() {
                    std::io::ErrorKind::TimedOut | std::io::ErrorKind::WouldBlock => {
                        KubeError::Timeout(self.idle)
                    }
                    _ => KubeError::Connect(format!("watch stream: {e}")),
                })?;
            if n == 0 {
                return Ok(None);
            }
            if self.line.len() > MAX_EVENT {
                return Err(KubeError::Decode(format!(
                    "watch event over {MAX_EVENT} bytes"
                )));
            }
            let text = String::from_utf8_lossy(&self.line);
            if text.trim().is_empty() {
                continue;
            }
            return decode(text.trim()).map(Some);
        }
    }
}

/// An open watch of a collection.
pub struct ObjectWatch {
    /// The stream (the Node watch reads it with its own decoder).
    pub(super) lines: EventLines,
}

impl std::fmt::Debug for ObjectWatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ObjectWatch").finish_non_exhaustive()
    }
}

impl ObjectWatch {
    /// Reads the next event; `Ok(None)` at the end of the stream.
    ///
    /// # Errors
    /// [`KubeError::Timeout`] when nothing arrived within the per-read deadline, transport
    /// errors, and [`decode_object_event`]'s errors.
    pub fn next_event(&mut self) -> Result<Option<ObjectEvent>, KubeError> {
        self.lines.next(decode_object_event)
    }
}

#[derive(Deserialize)]
struct RawList<T> {
    metadata: RawListMeta,
    #[serde(default = "Vec::new")]
    items: Vec<T>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RawListMeta {
    #[serde(default)]
    resource_version: String,
    #[serde(default, rename = "continue")]
    cont: String,
}

/// One list page's body (`{"metadata": .., "items": [..]}`) decoded into an [`ObjectPage`];
/// `collection` names it in a decode error.
///
/// # Errors
/// [`KubeError::Decode`] for a body that is not such a list.
pub fn page_from_body(body: &str, collection: &str) -> Result<ObjectPage, KubeError> {
    let page: RawList<serde_json::Value> = serde_json::from_str(body)
        .map_err(|e| KubeError::Decode(format!("{collection} list: {e}")))?;
    Ok(ObjectPage {
        items: page.items,
        resource_version: page.metadata.resource_version,
        cont: Some(page.metadata.cont).filter(|c| !c.is_empty()),
    })
}

impl Client {
    /// Lists every item of `collection` (a path such as `/api/v1/pods`), page by page
    /// (`limit=500`, following `metadata.continue`), each page under `timeout`, each item
    /// decoded as `T`; returns the items and the last page's `metadata.resourceVersion`.
    /// `what` names the list in a decode error (`"node list: ..."`). Source: the API
    /// conventions' "Lists and chunking".
    ///
    /// # Errors
    /// The status and transport errors of a GET; 410 (a continue token expired mid-list) as
    /// [`KubeError::UnexpectedStatus`] with code 410; [`KubeError::Decode`] for a page that is
    /// not such a list.
    pub(super) fn list_pages<T: DeserializeOwned>(
        &self,
        collection: &str,
        what: &str,
        timeout: Duration,
    ) -> Result<(Vec<T>, String), KubeError> {
        let mut items = Vec::new();
        let mut cont = String::new();
        loop {
            let mut path = format!("{collection}?limit={PAGE}");
            if !cont.is_empty() {
                path.push_str(&format!("&continue={cont}"));
            }
            let body = self.get_body(&path, timeout, MAX_PAGE)?;
            let page: RawList<T> = serde_json::from_str(&body)
                .map_err(|e| KubeError::Decode(format!("{what}: {e}")))?;
            items.extend(page.items);
            if page.metadata.cont.is_empty() {
                return Ok((items, page.metadata.resource_version));
            }
            cont = page.metadata.cont;
        }
    }

    /// Lists one page of `collection` (a path such as `/api/v1/pods`): at most [`PAGE`] objects
    /// (`limit=500`) from `cont` (`None`: the first page; else a previous page's
    /// [`ObjectPage::cont`]), under `timeout`. A caller that reads each page into a smaller type
    /// and drops it never holds a whole large list as JSON. Source: the API conventions' "Lists
    /// and chunking".
    ///
    /// # Errors
    /// As [`Client::list_objects`]; 410 (the continue token expired) as
    /// [`KubeError::UnexpectedStatus`] with code 410.
    pub fn list_page(
        &self,
        collection: &str,
        cont: Option<&str>,
        timeout: Duration,
    ) -> Result<ObjectPage, KubeError> {
        let mut path = format!("{collection}?limit={PAGE}");
        if let Some(c) = cont.filter(|c| !c.is_empty()) {
            path.push_str(&format!("&continue={c}"));
        }
        let body = self.get_body(&path, timeout, MAX_PAGE)?;
        page_from_body(&body, collection)
    }

    /// Lists every object of `collection` (a path such as `/api/v1/pods`), page by page
    /// (`limit=500`, following `metadata.continue`), each page under `timeout`.
    ///
    /// # Errors
    /// As [`Client::list_nodes`].
    pub fn list_objects(
        &self,
        collection: &str,
        timeout: Duration,
    ) -> Result<ObjectList, KubeError> {
        let (items, resource_version) =
            self.list_pages(collection, &format!("{collection} list"), timeout)?;
        Ok(ObjectList {
            items,
            resource_version,
        })
    }

    /// Watches `collection` from `resource_version`, with bookmarks (`GET
    /// <collection>?watch=1&resourceVersion=<rv>&allowWatchBookmarks=true&timeoutSeconds=<secs>`);
    /// deadlines as [`Client::watch_nodes`].
    ///
    /// # Errors
    /// As [`Client::watch_nodes`].
    pub fn watch_objects(
        &self,
        collection: &str,
        resource_version: &str,
        timeout_seconds: u64,
        timeout: Duration,
        idle: Duration,
    ) -> Result<ObjectWatch, KubeError> {
        let path = format!(
            "{collection}?watch=1&resourceVersion={resource_version}&allowWatchBookmarks=true&timeoutSeconds={timeout_seconds}"
        );
        let reader = self.open_stream(&path, timeout_seconds, timeout, idle)?;
        let lines = EventLines {
            reader: BufReader::new(reader),
            line: Vec::new(),
            idle,
        };
        Ok(ObjectWatch { lines })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_keys_and_versions() {
        let line = r#"{"type":"ADDED","object":{"kind":"Pod","metadata":{"namespace":"x","name":"p","resourceVersion":"7"}}}"#;
        let ObjectEvent::Applied(v) = decode_object_event(line).unwrap() else {
            panic!()
        };
        assert_eq!(key_of(&v), "x/p");
        assert_eq!(resource_version_of(&v), "7");
        let ns = serde_json::json!({"metadata": {"name": "kube-system"}});
        assert_eq!(key_of(&ns), "kube-system");
        let bm =
            r#"{"type":"BOOKMARK","object":{"kind":"Pod","metadata":{"resourceVersion":"12"}}}"#;
        assert_eq!(
            decode_object_event(bm).unwrap(),
            ObjectEvent::Bookmark("12".into())
        );
        let gone = r#"{"type":"ERROR","object":{"kind":"Status","code":410}}"#;
        assert_eq!(decode_object_event(gone).unwrap(), ObjectEvent::Gone);
        let del = r#"{"type":"DELETED","object":{"metadata":{"name":"n"}}}"#;
        assert!(matches!(
            decode_object_event(del).unwrap(),
            ObjectEvent::Deleted(_)
        ));
        assert!(decode_object_event(r#"{"type":"ERROR","object":{"code":403}}"#).is_err());
        assert!(decode_object_event(r#"{"type":"HUH","object":{}}"#).is_err());
    }
}
