//! `test-script-ipam`: an IPAM plugin (a shell script) that logs every call, for what only a call
//! log shows.

use super::*;

/// The CNI_PATH with an extra directory after tern's and the reference plugins'.
pub fn cni_path_with(dir: &Path) -> String {
    format!("{}:{}", default_cni_path(), dir.display())
}

/// Writes `test-script-ipam`, a *test-only* IPAM plugin in shell, into `dir`, and returns `dir`.
///
/// tern-ipam covers 1.1.0 for real; this stays for what only a call log can show (tern_v1_1.rs):
/// it speaks 1.1.0 (VERSION, ADD, CHECK, DEL, STATUS, GC), appends every call as
/// `<CNI_COMMAND> <stdin on one line>` to `dir/calls.log`, answers ADD with 10.99.0.50/24 and
/// fd99::50/64 plus a route to 10.200.0.0/16 and a nameserver, answers STATUS with code 51 while
/// `dir/unavailable` exists, and fails ADD with code 11 while `dir/fail-add` exists.
pub fn write_script_ipam(dir: &Path) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    std::fs::create_dir_all(dir).unwrap();
    let script = r#"#!/bin/sh
# test-script-ipam: a test-only stand-in IPAM speaking CNI 1.1.0 (see tests/e2e/tests/common).
d=$(dirname "$0")
in=$(cat | tr -d '\n')
printf '%s %s\n' "$CNI_COMMAND" "$in" >> "$d/calls.log"
case "$CNI_COMMAND" in
VERSION) echo '{"cniVersion":"1.1.0","supportedVersions":["1.0.0","1.1.0"]}' ;;
ADD)
  if [ -e "$d/fail-add" ]; then
    echo '{"cniVersion":"1.1.0","code":11,"msg":"test-script-ipam: try again later"}'; exit 1
  fi
  echo '{"cniVersion":"1.1.0","ips":[{"address":"10.99.0.50/24","gateway":"10.99.0.1"},{"address":"fd99::50/64"}],"routes":[{"dst":"10.200.0.0/16"}],"dns":{"nameservers":["10.96.0.10"]}}' ;;
STATUS)
  if [ -e "$d/unavailable" ]; then
    echo '{"cniVersion":"1.1.0","code":51,"msg":"test-script-ipam: limited connectivity"}'; exit 1
  fi ;;
esac
exit 0
"#;
    let path = dir.join("test-script-ipam");
    std::fs::write(&path, script).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    dir.to_path_buf()
}

/// The calls `test-script-ipam` in `dir` received: `(command, stdin)`.
pub fn script_calls(dir: &Path) -> Vec<(String, Value)> {
    std::fs::read_to_string(dir.join("calls.log"))
        .unwrap_or_default()
        .lines()
        .map(|l| {
            let (cmd, rest) = l.split_once(' ').unwrap_or((l, ""));
            (
                cmd.to_owned(),
                serde_json::from_str(rest).unwrap_or(Value::Null),
            )
        })
        .collect()
}
