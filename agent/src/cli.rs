//! The `tern-agent` command line on clap: the subcommands and the whole line's parse. The flags
//! the subcommands share, the value parsers and the one-line flag errors are in `args.rs`, a
//! leaf, so that the subcommands' own flags can use them without importing this module back.
//!
//! Invariants: flags are strict — only those a subcommand declares, each at most once, a value
//! never taken from a following `--flag` (use `--name=--value`), booleans only
//! `true`/`false`/`1`/`0` in any case; an environment variable is read only where a flag names it
//! as its fallback, and the flag wins.

use std::ffi::OsString;

use clap::{CommandFactory as _, Parser, Subcommand};

use crate::config::RunArgs;
use crate::install::InstallArgs;
use crate::status::StatusArgs;
use crate::trace::TraceArgs;
use crate::uninstall::UninstallArgs;

/// The subcommands' pointer, shown under the top-level usage.
const AFTER_HELP: &str = "flags of each subcommand, with defaults and environment variables:
  tern-agent run --help
  tern-agent install --help
  tern-agent uninstall --help
  tern-agent trace --help
  tern-agent status --help";

/// `tern-agent <subcommand> [flags]`.
#[derive(Debug, Parser)]
#[command(
    name = "tern-agent",
    about = "tern node agent: installs tern on a node; keeps the CNI token fresh; routes between nodes; egress NAT; enforces NetworkPolicy",
    after_help = AFTER_HELP,
    arg_required_else_help = true,
    disable_help_subcommand = true,
    version = tern_node::version::version()
)]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// The DaemonSet's container: keeps the CNI token kubeconfig fresh (TokenRequest for the CNI
    /// service account), serves the agent channel, the probes and the metrics; with its flags,
    /// node routes, egress NAT and NetworkPolicy.
    Run(RunArgs),
    /// Install the CNI plugins, the first kubeconfig and the conflist (the init container):
    /// checks the conflist and the plugins, mints the first CNI token, then copies the plugins,
    /// writes the kubeconfig and the conflist last. A refusal changes nothing on the host.
    Install(InstallArgs),
    /// Remove tern from the node (the DaemonSet's preStop hook, with --if-daemonset-deleted):
    /// the conflist first, then the kubeconfig, the plugins and the egress NAT table only when no
    /// tern attachment is left (otherwise they stay, and the log says why).
    Uninstall(UninstallArgs),
    /// Why a pod or an address can or cannot reach a pod: lists Pods, Namespaces and
    /// NetworkPolicies once and prints the verdict and its reasons (the policies isolating each
    /// end, the rule allowing each direction). Exit 0 allowed, 1 denied, 2 could not answer.
    Trace(TraceArgs),
    /// This node's agent at a glance, from its /metrics and /readyz (--address, its --listen):
    /// version, readiness, the CNI token, node routes, the NetworkPolicy table, errors. Exit 0
    /// ready and synced, 1 not, 2 no agent there.
    Status(StatusArgs),
}

/// Parses the whole command line (without the program name).
///
/// # Errors
/// The clap error itself: the caller prints help (exit 0), usage errors about the subcommand
/// (exit 2), or [`crate::args::flag_error`]'s line (exit 1).
pub fn parse<I: IntoIterator<Item = OsString>>(args: I) -> Result<Cli, clap::Error> {
    Cli::try_parse_from(std::iter::once(OsString::from("tern-agent")).chain(args))
}

/// The clap command of a subcommand, for error messages naming its flags.
pub fn subcommand(name: &str) -> Option<clap::Command> {
    Cli::command().find_subcommand(name).cloned()
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::error::ErrorKind;

    #[test]
    fn the_whole_command_line_parses() {
        Cli::command().debug_assert();
        let args = ["run", "--api-server", "https://h:1", "--namespace", "n"].map(OsString::from);
        let cli = parse(args).unwrap();
        assert!(matches!(cli.command, Command::Run(_)));
        assert_eq!(
            parse(["nope"].map(OsString::from)).unwrap_err().kind(),
            ErrorKind::InvalidSubcommand
        );
    }
}
