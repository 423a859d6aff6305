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

use std::collections::BTreeSet;
use std::path::Path;

#[path = "module_graph/graph.rs"]
mod graph;
#[path = "module_graph/scan.rs"]
mod scan;

use graph::Graph;
use scan::Module;

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
