//! `host_port` and `bandwidth`: what the reference `portmap` and `bandwidth` plugins chained
//! after tern-tuning in deploy/'s conflist (and installed by `tern-agent install` from tern's
//! image) do for a pod, through the kubelet and containerd as an operator's pods get it.
//!
//! - `host_port`: a pod's `hostPort: 8080` answers at the node's address from the host and from
//!   another pod, and at 127.0.0.1 from the host (`snat: true`, portmap's route_localnet); its
//!   DNAT rules are portmap's (iptables nat, a `CNI-DN-*` chain per pod); deleted, the pod leaves
//!   no rule and no chain of its own (portmap's shared `CNI-HOSTPORT-*` chains stay, by design).
//! - `bandwidth`: a pod annotated `kubernetes.io/ingress-bandwidth: 10M` receives at about
//!   10 Mbit/s, one without the annotation many times faster; `kubernetes.io/egress-bandwidth:
//!   10M` sends at about 10 Mbit/s when this kernel has the `ifb` link type (probed), and
//!   otherwise fails to start with the plugin's error in its events. Rates are measured in the
//!   receiving pod with busybox (`nc` from a pod that streams /dev/zero, `head -c`, timestamps
//!   from /proc/uptime, 10 ms resolution). containerd passes the annotation's rate with a burst
//!   of 2^32-1 bits (`toCNIBandWidth`), from which the plugin makes a tbf bucket of 193,273,526
//!   bytes: the first ~193 MB go at full speed, so each shaped measurement first receives 1 MB
//!   chunks until one is slow (the bucket spent), then times the next [`MEASURE`] bytes.

use std::net::IpAddr;

use tern_cluster::{fail, Node, Res};

/// The most 1 MB chunks read while waiting for the tbf bucket to be spent: containerd's burst
/// makes a bucket of 193,273,526 bytes at 10M, and it refills at the rate while it drains.
const MAX_DRAIN_MB: u64 = 400;
/// Bytes timed once the bucket is spent (about 5 s at 10 Mbit/s).
const MEASURE: u64 = 6_000_000;
/// Bytes timed for the unshaped comparison (no drain).
const MEASURE_FREE: u64 = 60_000_000;
/// The TCP port the streaming pods listen on.
const PORT: u16 = 5001;

/// A busybox pod NAME in `default` with `annotations` (YAML flow mapping body), running `cmd`
/// (a shell command line; empty: sleep), with `ports` (YAML flow sequence body) on its container.
pub fn pod(node: &Node, name: &str, annotations: &str, cmd: &str, ports: &str) -> String {
    let image = node.var("PAUSE_IMAGE");
    let command = if cmd.is_empty() {
        String::new()
    } else {
        format!(
            "    command: [\"sh\", \"-c\", {}]\n",
            serde_json::json!(cmd)
        )
    };
    let ports = if ports.is_empty() {
        String::new()
    } else {
        format!("    ports: [{ports}]\n")
    };
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata: {{name: {name}, namespace: default, labels: {{app: tern-chain}}, \
         annotations: {{{annotations}}}}}\nspec:\n  terminationGracePeriodSeconds: 1\n  containers:\n  - name: main\n    \
         image: {image}\n    imagePullPolicy: Never\n{command}{ports}"
    )
}

/// Waits up to 60 s for the DEL of every pod of `ips` (the kubelet stops a deleted pod's sandbox,
/// and so runs DEL through the chain, well before it removes the sandbox: here about 50 s
/// before), then reports what is left of any of them.
fn wait_nothing_left(node: &Node, ips: &[IpAddr]) -> Res {
    let gone = |ip: &IpAddr| node.nothing_left(*ip).is_ok();
    let _ = node.wait_for(60, "the pods' DEL (nothing left of them)", || {
        ips.iter().all(gone)
    });
    ips.iter().try_for_each(|ip| node.nothing_left(*ip))
}

/// The host's nat table as iptables-save prints it.
pub fn nat(node: &Node) -> Res<String> {
    node.run(&mut Node::cmd("iptables-save", &["-t", "nat"]), None)
}

/// portmap's per-pod DNAT chains (`CNI-DN-*`) declared in `nat`, sorted.
fn dn_chains(nat: &str) -> Vec<String> {
    let mut v: Vec<String> = nat
        .lines()
        .filter_map(|l| l.strip_prefix(":CNI-DN-"))
        .filter_map(|l| l.split_whitespace().next())
        .map(|c| format!("CNI-DN-{c}"))
        .collect();
    v.sort();
    v
}

