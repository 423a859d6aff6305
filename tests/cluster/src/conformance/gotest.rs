//! Verdicts from `go test -v` output of SIG Network's ClusterNetworkPolicy conformance suite
//! (`conformance.test -test.v`): one per `--- PASS|FAIL|SKIP: TestConformanceProfiles/NAME`
//! line, a failure with its first error line (the first `Error:` line, or `file.go:N: ` line
//! that says fail, expected, error or timed out, logged under the test after its `=== RUN`).

use std::collections::HashMap;
use std::sync::LazyLock;

use regex::Regex;

use super::{Outcome, Verdict};

#[allow(clippy::unwrap_used)] // constant patterns, checked by the tests below
static VERDICT: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"^\s*--- (PASS|FAIL|SKIP): TestConformanceProfiles/([^/ ]+) ").unwrap()
});
#[allow(clippy::unwrap_used)]
static CURRENT: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"^=== (?:RUN|CONT|NAME) +TestConformanceProfiles/([^/ ]+)$").unwrap()
});
#[allow(clippy::unwrap_used)]
static WHY: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"Error:|[a-z_-]+\.go:[0-9]+: .*([Ff]ail|[Ee]xpected|[Ee]rror|timed out)").unwrap()
});

/// The verdicts in `log`, in the order the suite finished them; names without the parent
/// test's prefix.
pub fn verdicts(log: &str) -> Vec<Verdict> {
    let mut why: HashMap<String, String> = HashMap::new();
    let mut current = String::new();
    let mut out = Vec::new();
    for line in log.lines() {
        if let Some(c) = VERDICT.captures(line) {
            let name = c[2].to_owned();
            let outcome = match &c[1] {
                "PASS" => Outcome::Passed,
                "SKIP" => Outcome::Ignored(why.remove(&name).unwrap_or_default()),
                _ => Outcome::Failed(
                    why.remove(&name)
                        .unwrap_or_else(|| "failed (no error line: see suite.log)".into()),
                ),
            };
            out.push(Verdict { name, outcome });
        } else if let Some(c) = CURRENT.captures(line) {
            current = c[1].to_owned();
        } else if !current.is_empty() && !why.contains_key(&current) && WHY.is_match(line) {
            let first: String = line.trim_start().chars().take(200).collect();
            why.insert(current.clone(), first);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const LOG: &str = "=== RUN   TestConformanceProfiles
=== RUN   TestConformanceProfiles/CNPAdminTierIngressSCTP
    suite.go:80: setting up
    cnp.go:41: expected connection to be denied, it was allowed
    cnp.go:42: Error: second line
=== RUN   TestConformanceProfiles/CNPAdminTierGress
    helpers.go:12: probing
=== NAME  TestConformanceProfiles/CNPNamedPorts
    --- SKIP: TestConformanceProfiles/CNPNamedPorts (0.00s)
    --- FAIL: TestConformanceProfiles/CNPAdminTierIngressSCTP (31.20s)
    --- PASS: TestConformanceProfiles/CNPAdminTierGress (12.00s)
    --- PASS: TestConformanceProfiles/CNPAdminTierGress/sub (1.00s)
--- FAIL: TestConformanceProfiles (300.78s)
";

    #[test]
    fn one_verdict_per_test_with_the_first_error_line() {
        let v = verdicts(LOG);
        let got: Vec<(&str, &Outcome)> = v.iter().map(|v| (v.name.as_str(), &v.outcome)).collect();
        assert_eq!(
            got,
            [
                ("CNPNamedPorts", &Outcome::Ignored(String::new())),
                (
                    "CNPAdminTierIngressSCTP",
                    &Outcome::Failed(
                        "cnp.go:41: expected connection to be denied, it was allowed".into()
                    )
                ),
                ("CNPAdminTierGress", &Outcome::Passed),
            ]
        );
    }
}
