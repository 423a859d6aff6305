//! The rows under test: each plugin alone and each chain, with their netconfs.

use std::path::{Path, PathBuf};

use serde_json::{json, Value};

use crate::opts::Opts;

/// One plugin of a subject: its binary and its own netconf (with `cniVersion` and `name`).
#[derive(Clone, Debug)]
pub(crate) struct Step {
    pub(crate) binary: PathBuf,
    pub(crate) conf: Value,
}

/// One plugin, or one chain of plugins, under test.
#[derive(Clone, Debug)]
pub(crate) struct Subject {
    pub(crate) label: &'static str,
    /// One step: a plugin alone (DEL without prevResult, as before). More: a chain run as libcni
    /// runs a conflist — ADD in order, each with the previous result as `prevResult`; DEL in
    /// reverse, each with the chain's cached result as `prevResult`; timed from the first spawn
    /// to the last reaped exit.
    pub(crate) steps: Vec<Step>,
    pub(crate) cni_path: String,
    /// Whether its RSS pass also measures host-local exec'd directly.
    pub(crate) rss_host_local: bool,
    /// Pod lookup: every invocation carries `CNI_ARGS` naming a pod (`default/<cid>`, fresh UID)
    /// registered in the stand-in before the timed region.
    pub(crate) lookup: bool,
    /// A meta plugin alone: every pod netns gets `eth0` untimed ([`Env::add_ifaces`]) and every
    /// invocation (ADD and DEL) a `prevResult` naming it ([`iface_prev`]).
    pub(crate) on_iface: bool,
}

impl Subject {
    pub(crate) fn single(
        label: &'static str,
        binary: PathBuf,
        conf: Value,
        cni_path: &str,
    ) -> Subject {
        Subject {
            label,
            steps: vec![Step { binary, conf }],
            cni_path: cni_path.to_owned(),
            rss_host_local: false,
            lookup: false,
            on_iface: false,
        }
    }

    /// The previous result its first step gets on ADD (and a single step on DEL) in pod `ns`.
    pub(crate) fn first_prev(&self, ns: &str) -> Option<Value> {
        self.on_iface.then(|| iface_prev(ns))
    }
}

/// The result a main plugin would have returned for `eth0` in pod netns `ns` (path).
pub(crate) fn iface_prev(ns: &str) -> Value {
    json!({"cniVersion": "1.0.0",
        "interfaces": [{"name": "eth0", "sandbox": ns}],
        "ips": [{"address": "10.107.0.2/32", "interface": 0, "gateway": "169.254.1.1"}],
        "routes": [{"dst": "0.0.0.0/0", "gw": "169.254.1.1"}]})
}

