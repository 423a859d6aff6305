//! tern-ipam: an IPAM plugin that reads host-local's configuration and reads and writes its
//! on-disk format (so nodes can switch in either direction), and adds what host-local lacks: CNI
//! 1.1.0 with GC and STATUS, crash-safe lease files, and typed error codes.
//!
//! The binary is [`TernIpam`] handed to [`tern_cni::plugin_main`]; each verb lives in its module.

pub mod add;
pub mod allocator;
pub mod check;
pub mod config;
pub mod del;
pub mod dns;
pub mod error;
pub mod gc;
pub mod podcidr;
pub mod status;
pub mod store;

use tern_cni::{AddInput, CheckInput, CniResult, DelInput, Error, GcInput, Plugin, StatusInput};

pub use error::IpamError;

/// The plugin's verb table.
#[derive(Debug, Default, Clone, Copy)]
pub struct TernIpam;

impl Plugin for TernIpam {
    fn about(&self) -> String {
        format!(
            "tern-ipam {}: host-local-compatible IPAM with GC and STATUS",
            tern_node::version::version()
        )
    }

    fn report_as(&self) -> Option<&'static str> {
        Some("tern-ipam")
    }

    fn add(&self, input: &AddInput) -> Result<CniResult, Error> {
        add::add(input).map_err(Error::from)
    }

    fn del(&self, input: &DelInput) -> Result<(), Error> {
        del::del(input).map_err(Error::from)
    }

    fn check(&self, input: &CheckInput) -> Result<(), Error> {
        check::check(input).map_err(Error::from)
    }

    fn status(&self, input: &StatusInput) -> Result<(), Error> {
        status::status(input).map_err(Error::from)
    }

    fn gc(&self, input: &GcInput) -> Result<(), Error> {
        gc::gc(input).map(|_| ()).map_err(Error::from)
    }
}
