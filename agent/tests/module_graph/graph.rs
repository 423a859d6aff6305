//! The module-graph test's graph: the crate's files, the edges between them, its circles.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use super::scan::{declared, paths, product, tokens, Module};

/// The agent's modules and the edges between their files.
#[derive(Debug, Default)]
pub(crate) struct Graph {
    pub(crate) files: BTreeMap<Module, PathBuf>,
    /// Per module, each name a `use` binds and the path it was bound to.
    pub(crate) imports: BTreeMap<Module, BTreeMap<String, Vec<String>>>,
    pub(crate) edges: BTreeMap<Module, BTreeSet<Module>>,
}

impl Graph {
    /// Reads the crate whose root is `src/lib.rs`.
    pub(crate) fn read(src: &Path) -> Graph {
        let mut g = Graph::default();
        let mut named = BTreeMap::new();
        let mut todo = vec![(Module::new(), src.join("lib.rs"))];
        while let Some((module, file)) = todo.pop() {
            let text = std::fs::read_to_string(&file)
                .unwrap_or_else(|e| panic!("read {}: {e}", file.display()));
            let t = product(&tokens(&text));
            let dir = match file.file_name().and_then(|n| n.to_str()) {
                Some("lib.rs" | "mod.rs") => file.parent().unwrap().to_path_buf(),
                _ => file.with_extension(""),
            };
            for name in declared(&t, &file) {
                let flat = dir.join(format!("{name}.rs"));
                let child = if flat.is_file() {
                    flat
                } else {
                    dir.join(&name).join("mod.rs")
                };
                let mut m = module.clone();
                m.push(name);
                todo.push((m, child));
            }
            let found = paths(&t);
            let imports = found
                .iter()
                .filter_map(|(p, n)| Some((n.clone()?, p.clone())))
                .collect();
            g.imports.insert(module.clone(), imports);
            g.files.insert(module.clone(), file);
            named.insert(module, found);
        }
        for (module, found) in &named {
            let mut to = BTreeSet::new();
            for (path, _) in found {
                g.targets(module, path, 0, &mut to);
            }
            to.remove(module);
            if !to.is_empty() {
                g.edges.insert(module.clone(), to);
            }
        }
        g
    }

    /// The files `path`, written in `from`'s file, names, added to `out`: the longest module it
    /// names and, when the next segment is a name that module binds by `use` (a re-export such
    /// as `pub use conflist::with_pod_ranges`), the files of that path too.
    fn targets(&self, from: &Module, path: &[String], depth: usize, out: &mut BTreeSet<Module>) {
        if depth > 8 || path.is_empty() {
            return;
        }
        let child = |name: &str| {
            let mut m = from.clone();
            m.push(name.to_owned());
            self.files.contains_key(&m)
        };
        let (mut base, rest) = match path[0].as_str() {
            "crate" => (Module::new(), &path[1..]),
            "super" => {
                let ups = path.iter().take_while(|s| *s == "super").count();
                let Some(keep) = from.len().checked_sub(ups) else {
                    return;
                };
                (from[..keep].to_vec(), &path[ups..])
            }
            "self" => (from.clone(), &path[1..]),
            first if child(first) => (from.clone(), path),
            first => {
                // A name this file bound by `use` (`use crate::install; install::render(..)`).
                if let Some(bound) = self.imports[from].get(first) {
                    if bound.len() > 1 {
                        let whole: Vec<String> = bound.iter().chain(&path[1..]).cloned().collect();
                        self.targets(from, &whole, depth + 1, out);
                    }
                }
                return;
            }
        };
        let mut rest = rest.iter();
        let mut next = rest.next();
        while let Some(seg) = next {
            let mut m = base.clone();
            m.push(seg.clone());
            if !self.files.contains_key(&m) {
                break;
            }
            base = m;
            next = rest.next();
        }
        if let Some(bound) = next.and_then(|seg| self.imports[&base].get(seg)) {
            if base != *from {
                self.targets(&base, bound, depth + 1, out);
            }
        }
        out.insert(base);
    }

    /// Whether the loop `cycle` is a module's own: among one module's file and its direct
    /// children, through that module's file.
    fn family_loop(cycle: &[Module]) -> bool {
        cycle.iter().any(|parent| {
            cycle
                .iter()
                .all(|m| m == parent || m.len() == parent.len() + 1 && m.starts_with(parent))
        })
    }

    /// Every simple loop other than a family's, each once (starting at its least module), up to
    /// `limit` of them.
    fn loops(&self, limit: usize) -> Vec<Vec<Module>> {
        let nodes: Vec<&Module> = self.files.keys().collect();
        let index: BTreeMap<&Module, usize> =
            nodes.iter().enumerate().map(|(i, m)| (*m, i)).collect();
        let next: Vec<Vec<usize>> = nodes
            .iter()
            .map(|m| {
                self.edges
                    .get(*m)
                    .into_iter()
                    .flatten()
                    .map(|t| index[t])
                    .collect()
            })
            .collect();
        let mut found = Vec::new();
        for start in 0..nodes.len() {
            let mut stack = vec![(start, 0usize)];
            let mut on = vec![false; nodes.len()];
            on[start] = true;
            while let Some(&mut (at, ref mut k)) = stack.last_mut() {
                let Some(&to) = next[at].get(*k) else {
                    on[at] = false;
                    stack.pop();
                    continue;
                };
                *k += 1;
                if to == start {
                    let cycle: Vec<Module> = stack.iter().map(|(n, _)| nodes[*n].clone()).collect();
                    if !Self::family_loop(&cycle) {
                        found.push(cycle);
                        if found.len() >= limit {
                            return found;
                        }
                    }
                } else if to > start && !on[to] {
                    on[to] = true;
                    stack.push((to, 0));
                }
            }
        }
        found
    }

    /// The circles: the loops other than a family's, grouped where they share a file; each as
    /// its files and its shortest loop.
    pub(crate) fn circles(&self) -> Vec<(BTreeSet<Module>, Vec<Module>)> {
        let mut out: Vec<(BTreeSet<Module>, Vec<Module>)> = Vec::new();
        for cycle in self.loops(100_000) {
            let files: BTreeSet<Module> = cycle.iter().cloned().collect();
            let mut merged = (files, cycle);
            out.retain(|(f, c)| {
                if f.is_disjoint(&merged.0) {
                    return true;
                }
                merged.0.extend(f.iter().cloned());
                if c.len() < merged.1.len() {
                    merged.1 = c.clone();
                }
                false
            });
            out.push(merged);
        }
        out
    }

    /// The circles as text, one line per circle and one per edge inside it.
    pub(crate) fn report(&self) -> String {
        let name = |m: &Module| {
            let file = &self.files[m];
            let root = self.files[&Module::new()].parent().unwrap();
            file.strip_prefix(root)
                .unwrap_or(file)
                .display()
                .to_string()
        };
        let mut s = String::new();
        for (files, shortest) in self.circles() {
            let mut lp: Vec<String> = shortest.iter().map(name).collect();
            lp.push(name(&shortest[0]));
            s += &format!(
                "circle of {} files, e.g. {}\n",
                files.len(),
                lp.join(" -> ")
            );
            for a in &files {
                for b in self
                    .edges
                    .get(a)
                    .into_iter()
                    .flatten()
                    .filter(|b| files.contains(*b))
                {
                    s += &format!("    {} -> {}\n", name(a), name(b));
                }
            }
        }
        s
    }
}
