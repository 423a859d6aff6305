//! Shared fixtures of tern's end-to-end tests: a fake node (a host netns with an uplink, a libcni
//! driver running inside it, private IPAM data and tern state dirs), chain C0, result
//! normalisation for golden comparison, kernel inspection, and the "nothing left" assertion.
//!
//! Invariant: every test owns its host netns, pod netns, conf/cache/IPAM/state dirs and container
//! IDs, so tests run in parallel and may reuse the same subnets (routes live in the fake host).

// Test code: a failed unwrap is a failed test; not every test binary uses every helper.
#![allow(clippy::unwrap_used, clippy::expect_used, dead_code)]

use std::net::IpAddr;
use std::path::{Path, PathBuf};

use serde_json::{json, Value};
use tern_testkit::exec::{conflist, default_cni_path, Cnitool, PluginCall, RunOutput};
use tern_testkit::netns::TestNetns;

mod cases;
mod edge;
mod inspect;
mod killed;
mod nodes;
mod script_ipam;

#[allow(unused_imports)]
pub use cases::*;
#[allow(unused_imports)]
pub use edge::*;
#[allow(unused_imports)] // not every test binary uses every helper
pub use inspect::*;
#[allow(unused_imports)]
pub use killed::*;
#[allow(unused_imports)]
pub use nodes::*;
#[allow(unused_imports)]
pub use script_ipam::*;

/// Every cniVersion Debian's libcni (1.1.x) can drive.
pub const LIBCNI_VERSIONS: [&str; 4] = ["0.3.0", "0.3.1", "0.4.0", "1.0.0"];
/// Every cniVersion tern supports.
pub const ALL_VERSIONS: [&str; 5] = ["0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0"];
/// The network name of chain C0.
pub const C0_NAME: &str = "c0";
/// C0's subnet.
pub const C0_SUBNET: &str = "10.99.0.0/24";
/// The IPv6 subnet used for IPv6 and dual-stack tests.
pub const V6_SUBNET: &str = "fd99::/64";

/// C0's TCP keepalive sysctls (as in `cni-conf-examples/10-tern.conflist`): key, value.
pub const KEEPALIVE: [(&str, &str); 3] = [
    ("net.ipv4.tcp_keepalive_time", "600"),
    ("net.ipv4.tcp_keepalive_intvl", "60"),
    ("net.ipv4.tcp_keepalive_probes", "5"),
];

/// The configured keepalive values, in [`KEEPALIVE`] order.
pub fn wanted() -> Vec<String> {
    KEEPALIVE.iter().map(|(_, v)| (*v).to_owned()).collect()
}

/// [`KEEPALIVE`] as a tern-tuning `sysctl` object.
pub fn keepalive_sysctls() -> Value {
    Value::Object(
        KEEPALIVE
            .iter()
            .map(|(k, v)| ((*k).to_owned(), json!(v)))
            .collect(),
    )
}

/// The keepalive values currently in `ns`, in [`KEEPALIVE`] order.
pub fn keepalive_of(ns: &TestNetns) -> Vec<String> {
    KEEPALIVE.iter().map(|(k, _)| ns.sysctl(k)).collect()
}

/// The keepalive values of the test process's own netns (the machine's), in [`KEEPALIVE`] order.
pub fn machine_keepalive() -> Vec<String> {
    KEEPALIVE
        .iter()
        .map(|(k, _)| {
            std::fs::read_to_string(format!("/proc/sys/{}", k.replace('.', "/")))
                .unwrap()
                .trim()
                .to_owned()
        })
        .collect()
}

/// A `tern-agent` command's environment as in a pod: nothing inherited but `PATH`, and the
/// in-cluster API server address (`KUBERNETES_SERVICE_HOST`/`_PORT`) of `api`.
pub trait InCluster {
    fn in_cluster(&mut self, api: std::net::SocketAddr) -> &mut Self;
}

impl InCluster for std::process::Command {
    fn in_cluster(&mut self, api: std::net::SocketAddr) -> &mut Self {
        self.env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("KUBERNETES_SERVICE_HOST", api.ip().to_string())
            .env("KUBERNETES_SERVICE_PORT", api.port().to_string())
    }
}

/// The host veth name tern must use (computed in the test kit, apart from the plugin).
pub fn host_veth(container_id: &str, ifname: &str) -> String {
    tern_testkit::tern_host_veth(container_id, ifname)
}

/// IPAM address families of a test.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fam {
    /// IPv4 only (10.99.0.0/24).
    V4,
    /// IPv6 only (fd99::/64).
    V6,
    /// Both.
    Dual,
}

impl Fam {
    /// host-local `ranges` for this family.
    pub fn ranges(self) -> Value {
        let v4 = json!([{"subnet": C0_SUBNET}]);
        let v6 = json!([{"subnet": V6_SUBNET}]);
        match self {
            Fam::V4 => json!([v4]),
            Fam::V6 => json!([v6]),
            Fam::Dual => json!([v4, v6]),
        }
    }

