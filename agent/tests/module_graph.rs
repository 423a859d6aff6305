//! The agent's files import each other without a circle.
//!
//! The model. The files are the modules reached from `src/lib.rs` through `mod name;`
//! declarations (`name.rs`, else `name/mod.rs`, in the folder of a `lib.rs`/`mod.rs`, in the
//! folder named after any other file); a module declared under `#[cfg(test)]` is left out with
//! everything in it, and so are other `#[cfg(test)]` items, comments and the text of literals.
//! A path in a file that starts with
//!
//! - `crate::` (read from the root),
//! - `super::` (from the file's parent module; `super::super::` from the grandparent),
//! - `self::`, or the name of a child module the file declares (from the file's own module),
//! - a name the file bound by `use` (read as the path it was bound to),
//!
//! in a `use` (groups expanded) or anywhere in the code, is an edge from the file to the file of
//! the longest module the path names; and when the next segment is a name that module binds by
//! `use` (a re-export such as `pub use config::InstallConfig`), an edge to where that name comes
//! from too. So `use super::Shared` in `run/channel.rs` is an edge to `run/mod.rs`, and
//! `super::watch::run` in `netpol/controller.rs` one to `netpol/watch.rs`. A `mod child;`
//! declaration alone is no edge, nor is a path to the file's own module, nor any other path (an
//! external crate, `Self::`, a local enum).
//!
//! A circle is a loop of edges. One kind of loop is allowed: a loop that stays among one module's
//! own file and the files of its direct children, and runs through the module's own file. That
//! module holds what its parts share and starts them (`run/mod.rs` keeps the `Shared` that the
//! threads of `run/channel.rs`, `run/http.rs` and `run/refresher.rs` read, and spawns them): a
//! parent and its children are one unit, as Rust's privacy treats them. Every other loop fails the
//! test: one between siblings (`netpol/controller.rs` and `netpol/watch.rs` were one), or one
//! through a file outside the family (`config -> egress -> node_cidrs -> install ->
//! install/config -> config` was one). The failure lists each circle (the files that loop
//! together) with its edges and the shortest loop through them.
//!
//! What keeps the agent acyclic: the shared flags live in the leaf `args.rs`, the conflist and its
//! pod-range rewrite in the leaf `conflist.rs`, each subsystem takes its own settings (`mint.rs`:
//! `install` a `TokenTarget`, never the whole `RunConfig`), and netpol's threads share a store
//! below them (`netpol/store.rs`, its settings in `netpol/config.rs`).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// A module's path from the crate root: `[]` for `lib.rs`, `["run", "channel"]`.
type Module = Vec<String>;

#[derive(Debug, Clone, PartialEq, Eq)]
enum Tok {
    Ident(String),
    /// `::`
    Path,
    Punct(char),
}

