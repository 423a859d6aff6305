//! `tern-noop`: a CNI plugin that does no work, the floor of exec'ing a chain through libcni
//! (`tern-bench libcni`). Built like tern (static, musl), so its exec, start-up and exit are
//! what a plugin of this workspace costs before any work.
//!
//! ADD prints the smallest CNI 1.0.0 result (`{"cniVersion":"1.0.0"}`; `ips` and `interfaces`
//! are optional, CNI spec "Success"); CHECK, DEL, GC and STATUS print nothing; VERSION prints the
//! versions it takes. The netconf on stdin is read to its end (a runtime writes all of it) and
//! not parsed. Exit 0, except an unknown `CNI_COMMAND`: code 4 on stdout, exit 1.

use std::io::{Read, Write};

fn main() {
    let mut netconf = Vec::new();
    let _ = std::io::stdin().read_to_end(&mut netconf);
    let out = match std::env::var("CNI_COMMAND").as_deref() {
        Ok("ADD") => r#"{"cniVersion":"1.0.0"}"#,
        Ok("CHECK" | "DEL" | "GC" | "STATUS") => "",
        Ok("VERSION") => r#"{"cniVersion":"1.0.0","supportedVersions":["1.0.0","1.1.0"]}"#,
        _ => {
            let _ = std::io::stdout()
                .write_all(br#"{"cniVersion":"1.0.0","code":4,"msg":"unknown CNI_COMMAND"}"#);
            std::process::exit(1);
        }
    };
    let _ = std::io::stdout().write_all(out.as_bytes());
}
