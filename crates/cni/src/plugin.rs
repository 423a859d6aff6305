//! The verb inputs and the `Plugin` trait a plugin implements.
//!
//! The plugin side of the protocol: one typed input per verb and the [`Plugin`] trait a plugin
//! implements (the dispatcher, [`crate::skel`], builds the inputs and calls it).

use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::env::{CniArgs, ContainerId, IfName};
use crate::error::Error;
use crate::netconf::NetConf;
use crate::result::CniResult;

/// The input of a verb that names one attachment (container ID + ifname).
///
/// `N` is the netns: a path for ADD and CHECK, optional for DEL (CNI spec section 2: `CNI_NETNS`
/// may be empty on DEL when the runtime no longer has it).
#[derive(Clone, Debug)]
pub struct AttachmentInput<N> {
    /// `CNI_CONTAINERID`.
    pub container_id: ContainerId,
    /// `CNI_NETNS`.
    pub netns: N,
    /// `CNI_IFNAME`.
    pub ifname: IfName,
    /// `CNI_ARGS`, parsed.
    pub args: CniArgs,
    /// `CNI_ARGS` as received, for delegates.
    pub args_raw: String,
    /// `CNI_PATH` as received.
    pub cni_path: String,
    /// The netconf from stdin.
    pub config: NetConf,
}

/// ADD input: the netns is required.
pub type AddInput = AttachmentInput<PathBuf>;
/// CHECK input: the netns is required.
pub type CheckInput = AttachmentInput<PathBuf>;
/// DEL input: the netns may be absent.
pub type DelInput = AttachmentInput<Option<PathBuf>>;

/// A netns as carried by an input: a path, or an optional one.
pub trait NetnsPath {
    /// The path, when there is one.
    fn path(&self) -> Option<&Path>;
}

impl NetnsPath for PathBuf {
    fn path(&self) -> Option<&Path> {
        Some(self)
    }
}

impl NetnsPath for Option<PathBuf> {
    fn path(&self) -> Option<&Path> {
        self.as_deref()
    }
}

/// STATUS input (1.1.0): only the config and `CNI_PATH`.
#[derive(Clone, Debug)]
pub struct StatusInput {
    /// `CNI_PATH` as received.
    pub cni_path: String,
    /// The netconf from stdin.
    pub config: NetConf,
}

/// One entry of `cni.dev/valid-attachments`.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Deserialize)]
pub struct ValidAttachment {
    /// The container ID.
    #[serde(rename = "containerID")]
    pub container_id: String,
    /// The interface name.
    pub ifname: String,
}

/// GC input (1.1.0): the config, `CNI_PATH`, and the attachments that are still valid.
#[derive(Clone, Debug)]
pub struct GcInput {
    /// `CNI_PATH` as received.
    pub cni_path: String,
    /// The netconf from stdin.
    pub config: NetConf,
    /// `cni.dev/valid-attachments`: `Some(empty)` (also for `null`, libcni's empty list) means
    /// nothing is valid; `None` (the key is absent) means the runtime sent no list, and a plugin
    /// must then remove nothing.
    pub valid_attachments: Option<Vec<ValidAttachment>>,
}

/// A CNI plugin: one handler per verb. VERSION is answered by the dispatcher.
pub trait Plugin {
    /// One line about the plugin, printed to stderr when run without `CNI_COMMAND` and to stdout
    /// by `--version`: its name, the version its binary reports ([`tern_node::version::version`],
    /// which `cargo xtask image --version` can rewrite) and what it does.
    fn about(&self) -> String;

    /// The name this plugin's verb reports carry (one of [`tern_node::report::PLUGINS`]); `None`,
    /// the default, sends none. See [`tern_node::report`].
    fn report_as(&self) -> Option<&'static str> {
        None
    }

    /// ADD: create or adjust the attachment and return the result (CNI spec "ADD").
    ///
    /// # Errors
    /// Any CNI error; it must have undone what it did.
    fn add(&self, input: &AddInput) -> Result<CniResult, Error>;

    /// DEL: undo ADD; must succeed when things are already gone (CNI spec "DEL").
    ///
    /// # Errors
    /// Only when something that exists could not be removed.
    fn del(&self, input: &DelInput) -> Result<(), Error>;

    /// CHECK: verify the attachment against `prevResult` (CNI spec "CHECK").
    ///
    /// # Errors
    /// A CNI error naming what is missing or different.
    fn check(&self, input: &CheckInput) -> Result<(), Error>;

    /// STATUS: whether the plugin can serve ADD (CNI spec "STATUS"); default: ready.
    ///
    /// # Errors
    /// Code 50 or 51 when not ready.
    fn status(&self, _input: &StatusInput) -> Result<(), Error> {
        Ok(())
    }

    /// GC: remove resources of attachments not listed as valid (CNI spec "GC"); default: nothing.
    ///
    /// # Errors
    /// The joined errors of what could not be cleaned up.
    fn gc(&self, _input: &GcInput) -> Result<(), Error> {
        Ok(())
    }
}