/// The code's tokens: comments dropped, each literal (string, raw string, byte string, char,
/// number) reduced to one `"` punct, lifetimes to their name.
fn tokens(text: &str) -> Vec<Tok> {
    let c: Vec<char> = text.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < c.len() {
        let ch = c[i];
        let next = c.get(i + 1).copied();
        if ch.is_whitespace() {
            i += 1;
        } else if ch == '/' && next == Some('/') {
            while i < c.len() && c[i] != '\n' {
                i += 1;
            }
        } else if ch == '/' && next == Some('*') {
            let mut depth = 0;
            while i < c.len() {
                if c[i] == '/' && c.get(i + 1) == Some(&'*') {
                    depth += 1;
                    i += 2;
                } else if c[i] == '*' && c.get(i + 1) == Some(&'/') {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    i += 1;
                }
            }
        } else if ch == 'r' && matches!(next, Some('#' | '"')) || ch == 'b' && next == Some('r') {
            // A raw string: r"..", r#".."#, br#".."#; or an identifier starting with r/b.
            let mut j = i + if ch == 'b' { 2 } else { 1 };
            let hashes = c[j..].iter().take_while(|&&h| h == '#').count();
            j += hashes;
            if c.get(j) == Some(&'"') {
                let close = format!("\"{}", "#".repeat(hashes));
                let rest: String = c[j + 1..].iter().collect();
                let end = rest.find(&close).expect("unterminated raw string");
                i = j + 1 + rest[..end].chars().count() + close.chars().count();
                out.push(Tok::Punct('"'));
            } else {
                i = ident(&c, i, &mut out);
            }
        } else if ch == '"' || ch == 'b' && next == Some('"') {
            i += if ch == 'b' { 2 } else { 1 };
            while i < c.len() && c[i] != '"' {
                i += if c[i] == '\\' { 2 } else { 1 };
            }
            i += 1;
            out.push(Tok::Punct('"'));
        } else if ch == '\'' || ch == 'b' && next == Some('\'') {
            let j = i + if ch == 'b' { 2 } else { 1 };
            if c.get(j) == Some(&'\\') {
                // An escaped char literal: '\n', '\'', '\u{..}'.
                let mut k = j + 2;
                while k < c.len() && c[k] != '\'' {
                    k += 1;
                }
                i = k + 1;
                out.push(Tok::Punct('"'));
            } else if c.get(j + 1) == Some(&'\'') {
                i = j + 2;
                out.push(Tok::Punct('"'));
            } else {
                // A lifetime or a label.
                i = ident(&c, j, &mut Vec::new());
            }
        } else if ch.is_ascii_digit() {
            while i < c.len() && (c[i].is_ascii_alphanumeric() || c[i] == '_' || c[i] == '.') {
                // `0..n`: a range, not a fraction.
                if c[i] == '.' && c.get(i + 1) == Some(&'.') {
                    break;
                }
                i += 1;
            }
            out.push(Tok::Punct('"'));
        } else if ch.is_alphabetic() || ch == '_' {
            i = ident(&c, i, &mut out);
        } else if ch == ':' && next == Some(':') {
            out.push(Tok::Path);
            i += 2;
        } else {
            out.push(Tok::Punct(ch));
            i += 1;
        }
    }
    out
}

fn ident(c: &[char], mut i: usize, out: &mut Vec<Tok>) -> usize {
    let start = i;
    while i < c.len() && (c[i].is_alphanumeric() || c[i] == '_') {
        i += 1;
    }
    out.push(Tok::Ident(c[start..i].iter().collect()));
    i
}

fn is(t: Option<&Tok>, word: &str) -> bool {
    matches!(t, Some(Tok::Ident(w)) if w == word)
}

fn punct(t: Option<&Tok>, p: char) -> bool {
    t == Some(&Tok::Punct(p))
}

/// Where the item starting at `i` ends: one past its `;` or its closing brace at depth 0.
fn item_end(t: &[Tok], mut i: usize) -> usize {
    let mut depth = 0i32;
    while i < t.len() {
        match t[i] {
            Tok::Punct('(' | '[' | '{') => depth += 1,
            Tok::Punct(')' | ']') => depth -= 1,
            Tok::Punct('}') => {
                depth -= 1;
                if depth == 0 {
                    return i + 1;
                }
            }
            Tok::Punct(';') if depth == 0 => return i + 1,
            _ => {}
        }
        i += 1;
    }
    t.len()
}

/// The tokens without `#[cfg(test)]` items.
fn product(t: &[Tok]) -> Vec<Tok> {
    let cfg_test = [
        Tok::Punct('#'),
        Tok::Punct('['),
        Tok::Ident("cfg".into()),
        Tok::Punct('('),
        Tok::Ident("test".into()),
        Tok::Punct(')'),
        Tok::Punct(']'),
    ];
    let mut out = Vec::new();
    let mut i = 0;
    while i < t.len() {
        if t[i..].starts_with(&cfg_test) {
            i = item_end(t, i + cfg_test.len());
        } else {
            out.push(t[i].clone());
            i += 1;
        }
    }
    out
}

/// The `mod name;` declarations. An inline `mod name { .. }` outside tests is not modelled.
fn declared(t: &[Tok], file: &Path) -> Vec<String> {
    let mut out = Vec::new();
    for (i, tok) in t.iter().enumerate() {
        if *tok == Tok::Ident("mod".into()) {
            let Some(Tok::Ident(name)) = t.get(i + 1) else {
                continue;
            };
            assert!(
                punct(t.get(i + 2), ';'),
                "{}: inline `mod {name} {{..}}` is not modelled by this test",
                file.display()
            );
            out.push(name.clone());
        }
    }
    out
}

