//! Command-line settings of `tern-bench` and their parsing.

use std::path::PathBuf;

use crate::Res;

/// Command-line settings.
#[derive(Clone, Debug)]
pub(crate) struct Opts {
    pub(crate) pods: usize,
    pub(crate) rounds: usize,
    pub(crate) parallel: Vec<usize>,
    pub(crate) rss_samples: usize,
    pub(crate) tern: PathBuf,
    pub(crate) ptp: PathBuf,
    pub(crate) ref_dir: PathBuf,
    pub(crate) state_dir: Option<PathBuf>,
    /// A second tern build, run as the "tern" row's twin ("tern-b") in the same rounds, for an
    /// A/B of two builds under the same drift (`--tern-b PATH`).
    pub(crate) tern_b: Option<PathBuf>,
    /// The current reference plugins (ptp, host-local, tuning), run as a second reference chain
    /// beside Debian's (`--ref-new DIR`; default the v1.10.0 that `scripts/build-go plugins`
    /// builds); the row is left out when its ptp is missing.
    pub(crate) ref_new: PathBuf,
    /// `--breakdown`: the per-phase breakdown instead of the full run.
    pub(crate) breakdown: bool,
    /// The containerd and CRI-O rows after the direct ones (off: `--no-cri` or `TERN_BENCH_CRI=0`).
    pub(crate) cri: bool,
}

/// NAME in the directory holding this binary: tern-bench is built beside the plugins and the
/// agent (`target/<triple>/release`); `target/release/NAME` under the working directory when
/// that cannot be read.
pub(crate) fn beside_self(name: &str) -> PathBuf {
    std::env::current_exe()
        .ok()
        .and_then(|e| e.parent().map(|d| d.join(name)))
        .unwrap_or_else(|| PathBuf::from("target/release").join(name))
}

pub(crate) fn parse_opts() -> Res<Opts> {
    let mut o = Opts {
        pods: 200,
        rounds: 4,
        parallel: vec![1, 8],
        rss_samples: 20,
        tern: beside_self("tern"),
        ptp: PathBuf::from("/usr/lib/cni/ptp"),
        ref_dir: PathBuf::from("/usr/lib/cni"),
        state_dir: None,
        tern_b: None,
        ref_new: PathBuf::from("/var/cache/tern-build/bin/plugins"),
        breakdown: false,
        cri: std::env::var("TERN_BENCH_CRI").map_or(true, |v| v != "0"),
    };
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let mut val = || args.next().ok_or_else(|| format!("{a} needs a value"));
        match a.as_str() {
            "--pods" => o.pods = val()?.parse().map_err(|e| format!("--pods: {e}"))?,
            "--rounds" => o.rounds = val()?.parse().map_err(|e| format!("--rounds: {e}"))?,
            "--rss-samples" => {
                o.rss_samples = val()?.parse().map_err(|e| format!("--rss-samples: {e}"))?
            }
            "--parallel" => {
                o.parallel = val()?
                    .split(',')
                    .map(|s| s.parse().map_err(|e| format!("--parallel {s}: {e}")))
                    .collect::<Res<_>>()?
            }
            "--tern" => o.tern = PathBuf::from(val()?),
            "--ptp" => o.ptp = PathBuf::from(val()?),
            "--state-dir" => o.state_dir = Some(PathBuf::from(val()?)),
            "--tern-b" => o.tern_b = Some(PathBuf::from(val()?)),
            "--ref-dir" => o.ref_dir = PathBuf::from(val()?),
            "--ref-new" => o.ref_new = PathBuf::from(val()?),
            "--breakdown" => o.breakdown = true,
            "--no-cri" => o.cri = false,
            _ => return Err(format!("unknown argument {a}")),
        }
    }
    if o.pods == 0 || o.parallel.contains(&0) {
        return Err("--pods and --parallel must be positive".into());
    }
    Ok(o)
}
