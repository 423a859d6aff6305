//! `render-deploy [--out DIR] [--check]`: deploy/*.yaml, the plain-manifest path (`kubectl apply
//! -f deploy/`), rendered from the Helm chart deploy/helm/tern with its default values: the chart
//! is the source, deploy/*.yaml its output (docs/DESIGN.md). `--out DIR` writes into DIR instead
//! of deploy/; `--check` renders into a temporary directory and compares with DIR: each file that
//! differs is named (a diff of it on stderr) and the run fails.
//!
//! The command: `helm template tern deploy/helm/tern --namespace tern --set namespace.create=true`
//! (the Namespace object, which `helm install --create-namespace` makes instead, comes from the
//! chart's namespace.create). Each template's document(s) go to deploy/<template>.yaml
//! (templates/namespace.yaml to 00-namespace.yaml: kubectl applies a directory in name order),
//! helm's `# Source:` line replaced by a header saying where the file comes from.
//! deploy/cluster-network-policy/ holds what `clusterNetworkPolicy.enabled=true` adds beyond the
//! flag (the CRD and its RBAC), from templates/cluster-network-policy-*.yaml. The chart's CRDs
//! (files/clusternetworkpolicies.<channel>.yaml) are the pinned module's (tools/go/netpol-api:
//! sigs.k8s.io/network-policy-api, config/crd/<channel>/): copied from it, and compared with it by
//! `--check`, through the Go module cache (`go mod download`).
//!
//! helm: $TERN_HELM, else $TERN_GO_CACHE/bin/helm/helm (scripts/build-go helm), else PATH's.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::{failed, go_cache, usage, workspace_root, Args, Res};

const SOURCE: &str = "# Source: tern/templates/";

pub(crate) fn main(mut args: Args) -> Res {
    let root = workspace_root();
    let (mut out, mut check) = (root.join("deploy"), false);
    while let Some(a) = args.0.next() {
        match a.as_str() {
            "--out" => out = PathBuf::from(args.value(&a)?),
            "--check" => check = true,
            _ => return Err(usage(format!("render-deploy: unknown argument {a}"))),
        }
    }
    let helm = helm();
    let mut problems = crds(&root, check);
    let mut files = render(&helm, &root, "", "default values", &[])?;
    let cnp = [
        "--set",
        "clusterNetworkPolicy.enabled=true",
        "--show-only",
        "templates/cluster-network-policy-crd.yaml",
        "--show-only",
        "templates/cluster-network-policy-rbac.yaml",
    ];
    let values = "values and clusterNetworkPolicy.enabled=true";
    files.extend(render(
        &helm,
        &root,
        "cluster-network-policy/",
        values,
        &cnp,
    )?);
    if check {
        problems.extend(compare(&files, &out));
    } else {
        std::fs::create_dir_all(out.join("cluster-network-policy"))
            .map_err(|e| failed(format!("{}: {e}", out.display())))?;
        for (name, text) in &files {
            std::fs::write(out.join(name), text).map_err(|e| failed(format!("{name}: {e}")))?;
        }
    }
    if !problems.is_empty() {
        return Err(failed(problems.join("\n")));
    }
    if !check {
        let version = Command::new(&helm)
            .args(["version", "--short"])
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned());
        println!(
            "render-deploy: {} files in {} from helm {}",
            files.len(),
            out.display(),
            version.unwrap_or_default()
        );
    }
    Ok(())
}

fn helm() -> PathBuf {
    if let Some(h) = std::env::var_os("TERN_HELM") {
        return h.into();
    }
    let cached = go_cache().join("bin/helm/helm");
    if cached.is_file() {
        cached
    } else {
        "helm".into()
    }
}

/// The pinned module's CRDs into the chart's files/ (with `check`: compared with them); what
/// failed, one line each.
fn crds(root: &Path, check: bool) -> Vec<String> {
    let cache = go_cache();
    let download = Command::new("/usr/local/go/bin/go")
        .args(["mod", "download", "-json", "sigs.k8s.io/network-policy-api"])
        .current_dir(root.join("tools/go/netpol-api"))
        .env("GOMODCACHE", cache.join("gomod"))
        .env("GOFLAGS", "-mod=readonly")
        .env("GOTOOLCHAIN", "local")
        .output();
    let dir = download.ok().filter(|o| o.status.success()).and_then(|o| {
        let v: serde_json::Value = serde_json::from_slice(&o.stdout).ok()?;
        v["Dir"].as_str().map(PathBuf::from)
    });
    let Some(dir) = dir else {
        return vec!["cannot download sigs.k8s.io/network-policy-api (tools/go/netpol-api)".into()];
    };
    let mut problems = Vec::new();
    for channel in ["standard", "experimental"] {
        let src = dir.join(format!(
            "config/crd/{channel}/policy.networking.k8s.io_clusternetworkpolicies.yaml"
        ));
        let name = format!("clusternetworkpolicies.{channel}.yaml");
        let dst = root.join("deploy/helm/tern/files").join(&name);
        let (a, b) = (std::fs::read(&src).ok(), std::fs::read(&dst).ok());
        let done = if check {
            a.is_some() && a == b
        } else {
            a.is_some_and(|a| std::fs::write(&dst, a).is_ok())
        };
        if !done {
            problems.push(format!(
                "deploy/helm/tern/files/{name} differs from {} (cargo xtask render-deploy)",
                src.display()
            ));
        }
    }
    problems
}

