//! Throwaway network namespaces: a fake host and pod netns per test.
//!
//! Invariants: every namespace has a unique name (prefix, pid, counter), `lo` is up, and it is
//! deleted on drop (`ip netns del`), which also destroys every link inside it. Namespaces are
//! made with iproute2 (`ip netns add`, a bind mount under `/run/netns`), so tests need root and
//! fail (never skip) without it. Stand-in links are veth pairs: these kernels have no `dummy`.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::atomic::{AtomicU32, Ordering};

static COUNTER: AtomicU32 = AtomicU32::new(0);

/// The name of the fake host's uplink made by [`TestNetns::add_uplink`].
pub const UPLINK: &str = "uplink0";
/// The fake host's IPv4 address on [`UPLINK`] (TEST-NET-1, RFC 5737).
pub const UPLINK_V4: &str = "192.0.2.1";
/// The fake host's IPv6 address on [`UPLINK`] (documentation prefix, RFC 3849).
pub const UPLINK_V6: &str = "2001:db8:ffff::1";

/// Runs `ip` with `args`; panics with its stderr when it fails (test fixture).
fn ip(args: &[&str]) -> Output {
    let out = Command::new("ip")
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("cannot run ip {args:?}: {e} (is iproute2 installed?)"));
    assert!(
        out.status.success(),
        "ip {args:?} failed ({}): {} (tests that create namespaces need root)",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// Routes in the calling process's netns whose destination lies inside `subnet` (any prefix
/// within it), as `(dev, dst)` pairs, from `ip -j route show root SUBNET`.
///
/// # Errors
/// `ip` cannot run, fails, or prints something that is not its JSON.
pub fn routes_into(subnet: &str) -> std::io::Result<Vec<(String, String)>> {
    let out = Command::new("ip")
        .args(["-j", "route", "show", "root", subnet])
        .output()?;
    if !out.status.success() {
        return Err(std::io::Error::other(format!(
            "ip route show root {subnet}: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    let routes: serde_json::Value = serde_json::from_slice(&out.stdout)
        .map_err(|e| std::io::Error::other(format!("ip -j route: {e}")))?;
    Ok(routes
        .as_array()
        .map(|a| {
            a.iter()
                .map(|r| {
                    (
                        r["dev"].as_str().unwrap_or_default().to_owned(),
                        r["dst"].as_str().unwrap_or_default().to_owned(),
                    )
                })
                .collect()
        })
        .unwrap_or_default())
}

/// A uniquely named network namespace, deleted on drop.
#[derive(Debug)]
pub struct TestNetns {
    name: String,
}

impl TestNetns {
    /// Creates `<prefix>-<pid>-<n>` with `lo` up. Panics on failure (not root, no iproute2).
    pub fn new(prefix: &str) -> TestNetns {
        let n = COUNTER.fetch_add(1, Ordering::Relaxed);
        let name = format!("{prefix}-{}-{n}", std::process::id());
        ip(&["netns", "add", &name]);
        let ns = TestNetns { name };
        ip(&["-n", &ns.name, "link", "set", "lo", "up"]);
        ns
    }

    /// The namespace's name under `/run/netns`.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The namespace file, `/run/netns/<name>` (what a runtime passes as `CNI_NETNS`).
    pub fn path(&self) -> PathBuf {
        Path::new("/run/netns").join(&self.name)
    }

    /// Runs `cmd` inside the namespace (`ip netns exec <name> cmd...`) and returns its output,
    /// whatever its exit status.
    pub fn exec(&self, cmd: &[&str]) -> Output {
        Command::new("ip")
            .args(["netns", "exec", &self.name])
            .args(cmd)
            .output()
            .unwrap_or_else(|e| panic!("cannot run {cmd:?} in {}: {e}", self.name))
    }

    /// Runs `cmd` inside the namespace, asserts success and returns its stdout as text.
    pub fn exec_ok(&self, cmd: &[&str]) -> String {
        let out = self.exec(cmd);
        assert!(
            out.status.success(),
            "{cmd:?} in {} failed ({}): {}",
            self.name,
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Runs `ip -n <name> args...` and returns stdout; panics on failure.
    pub fn ip(&self, args: &[&str]) -> String {
        let mut all = vec!["-n", self.name.as_str()];
        all.extend_from_slice(args);
        String::from_utf8_lossy(&ip(&all).stdout).into_owned()
    }

    /// Reads a sysctl inside the namespace with `cat /proc/sys/<slash path>` (independent of the
    /// code under test), trailing newline removed.
    pub fn sysctl(&self, rel: &str) -> String {
        let path = format!("/proc/sys/{}", rel.replace('.', "/"));
        self.exec_ok(&["cat", &path])
            .trim_end_matches('\n')
            .to_string()
    }

    /// Writes a sysctl inside the namespace (`sh -c 'echo v > file'`), panicking on failure.
    pub fn set_sysctl(&self, rel_slash: &str, value: &str) {
        let path = format!("/proc/sys/{rel_slash}");
        self.exec_ok(&["sh", "-c", &format!("echo '{value}' > {path}")]);
    }

    /// Creates a veth pair inside this namespace, both ends up: a stand-in uplink or pod link.
    pub fn add_veth(&self, name: &str, peer: &str) {
        self.ip(&["link", "add", name, "type", "veth", "peer", "name", peer]);
        self.ip(&["link", "set", name, "up"]);
        self.ip(&["link", "set", peer, "up"]);
    }

    /// Gives this namespace what a node has and a bare netns lacks: an uplink with an address and
    /// default routes. A veth pair [`UPLINK`]/[`UPLINK`]`p` (both ends here, up) carries
    /// [`UPLINK_V4`]/24 and [`UPLINK_V6`]/64 (no DAD), with default routes via the .254 / ::fe
    /// neighbours on it. Proxy ARP answers only for destinations the host can route, so without a
    /// default route a routed-veth plugin's pod could not resolve its gateway 169.254.1.1.
    pub fn add_uplink(&self) {
        let peer = format!("{UPLINK}p");
        self.add_veth(UPLINK, &peer);
        self.ip(&["addr", "add", &format!("{UPLINK_V4}/24"), "dev", UPLINK]);
        self.ip(&[
            "-6",
            "addr",
            "add",
            &format!("{UPLINK_V6}/64"),
            "dev",
            UPLINK,
            "nodad",
        ]);
        self.ip(&[
            "route",
            "add",
            "default",
            "via",
            "192.0.2.254",
            "dev",
            UPLINK,
        ]);
        self.ip(&[
            "-6",
            "route",
            "add",
            "default",
            "via",
            "2001:db8:ffff::fe",
            "dev",
            UPLINK,
        ]);
    }

    /// Wires `pod` to this namespace as tern wires a pod: a veth `host_veth` here with `eth0` in
    /// `pod`, 169.254.1.1/32 and fe80::1 on the host end, `v4`/32 and `v6`/128 on `eth0` with
    /// host routes to them here, and default routes in `pod` via the link-local gateways.
    pub fn wire_routed_pod(&self, pod: &TestNetns, host_veth: &str, v4: &str, v6: &str) {
        let hv = host_veth;
        self.ip(&[
            "link", "add", hv, "type", "veth", "peer", "name", "eth0", "netns", &pod.name,
        ]);
        self.ip(&["link", "set", hv, "up"]);
        self.ip(&["addr", "add", "169.254.1.1/32", "dev", hv]);
        self.ip(&["-6", "addr", "add", "fe80::1/64", "dev", hv, "nodad"]);
        self.ip(&["route", "add", &format!("{v4}/32"), "dev", hv]);
        self.ip(&["-6", "route", "add", &format!("{v6}/128"), "dev", hv]);
        pod.ip(&["link", "set", "eth0", "up"]);
        pod.ip(&["addr", "add", &format!("{v4}/32"), "dev", "eth0"]);
        pod.ip(&[
            "-6",
            "addr",
            "add",
            &format!("{v6}/128"),
            "dev",
            "eth0",
            "nodad",
        ]);
        pod.ip(&["route", "add", "169.254.1.1", "dev", "eth0"]);
        pod.ip(&[
            "route",
            "add",
            "default",
            "via",
            "169.254.1.1",
            "dev",
            "eth0",
        ]);
        pod.ip(&[
            "-6", "route", "add", "default", "via", "fe80::1", "dev", "eth0",
        ]);
    }

    /// True when a link of that name exists in the namespace.
    pub fn has_link(&self, name: &str) -> bool {
        Command::new("ip")
            .args(["-n", &self.name, "link", "show", "dev", name])
            .output()
            .map(|o| o.status.success())
            .unwrap_or(false)
    }
}

impl Drop for TestNetns {
    fn drop(&mut self) {
        // Best effort: never panic in drop (a test already failing would abort).
        let _ = Command::new("ip")
            .args(["netns", "del", &self.name])
            .output();
    }
}

/// A fake host namespace and a pod namespace for one test: plugin code runs "on the host" via
/// `run_in` of the host netns (or the binary under `ip netns exec <host>`), with `CNI_NETNS`
/// naming the pod netns.
#[derive(Debug)]
pub struct HostAndPod {
    /// The stand-in for the node's root namespace.
    pub host: TestNetns,
    /// The stand-in for the pod sandbox's namespace.
    pub pod: TestNetns,
}

impl HostAndPod {
    /// Creates `<prefix>-host-…` and `<prefix>-pod-…`.
    pub fn new(prefix: &str) -> HostAndPod {
        HostAndPod {
            host: TestNetns::new(&format!("{prefix}-host")),
            pod: TestNetns::new(&format!("{prefix}-pod")),
        }
    }

    /// Like [`HostAndPod::new`], with the host given an uplink and default routes
    /// ([`TestNetns::add_uplink`]): the fixture for a plugin that runs in the host netns.
    pub fn with_uplink(prefix: &str) -> HostAndPod {
        let hp = HostAndPod::new(prefix);
        hp.host.add_uplink();
        hp
    }

    /// Like [`HostAndPod::new`], plus a veth pair `ifname` in the pod netns with its peer
    /// `host_peer` in the host netns (both up): what a main plugin leaves behind for a meta
    /// plugin such as tuning to adjust.
    pub fn with_pod_link(prefix: &str, ifname: &str, host_peer: &str) -> HostAndPod {
        let hp = HostAndPod::new(prefix);
        hp.host.ip(&[
            "link",
            "add",
            host_peer,
            "type",
            "veth",
            "peer",
            "name",
            ifname,
            "netns",
            hp.pod.name(),
        ]);
        hp.host.ip(&["link", "set", host_peer, "up"]);
        hp.pod.ip(&["link", "set", ifname, "up"]);
        hp
    }
}
