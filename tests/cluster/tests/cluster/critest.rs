//! `critest`: cri-tools' own CRI validation suite on the node, tern its network.
//!
//! critest v1.34.0 talks to the node's containerd (the one the kubelet uses, with the conflist
//! `tern-agent install` wrote) and runs its Networking specs: DNS config, hostname, a web server
//! reached at the pod's IP, and a hostPort. critest pulls its images through the CRI, so a local
//! registry (distribution v3, scripts/build-go) serves the busybox and web server images built
//! by tern-xtask image; containerd reaches it over plain HTTP through a hosts.toml (lib.sh).
//!
//! Expectations (also in docs/TESTING.md, "critest"). critest's sandboxes are not pods of the API, and
//! tern's lookup refuses those (code 3, as for a deleted pod) and the agent never admits them
//! (no Pod to wait for: code 11), so the run drops the conflist's `kubernetes` and
//! `networkPolicy` blocks; everything else is the deployed chain: tern, tern-tuning, and the
//! reference `portmap` and `bandwidth` (v1.10.0) that `tern-agent install` put beside them.
//! All four specs pass, "port mapping with host port and container port" (`127.0.0.1:12000`)
//! through the deployed portmap (`snat: true` routes 127.0.0.1 to the pod). Until portmap was in
//! deploy/'s chain that spec failed, and the case asserted the failure.

use std::path::{Path, PathBuf};

use serde_json::Value;
use tern_cluster::{fail, Node, Res};

const FOCUS: &str = "runtime should support networking";
const HOSTPORT_SPEC: &str = "runtime should support port mapping with host port and container port";

fn start_registry(node: &Node) -> Res {
    let r = node.kt.join("registry");
    let data = r.join("data");
    std::fs::create_dir_all(&data).map_err(|e| format!("mkdir {}: {e}", data.display()))?;
    let conf = format!(
        "version: 0.1\nlog:\n  level: warn\n  accesslog:\n    disabled: true\nstorage:\n  filesystem:\n    \
         rootdirectory: {}\nhttp:\n  addr: {}\n",
        data.display(),
        node.var("CRITEST_REGISTRY")
    );
    write(&r.join("config.yml"), &conf)?;
    let registry = format!("{}/registry/registry", node.var("GOBIN_DIR"));
    let config = r.join("config.yml");
    node.sh(
        &[
            "start",
            "registry",
            &registry,
            "serve",
            &config.to_string_lossy(),
        ],
        &[],
    )?;
    let url = format!("http://{}/v2/", node.var("CRITEST_REGISTRY"));
    node.wait_for(30, "the local registry", || {
        node.ok(&mut Node::cmd("curl", &["-sf", &url]))
    })
}

/// Builds a `tern-xtask image --KIND` archive named NAME and pushes it to the registry from a
/// containerd namespace of its own, so that critest's pull really goes through the registry.
fn push_image(node: &Node, kind: &str, name: &str) -> Res {
    let base = name.split(':').next().unwrap_or(name);
    let file = base.rsplit('/').next().unwrap_or(base);
    let out = node.kt.join("images").join(format!("{file}.oci.tar"));
    let out = out.to_string_lossy();
    let xtask = tern_testkit::exec::bin_dir().join("tern-xtask");
    let mut build = Node::cmd(&xtask.to_string_lossy(), &[]);
    build.args(["image", &format!("--{kind}"), "--name", name, "--out", &out]);
    node.run(&mut build, None)?;
    let ctr = |args: &[&str]| {
        let mut c = Node::cmd(&format!("{}/containerd/ctr", node.var("GOBIN_DIR")), &[]);
        c.arg("--address")
            .arg(node.kt.join("containerd/containerd.sock"))
            .args(["-n", "critest-push", "images"])
            .args(args);
        node.run(&mut c, None).map(drop)
    };
    ctr(&["import", &out])?;
    ctr(&["push", "--plain-http", name])?;
    ctr(&["rm", name])
}

fn write(path: &Path, text: &str) -> Res {
    std::fs::write(path, text).map_err(|e| format!("write {}: {e}", path.display()))
}

/// Runs critest's networking specs, its JSON report to `$KT/critest/NAME.json`: (state, spec)
/// per spec that ran.
fn run_critest(node: &Node, name: &str) -> Res<Vec<(String, String)>> {
    let dir = node.kt.join("critest");
    let out = dir.join(format!("{name}.json"));
    let sock = format!(
        "unix://{}",
        node.kt.join("containerd/containerd.sock").display()
    );
    let images = dir.join("images.yaml");
    let mut c = Node::cmd(&format!("{}/cri-tools/critest", node.var("GOBIN_DIR")), &[]);
    c.current_dir(&dir)
        .args(["-runtime-endpoint", &sock, "-image-endpoint", &sock])
        .arg("-test-images-file")
        .arg(&images)
        .args(["-ginkgo.focus", FOCUS, "-ginkgo.json-report"])
        .arg(&out)
        .arg("-ginkgo.no-color");
    // critest's own verdict is read from its report: a failing spec is expected in one run
    let _ = node.run(&mut c, None);
    let text = std::fs::read_to_string(&out)
        .map_err(|e| format!("critest wrote no report ({}): {e}", out.display()))?;
    let report: Value = serde_json::from_str(&text)
        .map_err(|e| format!("critest's report {}: {e}", out.display()))?;
    let mut specs = Vec::new();
    for suite in report.as_array().into_iter().flatten() {
        for s in suite["SpecReports"].as_array().into_iter().flatten() {
            let state = s["State"].as_str().unwrap_or_default();
            if s["LeafNodeType"] == "It" && state != "skipped" {
                let text = s["LeafNodeText"].as_str().unwrap_or_default();
                specs.push((state.to_owned(), text.to_owned()));
            }
        }
    }
    let lines: Vec<String> = specs.iter().map(|(s, t)| format!("{s}\t{t}")).collect();
    node.note(&format!("critest {name}:\n{}", lines.join("\n")));
    Ok(specs)
}

