//! What the reflector reads the API through: one connection's list pages and watch stream
//! ([`Api`]), made afresh for each connection ([`Connect`]), so rotated credentials are read
//! again and tests can script the server.
//!
//! Invariant: [`ClientApi`] is `tern_kube::Client`'s paged list and bookmark watch, nothing more:
//! the deadlines are the caller's settings.

use std::time::Duration;

use tern_kube::client::objects::{ObjectEvent, ObjectPage, ObjectWatch};
use tern_kube::{Client, KubeError};

/// An open watch: events until `Ok(None)` (the server ended it, e.g. at `timeoutSeconds`).
pub trait Events {
    /// The next event.
    ///
    /// # Errors
    /// Transport errors, a read deadline passed, an undecodable line, an `ERROR` event other
    /// than 410.
    fn next_event(&mut self) -> Result<Option<ObjectEvent>, KubeError>;
}

impl Events for ObjectWatch {
    fn next_event(&mut self) -> Result<Option<ObjectEvent>, KubeError> {
        ObjectWatch::next_event(self)
    }
}

/// One connection to the API server, for one collection path.
pub trait Api {
    /// One list page from `cont` (`None`: the first).
    ///
    /// # Errors
    /// The request's status and transport errors; 410 as [`KubeError::UnexpectedStatus`].
    fn list_page(&self, collection: &str, cont: Option<&str>) -> Result<ObjectPage, KubeError>;

    /// A watch from `resource_version`, with bookmarks.
    ///
    /// # Errors
    /// As [`Api::list_page`]; HTTP 410 as [`KubeError::UnexpectedStatus`] with code 410.
    fn watch(
        &self,
        collection: &str,
        resource_version: &str,
    ) -> Result<Box<dyn Events + Send>, KubeError>;
}

/// Makes a connection: called once per list and per watch (credentials are read each time).
pub type Connect = dyn Fn() -> Result<Box<dyn Api>, KubeError> + Send + Sync;

/// The deadlines of one connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Deadlines {
    /// A request must be answered within this; also each list page's whole deadline.
    pub request: Duration,
    /// `timeoutSeconds` of a watch: the server ends it then (whole seconds, at least 1).
    pub watch: Duration,
    /// Longest silence on a watch before it counts as dead (bookmarks come about every minute).
    pub idle: Duration,
}

/// [`Api`] over `tern_kube::Client`.
#[derive(Debug)]
pub struct ClientApi {
    /// The client (its credentials as read when it was made).
    pub client: Client,
    /// Its deadlines.
    pub deadlines: Deadlines,
}

impl Api for ClientApi {
    fn list_page(&self, collection: &str, cont: Option<&str>) -> Result<ObjectPage, KubeError> {
        self.client
            .list_page(collection, cont, self.deadlines.request)
    }

    fn watch(
        &self,
        collection: &str,
        resource_version: &str,
    ) -> Result<Box<dyn Events + Send>, KubeError> {
        let d = &self.deadlines;
        let w = self.client.watch_objects(
            collection,
            resource_version,
            d.watch.as_secs().max(1),
            d.request,
            d.idle,
        )?;
        Ok(Box::new(w))
    }
}
