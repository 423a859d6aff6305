//! Shared by the deploy/ tests (`deploy`, `deploy_rbac`): the manifests of a directory parsed
//! as JSON values, by kind.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;

use serde::Deserialize;
use serde_json::Value;

pub fn docs() -> Vec<(String, Value)> {
    docs_in("deploy")
}

/// The manifests of one directory of the repository (not its subdirectories, as `kubectl apply
/// -f DIR` reads them).
pub fn docs_in(rel: &str) -> Vec<(String, Value)> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join(rel);
    let mut out = Vec::new();
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    files.sort();
    for p in files
        .into_iter()
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
    {
        let text = std::fs::read_to_string(&p).unwrap();
        for d in serde_yaml_ng::Deserializer::from_str(&text) {
            let v = Value::deserialize(d).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
            if v.is_null() {
                continue;
            }
            for k in ["apiVersion", "kind"] {
                assert!(v[k].is_string(), "{}: a document without {k}", p.display());
            }
            assert!(
                v["metadata"]["name"].is_string(),
                "{}: a document without metadata.name",
                p.display()
            );
            out.push((p.file_name().unwrap().to_string_lossy().into_owned(), v));
        }
    }
    out
}

pub fn of_kind<'a>(d: &'a [(String, Value)], kind: &str) -> Vec<&'a Value> {
    d.iter()
        .filter(|(_, v)| v["kind"] == kind)
        .map(|(_, v)| v)
        .collect()
}

pub fn strs(v: &Value) -> Vec<String> {
    v.as_array()
        .map(|a| a.iter().map(|x| x.as_str().unwrap().to_owned()).collect())
        .unwrap_or_default()
}
