//! `tern-xtask` (`cargo xtask`): the tasks of tools/xtask/src/lib.rs from the command line.

use std::process::ExitCode;

fn main() -> ExitCode {
    match tern_xtask::run(std::env::args().skip(1).collect()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(f) => {
            eprintln!("tern-xtask: {}", f.message);
            ExitCode::from(f.status)
        }
    }
}