    /// The n-th address (from 0) host-local hands out in a fresh data dir, per family.
    pub fn nth_addrs(self, n: u32) -> Vec<IpAddr> {
        let v4: IpAddr = format!("10.99.0.{}", n + 2).parse().unwrap();
        let v6: IpAddr = format!("fd99::{:x}", n + 2).parse().unwrap();
        match self {
            Fam::V4 => vec![v4],
            Fam::V6 => vec![v6],
            Fam::Dual => vec![v4, v6],
        }
    }
}

/// A fake node: a host netns with an uplink and default routes, and a libcni driver that runs in
/// it with private conf, cache, host-local `dataDir` and tern `stateDir`.
pub struct Node {
    /// The fake host netns (tern runs here).
    pub host: TestNetns,
    /// The libcni driver, running inside [`Node::host`].
    pub tool: Cnitool,
}

impl Node {
    /// A node with no conflist written yet.
    pub fn new(tag: &str) -> Node {
        let host = TestNetns::new(&format!("e2e-{tag}-h"));
        host.add_uplink();
        let mut tool = Cnitool::new().unwrap();
        tool.in_netns(Some(host.name()));
        Node { host, tool }
    }

    /// A node with `conflist` written.
    pub fn with(tag: &str, conflist: &Value) -> Node {
        let mut n = Node::new(tag);
        n.tool.write_conflist(conflist).unwrap();
        n
    }

    /// A fresh pod netns named after this test.
    pub fn pod(&self, tag: &str) -> TestNetns {
        TestNetns::new(&format!("e2e-{tag}-p"))
    }

    /// host-local's `dataDir`.
    pub fn data_dir(&self) -> PathBuf {
        self.tool.scratch().join("ipam")
    }

    /// tern's `stateDir`.
    pub fn state_dir(&self) -> PathBuf {
        self.tool.scratch().join("state")
    }

    /// A direct invocation of `plugin` running in the fake host.
    pub fn call(&self, plugin: &str, command: &str) -> PluginCall {
        PluginCall::new(plugin, command).in_netns(self.host.name())
    }

    /// The tern plugin object with `ranges`, this node's dirs and optional extra keys.
    pub fn tern(&self, ranges: Value) -> Value {
        json!({
            "type": "tern",
            "stateDir": self.state_dir(),
            "ipam": {"type": "host-local", "ranges": ranges, "dataDir": self.data_dir()},
        })
    }

    /// tern-tuning's `dataDir` (its backup files).
    pub fn tuning_dir(&self) -> PathBuf {
        self.tool.scratch().join("tuning")
    }

    /// tern-tuning's per-attachment files in its `dataDir`: all but the node-wide cache of a new
    /// netns's sysctls (`tern_tuning::baseline::CACHE_FILE`), which outlives attachments.
    pub fn tuning_backups(&self) -> Vec<PathBuf> {
        tern_testkit::node::tuning_attachment_files(&self.tuning_dir())
    }

    /// A tern-tuning plugin object with `sysctl` and this node's `dataDir`.
    pub fn tuning(&self, sysctl: Value) -> Value {
        json!({"type": "tern-tuning", "sysctl": sysctl, "dataDir": self.tuning_dir()})
    }

    /// Plugins that follow tern in chain C0: tern-tuning with the three TCP keepalive sysctls.
    pub fn c0_followers(&self) -> Vec<Value> {
        vec![self.tuning(keepalive_sysctls())]
    }

    /// Writes `lines` as `tuning/allowlist.conf` under a private `/etc/cni` stand-in and makes
    /// every libcni run of this node bind-mount it over `/etc/cni` (see `Cnitool::etc_cni`);
    /// returns the stand-in. `None` makes `allowlist.conf` a directory.
    pub fn private_allowlist(&mut self, lines: Option<&[&str]>) -> PathBuf {
        let etc = self.tool.scratch().join("etc-cni");
        let tuning = etc.join("tuning");
        std::fs::create_dir_all(etc.join("net.d")).unwrap();
        std::fs::create_dir_all(&tuning).unwrap();
        let file = tuning.join("allowlist.conf");
        let _ = std::fs::remove_file(&file);
        let _ = std::fs::remove_dir(&file);
        match lines {
            Some(l) => std::fs::write(&file, l.join("\n") + "\n").unwrap(),
            None => std::fs::create_dir(&file).unwrap(),
        }
        self.tool.etc_cni(Some(&etc));
        etc
    }

    /// Chain C0 at `version`: tern (host-local, 10.99.0.0/24), then [`Node::c0_followers`].
    pub fn c0(&self, version: &str) -> Value {
        self.chain(version, Fam::V4, self.c0_followers())
    }

    /// A chain: tern with `fam` ranges, then `followers`.
    pub fn chain(&self, version: &str, fam: Fam, followers: Vec<Value>) -> Value {
        let mut plugins = vec![self.tern(fam.ranges())];
        plugins.extend(followers);
        conflist(C0_NAME, version, plugins)
    }