/// critest removed its sandboxes, and with them tern removed their host veths: the host's tern
/// links are `before` again (the kubelet's pods' own).
fn nothing_left_critest(node: &Node, before: &[String]) -> Res {
    node.wait_for(30, "critest's host veths removed", || {
        node.tern_links().is_ok_and(|l| l == before)
    })
    .map_err(|e| {
        let now = node.tern_links().unwrap_or_default();
        let left: Vec<&String> = now.iter().filter(|l| !before.contains(l)).collect();
        format!("{e}: tern links left after critest: {left:?}")
    })
}

/// The conflist, restored whatever the case's outcome.
struct Restore {
    conflist: PathBuf,
    orig: String,
}

impl Drop for Restore {
    fn drop(&mut self) {
        let _ = std::fs::write(&self.conflist, &self.orig);
    }
}

/// The conflist with the first plugin's `kubernetes` and `networkPolicy` blocks removed (no API
/// pod to look up or admit).
fn variant(orig: &Value) -> Res<String> {
    let mut v = orig.clone();
    let plugins = v["plugins"]
        .as_array_mut()
        .ok_or("the conflist has no plugins array")?;
    if let Some(first) = plugins.first_mut().and_then(Value::as_object_mut) {
        first.remove("kubernetes");
        first.remove("networkPolicy");
    }
    serde_json::to_string_pretty(&v).map_err(|e| e.to_string())
}

pub fn critest(node: &Node) -> Res {
    if node.runtime != "containerd" {
        return fail("the critest case runs against containerd (its registry hosts.toml)");
    }
    for d in ["critest", "images"] {
        let p = node.kt.join(d);
        std::fs::create_dir_all(&p).map_err(|e| format!("mkdir {}: {e}", p.display()))?;
    }
    start_registry(node)?;
    let reg = node.var("CRITEST_REGISTRY");
    let (busybox, web) = (
        format!("{reg}/tern/busybox:test"),
        format!("{reg}/tern/web:test"),
    );
    push_image(node, "busybox", &busybox)?;
    push_image(node, "webserver", &web)?;
    write(
        &node.kt.join("critest/images.yaml"),
        &format!("defaultTestContainerImage: {busybox}\nwebServerTestImage: {web}\n"),
    )?;
    // critest wants a runtime no kubelet manages: the kubelet kills every running sandbox it did
    // not create (within ~2 s here). Stopped as on a real node; the pods it started keep running.
    node.sh(&["stop", "kubelet"], &[])?;
    let conflist = node.cni_net.join("10-tern.conflist");
    let orig = std::fs::read_to_string(&conflist)
        .map_err(|e| format!("read {}: {e}", conflist.display()))?;
    let parsed: Value = serde_json::from_str(&orig).map_err(|e| format!("the conflist: {e}"))?;
    write(&node.kt.join("critest/conflist.orig"), &orig)?;
    let restore = Restore {
        conflist: conflist.clone(),
        orig,
    };
    let links_before = node.tern_links()?;

    // the deployed chain (portmap and bandwidth included) without its pod lookup
    let types: Vec<&str> = parsed["plugins"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|p| p["type"].as_str())
        .collect();
    if types != ["tern", "tern-tuning", "portmap", "bandwidth"] {
        return fail(format!(
            "the deployed chain is {types:?}, not tern, tern-tuning, portmap, bandwidth"
        ));
    }
    write(&conflist, &variant(&parsed)?)?;
    let report = run_critest(node, "deployed")?;
    drop(restore);
    if report.len() != 4 {
        return fail(format!(
            "critest ran {} networking specs, not 4",
            report.len()
        ));
    }
    for (state, spec) in &report {
        if state != "passed" {
            let why = if spec.contains(HOSTPORT_SPEC) {
                " (a hostPort is portmap's job: is it chained and installed?)"
            } else {
                ""
            };
            return fail(format!(
                "critest: '{spec}' {state} with tern's deployed chain{why}"
            ));
        }
    }
    nothing_left_critest(node, &links_before)?;
    node.sh(&["stop", "registry"], &[])?;
    node.sh(&["kubelet_start", "1"], &[])?;
    node.wait_for(60, "node Ready again", || node.node_ready())
}