/// A path as written, and the name it is bound to when it comes from a `use` (the last
/// segment, or its `as` alias; `None` for a glob or a path in the code).
type Named = (Vec<String>, Option<String>);

/// Every path of the `use` tree starting at `i` (after `use`), groups expanded, pushed on `out`;
/// returns where the tree ends.
fn use_tree(t: &[Tok], mut i: usize, prefix: &[String], out: &mut Vec<Named>) -> usize {
    let mut path = prefix.to_vec();
    if matches!(t.get(i), Some(Tok::Path)) {
        i += 1; // `use ::std::..`
    }
    let mut glob = false;
    loop {
        match t.get(i) {
            // `{self, ..}`: the prefix itself.
            Some(Tok::Ident(w)) if w == "self" && !path.is_empty() => i += 1,
            Some(Tok::Ident(w)) => {
                path.push(w.clone());
                i += 1;
            }
            Some(Tok::Punct('*')) => {
                glob = true;
                i += 1;
            }
            Some(Tok::Punct('{')) => {
                i += 1;
                while i < t.len() && !punct(t.get(i), '}') {
                    i = use_tree(t, i, &path, out);
                    if punct(t.get(i), ',') {
                        i += 1;
                    }
                }
                return i + 1;
            }
            _ => break,
        }
        if matches!(t.get(i), Some(Tok::Path)) {
            i += 1;
        } else {
            break;
        }
    }
    let mut name = path.last().cloned().filter(|_| !glob);
    if is(t.get(i), "as") {
        if let Some(Tok::Ident(alias)) = t.get(i + 1) {
            name = Some(alias.clone());
        }
        i += 2;
    }
    out.push((path, name));
    i
}

/// Every path in the code: those of `use` trees, and every `a::b::..` elsewhere (not itself
/// after a `::`).
fn paths(t: &[Tok]) -> Vec<Named> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < t.len() {
        if is(t.get(i), "use") {
            i = use_tree(t, i + 1, &[], &mut out);
            continue;
        }
        let after_path = matches!(i.checked_sub(1).map(|p| &t[p]), Some(Tok::Path));
        if let (Some(Tok::Ident(first)), Some(Tok::Path), false) =
            (t.get(i), t.get(i + 1), after_path)
        {
            let mut path = vec![first.clone()];
            let mut j = i + 1;
            while let (Some(Tok::Path), Some(Tok::Ident(seg))) = (t.get(j), t.get(j + 1)) {
                path.push(seg.clone());
                j += 2;
            }
            out.push((path, None));
            i = j;
            continue;
        }
        i += 1;
    }
    out
}

/// The agent's modules and the edges between their files.
#[derive(Debug, Default)]
struct Graph {
    files: BTreeMap<Module, PathBuf>,
    /// Per module, each name a `use` binds and the path it was bound to.
    imports: BTreeMap<Module, BTreeMap<String, Vec<String>>>,
    edges: BTreeMap<Module, BTreeSet<Module>>,
}