/// The nat rules that name `ip` or host port `port`.
pub fn rules_of(nat: &str, ip: IpAddr, port: u16) -> Vec<String> {
    let ip = ip.to_string();
    let dport = format!("--dport {port}");
    nat.lines()
        .filter(|l| l.starts_with("-A "))
        .filter(|l| l.contains(&dport) || l.split([' ', ':', '/']).any(|w| w == ip))
        .map(str::to_owned)
        .collect()
}

/// GET `url` from the host (curl), retried for up to 20 s: its body, trimmed.
fn get_from_host(node: &Node, url: &str) -> Res<String> {
    let mut body = String::new();
    node.wait_for(20, &format!("{url} answering the host"), || {
        match node.run(
            &mut Node::cmd("curl", &["-sf", "--max-time", "5", url]),
            None,
        ) {
            Ok(b) => {
                body = b.trim().to_owned();
                true
            }
            Err(_) => false,
        }
    })?;
    Ok(body)
}

/// Runs `body`; when it fails, deletes `pods` first (best effort), so that a failed case leaves
/// no tern attachment for the later cases (the uninstall case counts them).
fn cleaning_up(node: &Node, pods: &[&str], body: impl FnOnce() -> Res) -> Res {
    let r = body();
    if r.is_err() {
        let mut args = vec![
            "delete",
            "pod",
            "--ignore-not-found",
            "--wait=true",
            "--timeout=60s",
        ];
        args.extend_from_slice(pods);
        let _ = node.kubectl(&args);
    }
    r
}

pub fn host_port(node: &Node) -> Res {
    cleaning_up(node, &["hp-web", "hp-client"], || host_port_body(node))
}

fn host_port_body(node: &Node) -> Res {
    let node_ip = node.var("NODE_IP").to_owned();
    let before = dn_chains(&nat(node)?);
    // busybox httpd serving the pod's hostname (its name) on port 80, published as hostPort 8080
    let web = pod(
        node,
        "hp-web",
        "",
        "mkdir -p /tmp/www && hostname > /tmp/www/index.html && exec httpd -f -p 80 -h /tmp/www",
        "{containerPort: 80, hostPort: 8080, protocol: TCP}",
    );
    node.kubectl_in(&["apply", "-f", "-"], &web)?;
    node.create_pods(&["hp-client"])?;
    node.wait_ready(&["hp-web", "hp-client"], 90)?;
    let ip = node.pod_ip("hp-web")?;
    node.note(&format!("hp-web {ip}, node address {node_ip}"));

    let got = get_from_host(node, &format!("http://{node_ip}:8080/"))?;
    if got != "hp-web" {
        return fail(format!(
            "hostPort 8080 at {node_ip} answered {got:?} to the host, not hp-web"
        ));
    }
    let got = get_from_host(node, "http://127.0.0.1:8080/")?;
    if got != "hp-web" {
        return fail(format!(
            "hostPort 8080 at 127.0.0.1 answered {got:?}, not hp-web"
        ));
    }
    let url = format!("http://{node_ip}:8080/");
    // HTTP/1.0 by hand with nc: the pod image's static busybox wget crashes (exit 139) here
    let get = format!("printf 'GET / HTTP/1.0\\r\\n\\r\\n' | nc -w 5 {node_ip} 8080");
    let got = node.in_pod("hp-client", &["sh", "-c", &get])?;
    if got.lines().last().map(str::trim) != Some("hp-web") {
        return fail(format!(
            "hostPort 8080 at {node_ip} answered {got:?} to pod hp-client, not hp-web"
        ));
    }
    let table = nat(node)?;
    let rules = rules_of(&table, ip, 8080);
    node.note(&format!(
        "portmap's rules for hp-web:\n{}",
        rules.join("\n")
    ));
    let to = format!("--to-destination {ip}:80");
    if !rules
        .iter()
        .any(|r| r.contains("--dport 8080") && r.contains(&to))
    {
        return fail(format!("no DNAT of port 8080 to {ip}:80 in the nat table"));
    }
    let during = dn_chains(&table);
    if during.len() != before.len() + 1 {
        return fail(format!(
            "portmap chains {during:?} with hp-web, {before:?} before: want one more"
        ));
    }

    node.delete_pods(&["hp-web", "hp-client"])?;
    wait_nothing_left(node, &[ip])?;
    let table = nat(node)?;
    let left = rules_of(&table, ip, 8080);
    if !left.is_empty() {
        return fail(format!(
            "portmap rules left after hp-web's DEL:\n{}",
            left.join("\n")
        ));
    }
    if dn_chains(&table) != before {
        return fail(format!(
            "portmap chains after hp-web's DEL: {:?}, before: {before:?}",
            dn_chains(&table)
        ));
    }
    if node.ok(&mut Node::cmd("curl", &["-sf", "--max-time", "3", &url])) {
        return fail("hostPort 8080 still answers after hp-web was deleted");
    }
    Ok(())
}

