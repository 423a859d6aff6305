//! Linux networking for tern's plugins: the network-namespace seam ([`netns`]), typed netlink
//! operations on links, addresses and routes ([`netlink`]), and namespaced sysctls with their key
//! rules and allowlist ([`sysctl`]), nftables rule sets through the `nft` tool ([`nft`]), and the
//! end of a draining uninstall ([`drain`]).
//!
//! Invariants:
//! - [`netns`] is the only code in tern that calls `setns`. A thread that enters a namespace is a
//!   fresh scoped thread that runs one closure and ends (tern-agent, tests), or, in a plugin
//!   ([`netns::enter_on_calling_thread`]), the calling thread, which comes back or aborts the
//!   process: no thread ever runs on in the wrong namespace.
//! - Everything is synchronous (no async runtime thread can wander into a pod netns).
//! - Errors are one typed enum, [`Error`], carrying the operation and the errno; callers match on
//!   [`Error::errno`] and map to CNI codes with [`Error::cni_code`].

pub mod drain;
pub mod error;
pub mod netlink;
pub mod netns;
pub mod nflog;
pub mod nft;
pub mod sysctl;

pub use error::{Error, Result};