impl Graph {
    /// Reads the crate whose root is `src/lib.rs`.
    fn read(src: &Path) -> Graph {
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
    fn circles(&self) -> Vec<(BTreeSet<Module>, Vec<Module>)> {
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
    fn report(&self) -> String {
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

fn m(s: &str) -> Module {
    s.split("::")
        .filter(|p| !p.is_empty())
        .map(str::to_owned)
        .collect()
}

#[test]
fn the_agent_modules_import_each_other_without_a_circle() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let g = Graph::read(&src);
    // The graph is what it should be: every module read, test modules left out, and edges of
    // each kind seen (crate::, super:: to the parent, super:: to a sibling, a child's name).
    // (A child in the folder named after a file other than mod.rs: `out::leaf` below; the
    // agent's last one, `netpol/model/parse.rs`, moved to tern-netpol.)
    assert!(g.files.contains_key(&m("args")), "{:?}", g.files.keys());
    assert!(g.files.contains_key(&m("config::parse")));
    assert!(!g.files.contains_key(&m("netpol::admit::tests")));
    let has = |a: &str, b: &str| g.edges.get(&m(a)).is_some_and(|e| e.contains(&m(b)));
    assert!(has("cli", "config"));
    assert!(has("run::channel", "run"));
    assert!(has("netpol::sync", "netpol::store"));
    assert!(has("run", "run::verbs"));
    let report = g.report();
    assert!(report.is_empty(), "import circles in the agent:\n{report}");
}

/// Writes `files` (path, text) under a new temp dir and reads its graph.
fn synthetic(files: &[(&str, &str)]) -> (tempfile::TempDir, Graph) {
    let dir = tempfile::tempdir().unwrap();
    for (path, text) in files {
        let p = dir.path().join(path);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
    }
    let g = Graph::read(dir.path());
    (dir, g)
}

#[test]
fn a_circle_made_on_purpose_is_reported() {
    // A circle between siblings through `super::`, which following `crate::` alone misses; a
    // family's own loop (`hub` holds what `hub::worker` reads and starts it), which is allowed;
    // a loop that leaves a family (`out` -> `hub::worker`'s parent's sibling), which is not;
    // and loops hidden in comments, literals and `#[cfg(test)]` code, which are none. `out.rs`'s
    // child is read from `out/leaf.rs`, the folder named after the file.
    let (_dir, g) = synthetic(&[
        ("lib.rs", "pub mod sib;\npub mod hub;\npub mod out;\n"),
        ("sib/mod.rs", "mod a;\nmod b;\n"),
        ("sib/a.rs", "use super::b::B;\npub struct A(B);\n"),
        (
            "sib/b.rs",
            "pub struct B;\nfn f() -> Option<super::a::A> { None }\n",
        ),
        (
            "hub/mod.rs",
            "pub mod worker;\npub struct Shared;\npub fn start() { worker::run(&Shared) }\n",
        ),
        (
            "hub/worker.rs",
            "use super::Shared;\npub fn run(_: &Shared) {}\n\
             // crate::out::f()\nconst S: &str = \"crate::out\";\n\
             #[cfg(test)]\nmod tests { fn t() { crate::out::f() } }\n",
        ),
        ("out.rs", "mod leaf;\npub fn f() {}\n"),
        ("out/leaf.rs", "pub fn g() {}\n"),
    ]);
    assert!(
        g.files.contains_key(&m("out::leaf")),
        "{:?}",
        g.files.keys()
    );
    assert!(g.edges[&m("hub")].contains(&m("hub::worker")));
    assert!(g.edges[&m("hub::worker")].contains(&m("hub")));
    assert!(!g.edges.contains_key(&m("out")));
    let circles = g.circles();
    assert_eq!(circles.len(), 1, "{}", g.report());
    assert_eq!(
        circles[0].0,
        BTreeSet::from([m("sib::a"), m("sib::b")]),
        "{}",
        g.report()
    );
    assert!(g.report().contains("sib/a.rs -> "), "{}", g.report());

    // The family's loop stops being its own once it passes through a file outside it.
    let (_dir, g) = synthetic(&[
        ("lib.rs", "pub mod hub;\npub mod out;\n"),
        (
            "hub/mod.rs",
            "mod worker;\npub struct Shared;\npub fn start() { worker::run() }\n",
        ),
        ("hub/worker.rs", "pub fn run() { crate::out::f() }\n"),
        ("out.rs", "pub fn f() { let _ = crate::hub::Shared; }\n"),
    ]);
    let circles = g.circles();
    assert_eq!(circles.len(), 1, "{}", g.report());
    assert_eq!(
        circles[0].0,
        BTreeSet::from([m("hub"), m("hub::worker"), m("out")])
    );

    // A sibling reached through the parent's re-export is still a sibling: `b` names
    // `super::A`, which `hub` re-exports from `a`, and `a` calls into `b`.
    let (_dir, g) = synthetic(&[
        ("lib.rs", "pub mod hub;\n"),
        (
            "hub/mod.rs",
            "mod a;\nmod b;\npub use a::A;\npub fn start() { b::run() }\n",
        ),
        (
            "hub/a.rs",
            "pub struct A;\npub fn f() { super::b::run() }\n",
        ),
        ("hub/b.rs", "pub fn run() { let _ = super::A; }\n"),
    ]);
    assert!(g.edges[&m("hub::b")].contains(&m("hub::a")), "{g:?}");
    let circles = g.circles();
    assert_eq!(circles.len(), 1, "{}", g.report());
    assert_eq!(circles[0].0, BTreeSet::from([m("hub::a"), m("hub::b")]));
}