/// A pod that streams zeros to whoever connects to [`PORT`], one connection after another.
const STREAM: &str = "while true; do nc -l -p 5001 < /dev/zero; done";

/// In `pod`, receives from `src`:[`PORT`] and returns (MB received before shaping showed, the
/// rate of the next `measure` bytes in Mbit/s). With `drain`, it first reads 1 MB chunks until
/// one takes 0.4 s or more (below 20 Mbit/s: the tbf bucket is spent; at most [`MAX_DRAIN_MB`]),
/// then times `measure` bytes; without, it times `measure` bytes at once. Timestamps come from
/// /proc/uptime in centiseconds. The receiving nc reads its stdin from a FIFO opened read-write,
/// which never reaches EOF: busybox nc half-closes the connection on stdin EOF, and the
/// streaming side then stops.
fn receive(node: &Node, pod: &str, src: IpAddr, drain: bool, measure: u64) -> Res<(u64, f64)> {
    let max = if drain { MAX_DRAIN_MB } else { 0 };
    let script = format!(
        "rm -f /tmp/f; mkfifo /tmp/f; cs() {{ read t x </proc/uptime; echo ${{t%.*}}${{t#*.}}; }}; \
         nc {src} {PORT} <>/tmp/f | (a=$(cs); n=0; while [ $n -lt {max} ]; do \
         head -c 1000000 >/dev/null; b=$(cs); n=$((n+1)); [ $((b-a)) -ge 40 ] && break; a=$b; done; \
         a=$(cs); head -c {measure} >/dev/null; b=$(cs); echo $n $a $b)"
    );
    let out = node.in_pod(pod, &["sh", "-c", &script])?;
    let v: Vec<u64> = out
        .split_whitespace()
        .filter_map(|w| w.parse().ok())
        .collect();
    let [n, a, b] = v[..] else {
        return fail(format!(
            "{pod}: chunks and two timestamps expected, got {out:?}"
        ));
    };
    if drain && n >= MAX_DRAIN_MB {
        return fail(format!(
            "{pod} <- {src}: no 1 MB chunk slower than 20 Mbit/s in {n} MB: no shaping"
        ));
    }
    let secs = (b.saturating_sub(a) as f64 / 100.0).max(0.01);
    let rate = measure as f64 * 8.0 / 1e6 / secs;
    node.note(&format!(
        "{pod} <- {src}: shaping seen after {n} MB, then {measure} bytes in {secs:.2} s = {rate:.2} Mbit/s"
    ));
    Ok((n, rate))
}

/// The host side of the pod's veth (the device of the host route to `ip`).
fn host_veth(node: &Node, ip: IpAddr) -> Res<String> {
    let r = node.run(
        &mut Node::cmd("ip", &["-o", "route", "show", &format!("{ip}/32")]),
        None,
    )?;
    let mut words = r.split_whitespace();
    while let Some(w) = words.next() {
        if w == "dev" {
            return words
                .next()
                .map(str::to_owned)
                .ok_or_else(|| format!("no device in {r:?}"));
        }
    }
    fail(format!("no host route to {ip}: {r:?}"))
}

/// Whether this kernel can make an `ifb` link (the bandwidth plugin's egress shaping needs one).
fn kernel_has_ifb(node: &Node) -> bool {
    let ok = node.ok(&mut Node::cmd(
        "ip",
        &["link", "add", "tern-ifbprobe", "type", "ifb"],
    ));
    if ok {
        let _ = node.run(
            &mut Node::cmd("ip", &["link", "del", "tern-ifbprobe"]),
            None,
        );
    }
    ok
}

/// The bandwidth plugin's ifb links (`bwp*`) on the host.
fn ifb_links(node: &Node) -> Res<Vec<String>> {
    let out = node.run(&mut Node::cmd("ip", &["-o", "link", "show"]), None)?;
    Ok(out
        .lines()
        .filter_map(|l| l.split(": ").nth(1))
        .filter(|n| n.starts_with("bwp"))
        .map(|n| n.split('@').next().unwrap_or(n).to_owned())
        .collect())
}

