//! tern-kube: what tern needs from Kubernetes, blocking and without an async runtime (the plugin
//! uses it): kubeconfig parsing and rendering, reading a token's expiry, a small API client with
//! per-request deadlines (GET pod, GET node, TokenRequest), the agent channel protocol (client
//! and server codec), atomic file writes, the plugin's pod lookup, and `tern-lookup` (the helper
//! binary that runs the API reads for the plugins, so that they link no HTTP or TLS).
//!
//! Invariant: no public type prints a bearer token; errors name paths, never secrets.

pub mod atomic;
pub mod channel;
pub mod client;
pub mod error;
pub mod helper;
pub mod kubeconfig;
pub mod lookup;
pub mod time;
pub mod token;
pub mod types;

pub use atomic::write_atomic;
pub use channel::{AgentClient, Outcome, Request};
pub use client::Client;
pub use error::{KubeError, Status};
pub use kubeconfig::ClientConfig;
pub use lookup::{pod_lookup, LookupError, LookupRequest, PodInfo};
pub use token::BearerToken;
pub use types::{BoundObjectReference, Node, Pod, TokenRequestSpec, TokenRequestStatus};
