//! Verdicts from ginkgo's JSON report (`--json-report`, ginkgo v2's `types.Report` list): one per
//! spec that ran (passed, or failed with its failure message), the suite's own skips (a skip
//! with a reason) as ignored, and any suite-level node that did not pass. Specs the filter left
//! out are "skipped" with no reason and are not listed.

use serde::Deserialize;

use super::{Outcome, Verdict};

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct SuiteReport {
    // ginkgo writes `null` for an empty list: Option, not serde's default
    spec_reports: Option<Vec<SpecReport>>,
}

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct SpecReport {
    container_hierarchy_texts: Option<Vec<String>>,
    leaf_node_type: String,
    #[serde(default)]
    leaf_node_text: String,
    state: String,
    #[serde(default)]
    failure: Option<Failure>,
}

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct Failure {
    #[serde(default)]
    message: String,
    #[serde(default)]
    location: Option<Location>,
}

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct Location {
    file_name: String,
    line_number: u64,
}

/// The verdicts of the report `json`, in the report's order.
///
/// # Errors
/// `json` is not a ginkgo report.
pub fn verdicts(json: &str) -> Result<Vec<Verdict>, String> {
    let suites: Vec<SuiteReport> =
        serde_json::from_str(json).map_err(|e| format!("not a ginkgo JSON report: {e}"))?;
    Ok(suites
        .into_iter()
        .flat_map(|s| s.spec_reports.unwrap_or_default())
        .filter_map(verdict)
        .collect())
}

fn verdict(spec: SpecReport) -> Option<Verdict> {
    let message = spec
        .failure
        .as_ref()
        .map_or("", |f| f.message.as_str())
        .trim()
        .to_owned();
    let is_spec = spec.leaf_node_type == "It";
    let outcome = match spec.state.as_str() {
        "passed" if is_spec => Outcome::Passed,
        "skipped" if is_spec && !message.is_empty() => Outcome::Ignored(message),
        // left out by the filter; or a suite-level node that passed or never ran
        "skipped" | "passed" | "pending" => return None,
        state => {
            let at = spec.failure.as_ref().and_then(|f| f.location.as_ref());
            let at = at.map_or(String::new(), |l| {
                format!("\n  at {}:{}", l.file_name, l.line_number)
            });
            Outcome::Failed(format!("{state}: {message}{at}"))
        }
    };
    let mut texts = spec.container_hierarchy_texts.unwrap_or_default();
    texts.push(match is_spec {
        true => spec.leaf_node_text,
        false => format!("[{}] {}", spec.leaf_node_type, spec.leaf_node_text),
    });
    let name = texts
        .iter()
        .map(|t| t.trim())
        .filter(|t| !t.is_empty())
        .collect::<Vec<_>>()
        .join(" ");
    Some(Verdict { name, outcome })
}

#[cfg(test)]
mod tests {
    use super::*;

    // the shape of a real report (target/conformance/*/report.json), cut to one of each kind
    const REPORT: &str = r#"[{"SuitePath": "/e2e", "SpecReports": [
      {"ContainerHierarchyTexts": [], "LeafNodeType": "SynchronizedBeforeSuite", "LeafNodeText": "", "State": "passed"},
      {"ContainerHierarchyTexts": ["[sig-network] DNS"], "LeafNodeType": "It",
       "LeafNodeText": "should provide DNS for the cluster [Conformance]", "State": "passed", "RunTime": 2072165218},
      {"ContainerHierarchyTexts": ["[sig-network] DNS"], "LeafNodeType": "It",
       "LeafNodeText": "should provide DNS for the cluster [Provider:GCE]", "State": "skipped",
       "Failure": {"Message": "Only supported for providers [gce] (not local)",
                   "Location": {"FileName": "test/e2e/network/dns.go", "LineNumber": 80}}},
      {"ContainerHierarchyTexts": ["[sig-storage] In-tree Volumes"], "LeafNodeType": "It",
       "LeafNodeText": "should support existing directories", "State": "skipped"},
      {"ContainerHierarchyTexts": ["[sig-network] Services", "with a NodePort"], "LeafNodeType": "It",
       "LeafNodeText": "should be reachable", "State": "timedout",
       "Failure": {"Message": "timed out\nafter 5m", "Location": {"FileName": "service.go", "LineNumber": 7}}},
      {"ContainerHierarchyTexts": null, "LeafNodeType": "SynchronizedAfterSuite", "LeafNodeText": "", "State": "failed",
       "Failure": {"Message": "namespace left"}}
    ]}]"#;

    #[test]
    fn one_verdict_per_spec_that_ran_and_per_suite_skip() {
        let v = verdicts(REPORT).unwrap();
        let names: Vec<&str> = v.iter().map(|v| v.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "[sig-network] DNS should provide DNS for the cluster [Conformance]",
                "[sig-network] DNS should provide DNS for the cluster [Provider:GCE]",
                "[sig-network] Services with a NodePort should be reachable",
                "[SynchronizedAfterSuite]",
            ]
        );
        assert_eq!(v[0].outcome, Outcome::Passed);
        assert_eq!(
            v[1].outcome,
            Outcome::Ignored("Only supported for providers [gce] (not local)".into())
        );
        assert_eq!(
            v[2].outcome,
            Outcome::Failed("timedout: timed out\nafter 5m\n  at service.go:7".into())
        );
        assert!(v[3].failed());
        assert_eq!(super::super::counts(&v), (1, 2, 1));
    }

    #[test]
    fn not_a_report_is_an_error() {
        assert!(verdicts("{}").is_err());
        assert_eq!(verdicts("[]").unwrap(), []);
        assert_eq!(verdicts(r#"[{"SpecReports": null}]"#).unwrap(), []);
    }
}
