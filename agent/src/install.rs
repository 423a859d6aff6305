//! `tern-agent install`: set up a node for tern (issue 5). Filled in below.

/// Entry point for `tern-agent install <args>`.
///
/// # Errors
/// Not implemented yet.
pub fn main(_args: &[String]) -> anyhow::Result<()> {
    anyhow::bail!("install is not implemented yet")
}
