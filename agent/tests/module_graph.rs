//! The agent's modules import each other without a circle (issue 27): every `crate::a::b` path
//! in `src/` (comments and `#[cfg(test)]` modules left out) is an edge from its file's module to
//! the longest module it names; a child naming its own parent is not counted. The shared flags
//! live in the leaf `args.rs` and the subsystems take their own settings, so the graph is
//! acyclic; this test keeps it so.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

type Module = Vec<String>;

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            if path.file_name().is_some_and(|n| n != "bin") {
                rust_files(&path, out);
            }
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// `src/run/mod.rs` -> `[run]`, `src/run/verbs.rs` -> `[run, verbs]`, `src/lib.rs` -> `[]`.
fn module_of(src: &Path, file: &Path) -> Module {
    let rel = file.strip_prefix(src).unwrap().with_extension("");
    let mut parts: Module = rel
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    if matches!(
        parts.last().map(String::as_str),
        Some("mod" | "lib" | "main")
    ) {
        parts.pop();
    }
    parts
}

/// The text without comments and without a trailing `#[cfg(test)] mod tests`.
fn product_text(text: &str) -> String {
    let text = text
        .find("#[cfg(test)]\nmod tests")
        .map_or(text, |i| &text[..i]);
    text.lines()
        .map(|l| l.split("//").next().unwrap_or(""))
        .collect::<Vec<_>>()
        .join("\n")
}

/// Every path after `crate::`, with `crate::{a, b::c}` groups expanded.
fn crate_paths(text: &str) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    for (i, _) in text.match_indices("crate::") {
        let rest = &text[i + "crate::".len()..];
        let items: Vec<&str> = if let Some(group) = rest.strip_prefix('{') {
            group[..group.find('}').unwrap_or(group.len())]
                .split(',')
                .collect()
        } else {
            vec![rest]
        };
        for item in items {
            let path: Vec<String> = item
                .trim()
                .split("::")
                .map(|seg| {
                    seg.chars()
                        .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                        .collect::<String>()
                })
                .take_while(|seg| !seg.is_empty())
                .collect();
            if !path.is_empty() {
                out.push(path);
            }
        }
    }
    out
}

fn find_cycle(
    edges: &BTreeMap<Module, BTreeSet<Module>>,
    node: &Module,
    stack: &mut Vec<Module>,
    done: &mut BTreeSet<Module>,
) -> Option<Vec<Module>> {
    if let Some(at) = stack.iter().position(|m| m == node) {
        return Some(stack[at..].to_vec());
    }
    if done.contains(node) {
        return None;
    }
    stack.push(node.clone());
    for next in edges.get(node).into_iter().flatten() {
        if let Some(c) = find_cycle(edges, next, stack, done) {
            return Some(c);
        }
    }
    stack.pop();
    done.insert(node.clone());
    None
}

#[test]
fn the_agent_modules_import_each_other_without_a_circle() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let modules: BTreeMap<Module, PathBuf> = files
        .iter()
        .map(|f| (module_of(&src, f), f.clone()))
        .collect();
    assert!(
        modules.contains_key(&vec!["args".to_owned()]),
        "{modules:?}"
    );
    let mut edges: BTreeMap<Module, BTreeSet<Module>> = BTreeMap::new();
    for (module, file) in &modules {
        let text = product_text(&std::fs::read_to_string(file).unwrap());
        for path in crate_paths(&text) {
            let Some(target) = (1..=path.len())
                .rev()
                .map(|k| path[..k].to_vec())
                .find(|p| modules.contains_key(p))
            else {
                continue;
            };
            if target != *module && !module.starts_with(&target) {
                edges.entry(module.clone()).or_default().insert(target);
            }
        }
    }
    // The graph is not trivially empty: cli imports config, install and uninstall.
    assert!(edges[&vec!["cli".to_owned()]].contains(&vec!["config".to_owned()]));
    let mut done = BTreeSet::new();
    for module in modules.keys() {
        let cycle = find_cycle(&edges, module, &mut Vec::new(), &mut done);
        if let Some(mut cycle) = cycle {
            cycle.push(cycle[0].clone());
            let names: Vec<String> = cycle.iter().map(|m| m.join("::")).collect();
            panic!("import circle: {}", names.join(" -> "));
        }
    }
}
