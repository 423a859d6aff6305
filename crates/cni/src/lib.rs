//! The CNI specification for plugins (CNI spec 1.1.0), nothing Linux-specific: the environment
//! and its validation ([`env`]), the netconf ([`netconf`]), versions ([`version`]) and results
//! converted between them ([`result`]), error results with the spec's codes ([`error`]), the
//! [`Plugin`] trait and the verb inputs ([`plugin`]), the dispatcher ([`skel`]), and delegation to
//! IPAM plugins ([`delegate`]). Nothing else: the node-side plumbing the dispatcher uses (log
//! files, phase marks, the verb report it sends to tern-agent) and the plugins' files and locks
//! are in `tern-node`, which this crate builds on.
//!
//! A plugin binary is a verb table: implement [`Plugin`] and call [`plugin_main`].

pub mod delegate;
pub mod env;
pub mod error;
pub mod json;
pub mod netconf;
pub mod plugin;
pub mod result;
pub mod skel;
pub mod version;

pub use delegate::Delegate;
pub use env::{CniArgs, ContainerId, IfName, Verb};
pub use error::{code, Error};
pub use netconf::NetConf;
pub use plugin::{
    AddInput, AttachmentInput, CheckInput, DelInput, GcInput, Plugin, StatusInput, ValidAttachment,
};
pub use result::{CniResult, Dns, Interface, IpConfig, Route};
pub use skel::{dispatch, plugin_main};
pub use version::Version;
