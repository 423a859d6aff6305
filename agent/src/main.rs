//! `tern-agent`: `run` keeps the CNI token kubeconfig fresh; `install` sets up a node (binaries,
//! kubeconfig, conflist). Logs go to stderr; the token never does.

use std::sync::Arc;

use anyhow::Context as _;
use nix::sys::signal::{SigSet, Signal};
use tern_agent::config::{help_text, HelpRequested, RUN_ENV_HELP, RUN_FLAGS};
use tern_agent::{Agent, RunConfig, SystemClock};

const USAGE: &str = "usage: tern-agent <subcommand> [flags]

subcommands:
  run       keep the CNI token kubeconfig fresh (the DaemonSet's container)
  install   install the CNI plugins, the first kubeconfig and the conflist (the init container)

flags of each subcommand, with defaults and environment variables:
  tern-agent run --help
  tern-agent install --help";

const RUN_USAGE: &str = "usage: tern-agent run [flags]

Keeps the kubeconfig of the CNI service account fresh with TokenRequest, serves the agent channel
and /healthz, /metrics.";

fn init_logging() {
    let level = match std::env::var("TERN_LOG").as_deref() {
        Ok("debug") => tracing::Level::DEBUG,
        Ok("warn") => tracing::Level::WARN,
        _ => tracing::Level::INFO,
    };
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_ansi(false)
        .with_max_level(level)
        .init();
}

fn run(args: &[String]) -> anyhow::Result<()> {
    let cfg = RunConfig::from_args(args, &|k| std::env::var(k).ok())?;
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
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (result, help) = match args.first().map(String::as_str) {
        Some("run") => {
            init_logging();
            (
                run(&args[1..]),
                help_text(RUN_USAGE, RUN_FLAGS, RUN_ENV_HELP),
            )
        }
        Some("install") => {
            init_logging();
            (
                tern_agent::install::main(&args[1..]),
                tern_agent::install::help(),
            )
        }
        Some("--help" | "-h" | "help") => {
            println!("{USAGE}");
            return std::process::ExitCode::SUCCESS;
        }
        Some(other) => {
            eprintln!("tern-agent: unknown subcommand {other:?}\n{USAGE}");
            return std::process::ExitCode::from(2);
        }
        None => {
            eprintln!("{USAGE}");
            return std::process::ExitCode::from(2);
        }
    };
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) if e.downcast_ref::<HelpRequested>().is_some() => {
            print!("{help}");
            std::process::ExitCode::SUCCESS
        }
        Err(e) => {
            // Printed once, plainly; the log carries what happened before it.
            eprintln!("tern-agent: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}
