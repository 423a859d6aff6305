//! `tern-agent`: `run` keeps the CNI token kubeconfig fresh; `install` sets up a node (binaries,
//! kubeconfig, conflist); `trace` answers why a pod can or cannot reach a pod. Logs go to
//! stderr; the token never does.

use std::sync::Arc;

use anyhow::Context as _;
use clap::error::ErrorKind;
use nix::sys::signal::{SigSet, Signal};
use tern_agent::cli::{self, Command};
use tern_agent::config::RunArgs;
use tern_agent::{Agent, RunConfig, SystemClock};

fn run(args: RunArgs) -> anyhow::Result<()> {
    let cfg = RunConfig::from_run_args(args, &|k| std::env::var(k).ok())?;
    // Block SIGTERM/SIGINT before any thread starts so that every thread inherits the mask and
    // the main thread alone receives them through sigwait.
    let mut set = SigSet::empty();
    set.add(Signal::SIGTERM);
    set.add(Signal::SIGINT);
    set.thread_block().context("block SIGTERM/SIGINT")?;
    let agent = Agent::start(cfg, Arc::new(SystemClock))?;
    let sig = set.wait().context("wait for a signal")?;
    tracing::info!(signal = %sig, "signal received; shutting down");
    agent.shutdown();
    Ok(())
}

fn main() -> std::process::ExitCode {
    let args: Vec<std::ffi::OsString> = std::env::args_os().skip(1).collect();
    let command = match cli::parse(args.clone()) {
        Ok(c) => c.command,
        Err(e) => {
            return match e.kind() {
                // Help goes to stdout, exit 0.
                ErrorKind::DisplayHelp | ErrorKind::DisplayVersion => {
                    let _ = e.print();
                    std::process::ExitCode::SUCCESS
                }
                // No subcommand, or an unknown one: the usage, exit 2.
                ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand
                | ErrorKind::MissingSubcommand
                | ErrorKind::InvalidSubcommand => {
                    let _ = e.print();
                    std::process::ExitCode::from(2)
                }
                // A bad flag of a subcommand: one line naming it, exit 1; anything before a
                // subcommand: the usage, exit 2.
                _ => {
                    let sub = args.first().and_then(|a| a.to_str()).unwrap_or_default();
                    match cli::subcommand(sub) {
                        Some(cmd) => {
                            eprintln!("tern-agent: {}", tern_agent::args::flag_error(&e, &cmd));
                            early_failure(sub == "trace")
                        }
                        None => {
                            let _ = e.print();
                            std::process::ExitCode::from(2)
                        }
                    }
                }
            };
        }
    };
    match tern_agent::logging::LogSettings::from_env(&|k| std::env::var(k).ok()) {
        Ok(l) => l.init(),
        Err(e) => {
            eprintln!("tern-agent: {e}");
            return early_failure(matches!(command, Command::Trace(_) | Command::Status(_)));
        }
    }
    let result = match command {
        Command::Run(a) => run(a),
        Command::Install(a) => tern_agent::install::main(a),
        Command::Uninstall(a) => tern_agent::uninstall::main(a),
        // Its own exit codes: 0 allowed, 1 denied, 2 no answer.
        Command::Trace(a) => return tern_agent::trace::main(&a),
        // 0 ready and synced, 1 not, 2 no agent there.
        Command::Status(a) => return tern_agent::status::main(&a),
    };
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            // Printed once, plainly; the log carries what happened before it.
            eprintln!("tern-agent: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

/// The status of a failure before the command ran: 1, but 2 for `trace`, whose 1 means denied.
fn early_failure(trace: bool) -> std::process::ExitCode {
    if trace {
        std::process::ExitCode::from(2)
    } else {
        std::process::ExitCode::FAILURE
    }
}
