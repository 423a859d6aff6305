//! The conformance harness's judgement (tests/cluster/tests/conformance): the modes, and the
//! verdicts read from what the upstream suites report (ginkgo's JSON report, `go test -v`).
//! Pure functions over text, unit-tested here; the harness runs the suites and reports each
//! verdict as a libtest trial.

pub mod ginkgo;
pub mod gotest;
pub mod mode;

/// What became of one spec, check or stage.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Passed.
    Passed,
    /// Failed, with why (the suite's failure message, or a check's log tail).
    Failed(String),
    /// Skipped by the suite itself at run time, with its reason (libtest's "ignored").
    Ignored(String),
}

/// One libtest trial's worth: a name and its outcome.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verdict {
    /// The spec's full text, or the check's name.
    pub name: String,
    /// What became of it.
    pub outcome: Outcome,
}

impl Verdict {
    /// A verdict named `name` from a stage's result.
    pub fn of(name: &str, result: Result<(), String>) -> Self {
        Self {
            name: name.to_owned(),
            outcome: match result {
                Ok(()) => Outcome::Passed,
                Err(e) => Outcome::Failed(e),
            },
        }
    }

    /// Whether it failed.
    pub fn failed(&self) -> bool {
        matches!(self.outcome, Outcome::Failed(_))
    }
}

/// Counts of `verdicts`: (passed, failed, ignored).
pub fn counts(verdicts: &[Verdict]) -> (usize, usize, usize) {
    let count = |f: fn(&Outcome) -> bool| verdicts.iter().filter(|v| f(&v.outcome)).count();
    (
        count(|o| matches!(o, Outcome::Passed)),
        count(|o| matches!(o, Outcome::Failed(_))),
        count(|o| matches!(o, Outcome::Ignored(_))),
    )
}