fn in_bounds(what: &str, rate: f64) -> Res {
    if (5.0..=15.0).contains(&rate) {
        Ok(())
    } else {
        fail(format!("{what}: {rate:.2} Mbit/s, want about 10 (5 to 15)"))
    }
}

pub fn bandwidth(node: &Node) -> Res {
    cleaning_up(node, &["bw-src", "bw-in", "bw-plain", "bw-out"], || {
        bandwidth_body(node)
    })
}

fn bandwidth_body(node: &Node) -> Res {
    let ifb = kernel_has_ifb(node);
    node.note(&format!("kernel has the ifb link type: {ifb}"));
    let ingress = "kubernetes.io/ingress-bandwidth: 10M";
    let egress = "kubernetes.io/egress-bandwidth: 10M";
    for (name, ann, cmd) in [
        ("bw-src", "", STREAM),
        ("bw-in", ingress, ""),
        ("bw-plain", "", ""),
        ("bw-out", egress, STREAM),
    ] {
        node.kubectl_in(&["apply", "-f", "-"], &pod(node, name, ann, cmd, ""))?;
    }
    node.wait_ready(&["bw-src", "bw-in", "bw-plain"], 90)?;
    let (src, inp, plain) = (
        node.pod_ip("bw-src")?,
        node.pod_ip("bw-in")?,
        node.pod_ip("bw-plain")?,
    );
    // the plugin's tbf on the host side of bw-in's veth (traffic toward the pod)
    let veth = host_veth(node, inp)?;
    let tc = node.run(&mut Node::cmd("tc", &["qdisc", "show", "dev", &veth]), None)?;
    if !tc.contains("tbf") || !tc.contains("rate 10Mbit") {
        return fail(format!(
            "no tbf at 10Mbit on {veth} (bw-in's host side): {tc}"
        ));
    }
    let (burst, shaped) = receive(node, "bw-in", src, true, MEASURE)?;
    let (_, free) = receive(node, "bw-plain", src, false, MEASURE_FREE)?;
    node.note(&format!(
        "ingress: bw-in {shaped:.2} Mbit/s once {burst} MB had passed unshaped, bw-plain {free:.1} Mbit/s"
    ));
    in_bounds("bw-in (ingress-bandwidth 10M)", shaped)?;
    if free < 5.0 * shaped {
        return fail(format!(
            "bw-plain received at {free:.1} Mbit/s, not much faster than bw-in's {shaped:.2}"
        ));
    }

    let pods = ["bw-src", "bw-in", "bw-plain", "bw-out"];
    let mut ips = vec![src, inp, plain];
    if ifb {
        node.wait_ready(&["bw-out"], 90)?;
        let out = node.pod_ip("bw-out")?;
        ips.push(out);
        if ifb_links(node)?.is_empty() {
            return fail("bw-out runs with egress-bandwidth but the host has no bwp* ifb link");
        }
        let (burst, shaped) = receive(node, "bw-plain", out, true, MEASURE)?;
        node.note(&format!(
            "egress: bw-out sends at {shaped:.2} Mbit/s once {burst} MB had passed unshaped"
        ));
        in_bounds("bw-out (egress-bandwidth 10M)", shaped)?;
    } else {
        // no ifb: the plugin fails the ADD, the kubelet retries and reports it on the pod
        node.wait_for(60, "bw-out's sandbox failure event", || {
            node.kubectl(&[
                "get",
                "events",
                "--field-selector",
                "involvedObject.name=bw-out,reason=FailedCreatePodSandBox",
                "-o",
                "jsonpath={.items[*].message}",
            ])
            .is_ok_and(|m| m.contains("bandwidth") || m.contains("ifb"))
        })?;
        let msg = node.kubectl(&[
            "get",
            "events",
            "--field-selector",
            "involvedObject.name=bw-out,reason=FailedCreatePodSandBox",
            "-o",
            "jsonpath={.items[0].message}",
        ])?;
        node.note(&format!("bw-out (egress-bandwidth, no ifb): {msg}"));
    }
    node.delete_pods(&pods)?;
    wait_nothing_left(node, &ips)?;
    let left = ifb_links(node)?;
    if !left.is_empty() {
        return fail(format!("ifb links left after DEL: {left:?}"));
    }
    Ok(())
}
