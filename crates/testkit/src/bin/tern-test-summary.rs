//! `tern-test-summary --exit RC --wall SECS LOG`: scripts/test's last line, every libtest
//! `test result:` line in LOG (cargo prints one per test binary; the cluster, conformance and
//! fuzz harnesses one each) summed into one in the same format, which CI reads. Its status is
//! FAILED when RC (the tiers' worst exit status) is not 0 or any test failed; the status of this
//! program is 0 unless LOG cannot be read.

use std::process::ExitCode;

use tern_testkit::summary::Totals;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let flag = |name: &str| {
        args.windows(2)
            .find(|w| w[0] == name)
            .map(|w| w[1].clone())
            .unwrap_or_default()
    };
    let rc: i32 = flag("--exit").parse().unwrap_or(1);
    let wall: f64 = flag("--wall").parse().unwrap_or(0.0);
    let Some(log) = args
        .last()
        .filter(|a| !a.starts_with("--") && args.len() % 2 == 1)
    else {
        eprintln!("usage: tern-test-summary --exit RC --wall SECS LOG");
        return ExitCode::from(2);
    };
    let text = match std::fs::read_to_string(log) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("tern-test-summary: {log}: {e}");
            println!("{}", Totals::default().line(1));
            return ExitCode::from(1);
        }
    };
    let totals = Totals::sum(&text);
    println!(
        "\n[test] {} test binaries, cargo test exit {rc} in {wall:.1}s wall (with builds), log {log}",
        totals.binaries
    );
    println!("{}", totals.line(rc));
    ExitCode::SUCCESS
}