/// `helm template` with `args`: each template's file under `sub` (its name as deploy/ names it)
/// and its text, with the header naming the template and `values`.
fn render(
    helm: &Path,
    root: &Path,
    sub: &str,
    values: &str,
    args: &[&str],
) -> Res<BTreeMap<String, String>> {
    let out = Command::new(helm)
        .args(["template", "tern"])
        .arg(root.join("deploy/helm/tern"))
        .args(["--namespace", "tern", "--set", "namespace.create=true"])
        .args(args)
        .output()
        .map_err(|e| {
            failed(format!(
                "{}: {e} (bash scripts/build-go helm)",
                helm.display()
            ))
        })?;
    if !out.status.success() {
        return Err(failed(format!(
            "helm template: {}",
            String::from_utf8_lossy(&out.stderr)
        )));
    }
    let all = String::from_utf8_lossy(&out.stdout);
    Ok(split(&all)
        .into_iter()
        .map(|(template, text)| {
            let name = if template == "namespace.yaml" { "00-namespace.yaml" } else { template.as_str() };
            let name = name.strip_prefix("cluster-network-policy-").unwrap_or(name);
            let header = format!("# Rendered from deploy/helm/tern/templates/{template} by `cargo xtask render-deploy`\n# (the chart's {values}): edit the chart, not this file.\n");
            (format!("{sub}{name}"), header + &text)
        })
        .collect())
}

/// helm's output split by template: each `# Source:` section's lines (a template's several
/// documents joined by their `---`), with no `---` at its end and no empty line before a `---`
/// or at the end (helm ends each document with one).
fn split(all: &str) -> BTreeMap<String, String> {
    let mut sections: BTreeMap<String, Vec<&str>> = BTreeMap::new();
    let mut current: Option<String> = None;
    for line in all.lines() {
        if let Some(t) = line.strip_prefix(SOURCE) {
            current = Some(t.to_owned());
        } else if let Some(t) = &current {
            sections.entry(t.clone()).or_default().push(line);
        }
    }
    sections
        .into_iter()
        .map(|(t, mut lines)| {
            if lines.last() == Some(&"---") {
                lines.pop();
            }
            let mut text = String::new();
            let mut blank = 0;
            for l in lines {
                match l {
                    "" => blank += 1,
                    "---" => {
                        blank = 0;
                        text.push_str("---\n");
                    }
                    _ => {
                        text.push_str(&"\n".repeat(blank));
                        blank = 0;
                        text.push_str(l);
                        text.push('\n');
                    }
                }
            }
            (t, text)
        })
        .collect()
}

/// Each file of `files` or of `dir` (its *.yaml and cluster-network-policy/*.yaml) that differs
/// between the two, named, with `diff -u` on stderr.
fn compare(files: &BTreeMap<String, String>, dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = files.keys().cloned().collect();
    for sub in ["", "cluster-network-policy/"] {
        let entries = std::fs::read_dir(dir.join(sub))
            .into_iter()
            .flatten()
            .flatten();
        names.extend(
            entries
                .map(|e| format!("{sub}{}", e.file_name().to_string_lossy()))
                .filter(|n| n.ends_with(".yaml")),
        );
    }
    names.sort();
    names.dedup();
    let mut problems = Vec::new();
    for name in names {
        let on_disk = std::fs::read_to_string(dir.join(&name)).ok();
        if on_disk.as_ref() == files.get(&name) {
            continue;
        }
        let rendered = tempfile::NamedTempFile::new().and_then(|f| {
            std::fs::write(f.path(), files.get(&name).map_or("", String::as_str))?;
            Ok(f)
        });
        let diff = rendered.ok().and_then(|f| {
            let d = Command::new("diff")
                .arg("-u")
                .arg(dir.join(&name))
                .arg(f.path())
                .output();
            d.ok()
                .map(|d| String::from_utf8_lossy(&d.stdout).into_owned())
        });
        problems.push(format!(
            "{} differs from the chart's rendering (cargo xtask render-deploy):\n{}",
            dir.join(&name).display(),
            diff.unwrap_or_default()
        ));
    }
    problems
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sections_join_a_templates_documents_and_lose_helms_blank_lines() {
        let all = "---\n# Source: tern/templates/rbac.yaml\nkind: A\n\n---\n# Source: tern/templates/rbac.yaml\nkind: B\n  x: |\n\n    y\n\n---\n# Source: tern/templates/namespace.yaml\nkind: Namespace\n\n";
        let s = split(all);
        assert_eq!(s["rbac.yaml"], "kind: A\n---\nkind: B\n  x: |\n\n    y\n");
        assert_eq!(s["namespace.yaml"], "kind: Namespace\n");
        assert_eq!(s.len(), 2);
    }

    #[test]
    fn a_file_that_differs_or_is_missing_is_named() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("a.yaml"), "same\n").unwrap();
        std::fs::write(dir.path().join("b.yaml"), "old\n").unwrap();
        std::fs::write(dir.path().join("stale.yaml"), "x\n").unwrap();
        let files = BTreeMap::from([
            ("a.yaml".to_owned(), "same\n".to_owned()),
            ("b.yaml".to_owned(), "new\n".to_owned()),
            (
                "cluster-network-policy/crd.yaml".to_owned(),
                "crd\n".to_owned(),
            ),
        ]);
        let p = compare(&files, dir.path());
        let named: Vec<&str> = p
            .iter()
            .filter_map(|l| l.split_whitespace().next())
            .collect();
        let at = |f: &str| dir.path().join(f).display().to_string();
        assert_eq!(
            named,
            [
                at("b.yaml"),
                at("cluster-network-policy/crd.yaml"),
                at("stale.yaml")
            ]
        );
    }
}
