//! `tern-agent`: `run` keeps the CNI token kubeconfig fresh; `install` sets up a node (binaries,
//! kubeconfig, conflist). Logs go to stderr; the token never does.

use std::sync::Arc;

use anyhow::Context as _;
use nix::sys::signal::{SigSet, Signal};
use tern_agent::{Agent, RunConfig, SystemClock};

const USAGE: &str = "usage: tern-agent run [--api-server URL] [--sa-dir DIR] [--namespace NS] [--service-account NAME]
                      [--token-lifetime 24h] [--kubeconfig PATH] [--socket PATH] [--listen 127.0.0.1:9412]
                      [--request-timeout 10s] [--backoff-base 1s] [--backoff-cap 5m] [--wall-check 30s]
                      [--channel-interval 30s]
       environment: KUBERNETES_SERVICE_HOST, KUBERNETES_SERVICE_PORT, POD_NAMESPACE,
                    CNI_TOKEN_REFRESH_DURATION (e.g. 10m), TERN_CNI_SERVICE_ACCOUNT, TERN_LOG (info|debug)
       tern-agent install --help";

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
    init_logging();
    let result = match args.first().map(String::as_str) {
        Some("run") => run(&args[1..]),
        Some("install") => tern_agent::install::main(&args[1..]),
        _ => {
            eprintln!("{USAGE}");
            return std::process::ExitCode::from(2);
        }
    };
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!("{e:#}");
            eprintln!("tern-agent: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}
