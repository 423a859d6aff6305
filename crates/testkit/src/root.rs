//! The one gate of every test that needs root (real network namespaces, veths, sysctls, the built
//! binaries run as a runtime runs them, containerd, CRI-O). Each such test begins with
//!
//! ```no_run
//! # fn a_test_that_needs_root() {
//! if tern_testkit::root::skip() {
//!     return;
//! }
//! # }
//! ```
//!
//! and so says it needs root in one way. Whether it then runs is [`ENV`]'s choice:
//!
//! - `skip`, which `cargo unit` sets (`.cargo/config.toml`): it returns at once and passes, root
//!   or not, so `cargo unit` is `cargo test --workspace` with no hand-kept list of test targets (a
//!   new test that needs neither root nor binaries runs there by itself) and never touches the
//!   host even when run as root;
//! - `run`, which `scripts/test` sets: it runs, and fails when not root;
//! - unset (a plain `cargo test`): it runs as root; not as root it returns at once and passes —
//!   unless `CI` is set, where it fails: a test that needs root fails in CI rather than skipping
//!   (`../shared/STYLE.md`, "Tests, in tiers").
//!
//! A skip writes one line per test binary straight to stderr (past libtest's capture), so it is
//! seen. `docs/TESTING.md`, "Which tests need root".

use std::io::Write;
use std::sync::Once;

/// The variable that chooses what the gated tests do: `skip`, `run` or unset (module docs).
pub const ENV: &str = "TERN_ROOT_TESTS";

/// The variable CI systems set (`CI=true`); set to anything but `""`, `0` or `false`, it turns the
/// skip of a non-root `cargo test` into a failure.
pub const CI_ENV: &str = "CI";

/// Whether the calling test must return now without running (module docs for the rules): reads
/// [`ENV`], [`CI_ENV`] and the effective uid.
///
/// # Panics
///
/// When the test must run and cannot: not root and [`ENV`] is `run`, or not root with [`ENV`]
/// unset and [`CI_ENV`] set. An [`ENV`] value other than `skip` or `run` panics too.
pub fn skip() -> bool {
    let mode = std::env::var(ENV).unwrap_or_default();
    let ci = std::env::var(CI_ENV).unwrap_or_default();
    let skip = decide(&mode, &ci, nix::unistd::Uid::effective().is_root());
    if skip {
        static SAID: Once = Once::new();
        SAID.call_once(|| {
            let exe = std::env::args().next().unwrap_or_default();
            // A direct write: libtest captures only the print macros, so this line is seen.
            let _ = writeln!(
                std::io::stderr(),
                "[tern-testkit] {ENV}={mode:?}, root: {}: the tests of {exe} that need root \
                 return at once (tern_testkit::root::skip)",
                nix::unistd::Uid::effective().is_root()
            );
        });
    }
    skip
}

/// The gate's rule: `mode` is [`ENV`]'s value and `ci` [`CI_ENV`]'s ("" when unset); `true` means
/// skip.
///
/// # Panics
///
/// As [`skip`].
fn decide(mode: &str, ci: &str, root: bool) -> bool {
    match mode {
        "skip" => true,
        "run" if root => false,
        "run" => panic!(
            "this test needs root (netns, veths, sysctls or a runtime) and {ENV}=run: run it as \
             root (sudo bash scripts/test)"
        ),
        "" if root => false,
        "" if ci.is_empty() || ci == "0" || ci.eq_ignore_ascii_case("false") => true,
        "" => panic!(
            "this test needs root (netns, veths, sysctls or a runtime) and {CI_ENV}={ci:?} is set: \
             in CI it fails rather than skipping (run it as root: sudo bash scripts/test)"
        ),
        other => panic!("{ENV}={other:?}: use skip, run, or leave it unset"),
    }
}

#[cfg(test)]
mod tests {
    use super::decide;

    #[test]
    fn skip_skips_whoever_runs() {
        assert!(decide("skip", "", false));
        assert!(decide("skip", "", true));
        assert!(decide("skip", "true", true));
    }

    #[test]
    fn run_runs_as_root() {
        assert!(!decide("run", "", true));
    }

    #[test]
    #[should_panic(expected = "TERN_ROOT_TESTS=run: run it as root")]
    fn run_fails_without_root() {
        decide("run", "", false);
    }

    #[test]
    fn unset_runs_as_root_and_skips_without_it_outside_ci() {
        assert!(!decide("", "", true));
        assert!(!decide("", "true", true));
        assert!(decide("", "", false));
        assert!(decide("", "0", false));
        assert!(decide("", "FALSE", false));
    }

    #[test]
    #[should_panic(expected = "in CI it fails rather than skipping")]
    fn unset_fails_without_root_in_ci() {
        decide("", "true", false);
    }

    #[test]
    #[should_panic(expected = "use skip, run, or leave it unset")]
    fn another_value_is_refused() {
        decide("yes", "", true);
    }
}