    /// The single-plugin netconf libcni would send to plugin `i` of `list` (name and cniVersion
    /// copied in), for direct invocations.
    pub fn plugin_conf(list: &Value, i: usize) -> Value {
        let mut c = list["plugins"][i].clone();
        c["name"] = list["name"].clone();
        c["cniVersion"] = list["cniVersion"].clone();
        c
    }

    /// Asserts that the node holds nothing of any attachment: no `tern*` link, no route to any
    /// of `addrs` or through a tern link, no host-local reservation, no tern state file, no
    /// temp file anywhere under the scratch dir.
    pub fn assert_nothing_left(&self, addrs: &[IpAddr]) {
        let links = self.links();
        let terns: Vec<&str> = links
            .iter()
            .filter_map(|l| l["ifname"].as_str())
            .filter(|n| n.starts_with("tern"))
            .collect();
        assert!(terns.is_empty(), "tern links left on the host: {terns:?}");
        for fam in ["-4", "-6"] {
            let routes = self.host.ip(&["-j", fam, "route", "show", "table", "all"]);
            let routes: Value = serde_json::from_str(&routes).unwrap();
            for r in routes.as_array().unwrap() {
                let dst = r["dst"].as_str().unwrap_or("");
                let dev = r["dev"].as_str().unwrap_or("");
                assert!(
                    !dev.starts_with("tern"),
                    "route through a tern link left: {r}"
                );
                for a in addrs {
                    let a = a.to_string();
                    assert!(
                        dst != a && dst != format!("{a}/32") && dst != format!("{a}/128"),
                        "host route to pod address {a} left: {r}"
                    );
                }
            }
        }
        let reserved = files_under(&self.data_dir())
            .into_iter()
            .filter(|p| file_name(p).parse::<IpAddr>().is_ok())
            .collect::<Vec<_>>();
        assert!(
            reserved.is_empty(),
            "host-local reservations left: {reserved:?}"
        );
        let state = files_under(&self.state_dir());
        assert!(state.is_empty(), "tern state files left: {state:?}");
        let backups = self.tuning_backups();
        assert!(backups.is_empty(), "tern-tuning backups left: {backups:?}");
        let temps: Vec<PathBuf> = files_under(self.tool.scratch())
            .into_iter()
            .filter(|p| file_name(p).contains(".tmp"))
            .collect();
        assert!(temps.is_empty(), "half-written files left: {temps:?}");
    }

    /// `ip -j link show` in the host.
    pub fn links(&self) -> Vec<Value> {
        let out = self.host.ip(&["-j", "link", "show"]);
        serde_json::from_str::<Value>(&out)
            .unwrap()
            .as_array()
            .unwrap()
            .clone()
    }

    /// host-local reservations currently on disk: the address file names.
    pub fn reservations(&self) -> Vec<String> {
        files_under(&self.data_dir())
            .into_iter()
            .map(|p| file_name(&p))
            .filter(|n| n.parse::<IpAddr>().is_ok())
            .collect()
    }

    /// tern state files currently on disk.
    pub fn state_files(&self) -> Vec<PathBuf> {
        files_under(&self.state_dir())
    }
}

/// The tern netconf at `version` with `ipam_type` from `CNI_PATH` (no IPAM config).
pub fn conf(node: &Node, version: &str, ipam_type: &str) -> Value {
    json!({
        "cniVersion": version,
        "name": C0_NAME,
        "type": "tern",
        "stateDir": node.state_dir(),
        "ipam": {"type": ipam_type},
    })
}

/// The tern netconf at `version` with tern-ipam: `fam` ranges, a route to 10.200.0.0/16, DNS
/// from a resolv.conf in the scratch dir, this node's `dataDir`.
pub fn ipam_conf(node: &Node, version: &str, fam: Fam) -> Value {
    let resolv = node.tool.scratch().join("resolv.conf");
    std::fs::write(&resolv, "nameserver 10.96.0.10\nsearch svc.cluster.local\n").unwrap();
    let mut c = node.tern(fam.ranges());
    c["cniVersion"] = json!(version);
    c["name"] = json!(C0_NAME);
    c["ipam"]["type"] = json!("tern-ipam");
    c["ipam"]["routes"] = json!([{"dst": "10.200.0.0/16"}]);
    c["ipam"]["resolvConf"] = json!(resolv);
    c
}

/// The lease files of tern-ipam on `node`: address -> first line (the container ID).
pub fn leases(node: &Node) -> std::collections::BTreeMap<String, String> {
    files_under(&node.data_dir())
        .into_iter()
        .filter_map(|p| {
            let name = p.file_name()?.to_string_lossy().into_owned();
            name.parse::<std::net::IpAddr>().ok()?;
            let owner = std::fs::read_to_string(&p).ok()?;
            Some((name, owner.lines().next().unwrap_or("").to_owned()))
        })
        .collect()
}

/// A fake node with chain C0 at 1.0.0 written as its libcni conflist; the conflist too.
pub fn c0_node(tag: &str) -> (Node, Value) {
    let mut node = Node::new(tag);
    let list = node.c0("1.0.0");
    node.tool.write_conflist(&list).unwrap();
    (node, list)
}
