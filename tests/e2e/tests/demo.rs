//! `scripts/demo` as a test: the README's second command, run as a new user runs it, must exit 0 —
//! every step worked and its DEL left nothing (the demo exits 2 when a piece is missing or
//! something is left, 1 when a command fails). Its output is printed on failure.
//!
//! Needs root and the release binaries, as the demo does: gated with the root tests.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::{Command, Stdio};

use tern_testkit::exec::{output_text, workspace_root};

#[test]
fn the_demo_runs_whole_and_leaves_nothing() {
    if tern_testkit::root::skip() {
        return;
    }
    let out = Command::new("bash")
        .arg(workspace_root().join("scripts/demo"))
        .current_dir(workspace_root())
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let shown = output_text(&out);
    assert_eq!(out.status.code(), Some(0), "scripts/demo:\n{shown}");
    assert!(
        shown.contains("demo complete") && !shown.contains("LEFT:"),
        "scripts/demo exited 0 without its clean summary:\n{shown}"
    );
}