/// Every subject; `kubeconfig` (the stand-in's) adds the "tern+lookup" row.
pub(crate) fn subjects(
    o: &Opts,
    work: &Path,
    run_work: &Path,
    kubeconfig: Option<&Path>,
) -> Vec<Subject> {
    let hl = |subnet: &str, dir: &str| json!({"type": "host-local", "ranges": [[{"subnet": subnet}]], "dataDir": work.join(dir)});
    let ti = |subnet: &str, dir: &str| json!({"type": "tern-ipam", "ranges": [[{"subnet": subnet}]], "dataDir": work.join(dir)});
    let state = |dir: &str| {
        o.state_dir
            .clone()
            .unwrap_or_else(|| run_work.to_path_buf())
            .join(dir)
    };
    let tern_conf = |name: &str, ipam: Value, st: &str| {
        json!({"cniVersion": "1.0.0", "name": name, "type": "tern", "mtu": 1500,
            "stateDir": state(st), "ipam": ipam})
    };
    // The same three sysctls for both tuning plugins (10-tern.conflist's).
    let sysctl = json!({"net.ipv4.tcp_keepalive_time": "600", "net.ipv4.tcp_keepalive_intvl": "60",
        "net.ipv4.tcp_keepalive_probes": "5"});
    let tuning = |name: &str, ty: &str, dir: &str| json!({"cniVersion": "1.0.0", "name": name, "type": ty, "sysctl": sysctl, "dataDir": run_work.join(dir)});
    let ref_path = o.ref_dir.display().to_string();
    let tern_dir = o.tern.parent().unwrap_or(Path::new("."));
    // tern's plugins first, the reference ones after (host-local and tuning are only there).
    let both_path = format!("{}:{ref_path}", tern_dir.display());
    let mut v = vec![
        Subject {
            rss_host_local: true,
            ..Subject::single(
                "tern",
                o.tern.clone(),
                tern_conf("bench-tern", hl("10.100.0.0/16", "ipam-tern"), "tern-state"),
                &ref_path,
            )
        },
        Subject {
            rss_host_local: true,
            // ipMasq off: tern does no masquerading, so neither does the reference here.
            ..Subject::single(
                "ptp",
                o.ptp.clone(),
                json!({"cniVersion": "1.0.0", "name": "bench-ptp", "type": "ptp", "mtu": 1500,
                    "ipMasq": false, "ipam": hl("10.101.0.0/16", "ipam-ptp")}),
                &ref_path,
            )
        },
        // IPAM alone, exec'd directly with tern's netconf: the floor under both plugins.
        Subject::single(
            "hl",
            o.ref_dir.join("host-local"),
            json!({"cniVersion": "1.0.0", "name": "bench-hl", "type": "tern",
                "ipam": hl("10.102.0.0/16", "ipam-hl")}),
            &ref_path,
        ),
        // tern with tern-ipam, which it runs in-process.
        Subject::single(
            "tern/ti",
            o.tern.clone(),
            tern_conf(
                "bench-tern-ti",
                ti("10.103.0.0/16", "ipam-tern-ti"),
                "tern-ti-state",
            ),
            &both_path,
        ),
    ];
    // ipMasq's cost: the "tern" row plus one nft transaction per ADD (list + delete per DEL).
    let mut masq = tern_conf(
        "bench-tern-masq",
        hl("10.109.0.0/16", "ipam-tern-masq"),
        "tern-masq-state",
    );
    masq["ipMasq"] = json!(true);
    v.push(Subject::single(
        "tern+masq",
        o.tern.clone(),
        masq,
        &ref_path,
    ));
    if let Some(b) = &o.tern_b {
        v.push(Subject {
            rss_host_local: false,
            ..Subject::single(
                "tern-b",
                b.clone(),
                tern_conf(
                    "bench-tern-b",
                    hl("10.119.0.0/16", "ipam-tern-b"),
                    "tern-b-state",
                ),
                &ref_path,
            )
        });
    }
    v.push(Subject {
        label: "ref-chain",
        steps: vec![
            Step {
                binary: o.ptp.clone(),
                conf: json!({"cniVersion": "1.0.0", "name": "bench-ref-chain", "type": "ptp", "mtu": 1500,
                    "ipMasq": false, "ipam": hl("10.104.0.0/16", "ipam-ref-chain")}),
            },
            Step {
                binary: o.ref_dir.join("tuning"),
                conf: tuning("bench-ref-chain", "tuning", "tuning-ref"),
            },
        ],
        cni_path: ref_path.clone(),
        rss_host_local: false,
        lookup: false,
        on_iface: false,
    });
    // The same chain of the current reference plugins, all three from `--ref-new`.
    if o.ref_new.join("ptp").is_file() {
        v.push(Subject {
            label: "ref-chain/1.10",
            steps: vec![
                Step {
                    binary: o.ref_new.join("ptp"),
                    conf: json!({"cniVersion": "1.0.0", "name": "bench-ref-new", "type": "ptp", "mtu": 1500,
                        "ipMasq": false, "ipam": hl("10.109.0.0/16", "ipam-ref-new")}),
                },
                Step {
                    binary: o.ref_new.join("tuning"),
                    conf: tuning("bench-ref-new", "tuning", "tuning-ref-new"),
                },
            ],
            cni_path: o.ref_new.display().to_string(),
            rss_host_local: false,
            lookup: false,
            on_iface: false,
        });
    }
    for (label, name, ipam, st, td) in [
        (
            "tt-chain/hl",
            "bench-tt-hl",
            hl("10.105.0.0/16", "ipam-tt-hl"),
            "tt-hl-state",
            "tuning-tt-hl",
        ),
        (
            "tt-chain/ti",
            "bench-tt-ti",
            ti("10.106.0.0/16", "ipam-tt-ti"),
            "tt-ti-state",
            "tuning-tt-ti",
        ),
    ] {
        v.push(Subject {
            label,
            steps: vec![
                Step {
                    binary: o.tern.clone(),
                    conf: tern_conf(name, ipam, st),
                },
                Step {
                    binary: tern_dir.join("tern-tuning"),
                    conf: tuning(name, "tern-tuning", td),
                },
            ],
            cni_path: both_path.clone(),
            rss_host_local: false,
            lookup: false,
            on_iface: false,
        });
    }
    // tern exactly as the "tern" row, plus the pod lookup against the stand-in.
    if let Some(kc) = kubeconfig {
        let mut conf = tern_conf(
            "bench-tern-lookup",
            hl("10.108.0.0/16", "ipam-tern-lookup"),
            "tern-lookup-state",
        );
        conf["kubernetes"] = json!({"kubeconfig": kc});
        // No agent runs here; the token is valid for the whole run, so none is needed.
        conf["agentSocket"] = json!(run_work.join("agent.sock"));
        v.push(Subject {
            lookup: true,
            ..Subject::single("tern+lookup", o.tern.clone(), conf, &both_path)
        });
    }
    // The tuning plugins alone on a pod that already has eth0.
    v.push(Subject {
        on_iface: true,
        ..Subject::single(
            "tern-tuning",
            tern_dir.join("tern-tuning"),
            tuning("bench-tt-alone", "tern-tuning", "tuning-tt-alone"),
            &both_path,
        )
    });
    v.push(Subject {
        on_iface: true,
        ..Subject::single(
            "tuning",
            o.ref_dir.join("tuning"),
            tuning("bench-tuning-alone", "tuning", "tuning-ref-alone"),
            &ref_path,
        )
    });
    v
}
