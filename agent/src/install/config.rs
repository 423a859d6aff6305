//! `tern-agent install` settings: its flags (the credential flags of `run`, then its own, on
//! clap), their defaults and environment, and `--plugins` parsing.

use std::path::PathBuf;

use anyhow::Context as _;
use clap::Args;

use crate::args::{
    parse_bool, parse_names, parse_plugins, parse_subcommand, CredentialArgs, Switch,
};
use crate::conflist::{DEFAULT_TEMPLATE, RANGES_PLACEHOLDER};
use crate::mint::TokenTarget;

/// The CNI plugins tern ships, and `tern-lookup` (the helper that makes their API calls), copied
/// by default (`--plugins`).
pub const DEFAULT_PLUGINS: &[&str] = &["tern", "tern-tuning", "tern-ipam", "tern-lookup"];

/// Environment of `tern-agent install` that has no flag, shown under `--help`.
const INSTALL_ENV_HELP: &str = "environment:
  TERN_CONFLIST_TEMPLATE   the conflist template text, used when --template is not given
                           (else the built-in template)
  TERN_LOG                 log level: error, warn, info (default), debug or trace
  TERN_LOG_FORMAT          log lines: text (default) or json";

/// `tern-agent install` flags.
#[derive(Debug, Clone, Args)]
#[command(after_help = INSTALL_ENV_HELP)]
pub struct InstallArgs {
    /// Credentials and the CNI service account.
    #[command(flatten)]
    pub credentials: CredentialArgs,
    /// Where the plugins are (in the image)
    #[arg(long, value_name = "DIR", default_value = "/opt/tern/bin")]
    pub src_bin_dir: PathBuf,
    /// Comma-separated plugin file names to copy; each must exist, nothing else is copied
    #[arg(
        long,
        value_name = "LIST",
        default_value = "tern,tern-tuning,tern-ipam,tern-lookup"
    )]
    pub plugins: String,
    /// Comma-separated reference CNI plugins (containernetworking/plugins, in --src-bin-dir
    /// beside tern's) to install for the conflist's chain; "" installs none. Recorded in the CNI
    /// bin dir's .tern-reference-plugins when tern placed them, and only those are removed by
    /// uninstall
    #[arg(long, value_name = "LIST", default_value = "portmap,bandwidth")]
    pub reference_plugins: String,
    /// Replace a reference plugin of the same name that tern did not install (the node's own
    /// portmap, say) with the image's; true, false, 1 or 0 (as Calico's UPDATE_CNI_BINARIES).
    /// Replaced files are still not tern's: uninstall leaves them
    #[arg(long, value_name = "BOOL", default_value = "true")]
    pub update_reference_plugins: Switch,
    /// The host's CNI bin dir as mounted here
    #[arg(long, value_name = "DIR", default_value = "/host/opt/cni/bin")]
    pub cni_bin_dir: PathBuf,
    /// The host's CNI conf dir as mounted here
    #[arg(long, value_name = "DIR", default_value = "/host/etc/cni/net.d")]
    pub cni_conf_dir: PathBuf,
    /// The CNI conf dir as the host sees it (fills __KUBECONFIG_FILEPATH__)
    #[arg(long, value_name = "DIR", default_value = "/etc/cni/net.d")]
    pub host_conf_dir: PathBuf,
    /// File name of the conflist
    #[arg(long, value_name = "NAME", default_value = "10-tern.conflist")]
    pub conflist_name: String,
    /// File name of the kubeconfig
    #[arg(long, value_name = "NAME", default_value = "tern-kubeconfig")]
    pub kubeconfig_name: String,
    /// Conflist template file [default: $TERN_CONFLIST_TEMPLATE (the text), else the built-in template]
    #[arg(long, value_name = "FILE")]
    pub template: Option<PathBuf>,
    /// This node (fills __NODE_NAME__; needed to read spec.podCIDRs)
    #[arg(long, value_name = "NAME", env = "NODE_NAME", hide_env_values = true)]
    pub node_name: Option<String>,
    /// Fill __POD_CIDR_RANGES__ from the node's spec.podCIDRs (one GET); true, false, 1 or 0
    /// [default: true if the template uses __POD_CIDR_RANGES__ (the built-in one does)]
    #[arg(long, value_name = "BOOL", value_parser = parse_bool, action = clap::ArgAction::Set)]
    pub pod_cidrs_from_node: Option<bool>,
    /// Sysctl allowlist the tuning entries must pass (absent file: tern-tuning's built-in list)
    #[arg(
        long,
        value_name = "FILE",
        default_value = "/host/etc/cni/tuning/allowlist.conf"
    )]
    pub allowlist: PathBuf,
}

/// Everything `install` needs.
#[derive(Debug, Clone)]
pub struct InstallConfig {
    /// Where the binaries come from (in the image).
    pub src_bin_dir: PathBuf,
    /// File names of the plugins to copy from `src_bin_dir` (default [`DEFAULT_PLUGINS`]); each
    /// must exist there. Nothing else is copied.
    pub plugins: Vec<String>,
    /// File names of the reference plugins (portmap, bandwidth: [`DEFAULT_REFERENCE_PLUGINS`])
    /// to copy from `src_bin_dir` under the rules of `install/reference.rs`; each must exist there.
    ///
    /// [`DEFAULT_REFERENCE_PLUGINS`]: super::reference::DEFAULT_REFERENCE_PLUGINS
    pub reference_plugins: Vec<String>,
    /// Replace a reference plugin tern did not install (`--update-reference-plugins`).
    pub update_reference_plugins: bool,
    /// The host CNI bin dir as mounted in the container.
    pub cni_bin_dir: PathBuf,
    /// The host CNI conf dir as mounted in the container.
    pub cni_conf_dir: PathBuf,
    /// The CNI conf dir as the host (the runtime and the plugin) sees it.
    pub host_conf_dir: PathBuf,
    /// File name of the conflist.
    pub conflist_name: String,
    /// File name of the kubeconfig.
    pub kubeconfig_name: String,
    /// The conflist template text.
    pub template: String,
    /// The node's name (`NODE_NAME` from the downward API).
    pub node_name: String,
    /// Read `spec.podCIDRs` from the node and fill [`RANGES_PLACEHOLDER`] (from the command line:
    /// `--pod-cidrs-from-node`, default whether the template uses the placeholder).
    pub pod_cidrs_from_node: bool,
    /// The tuning allowlist as mounted in the container (absent: tern-tuning's built-in list).
    pub allowlist: PathBuf,
    /// What the CNI token is minted for, with the API server and the agent's credentials that
    /// the node read uses too; install writes the kubeconfig to `cni_conf_dir` /
    /// `kubeconfig_name`, whatever `token_target.kubeconfig` says.
    pub token_target: TokenTarget,
}

/// What `install` did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Report {
    /// Binaries copied (file names).
    pub binaries: Vec<String>,
    /// The reference plugins and what install did with each.
    pub reference: Vec<(String, super::reference::Placement)>,
    /// Kubeconfig path written.
    pub kubeconfig: PathBuf,
    /// Conflist path written.
    pub conflist: PathBuf,
}

impl InstallConfig {
    /// Builds the configuration from `args` (after `install`), the flags' environment
    /// fallbacks, and the lookup `env` (in-cluster variables, `TERN_CONFLIST_TEMPLATE`).
    ///
    /// # Errors
    /// A bad flag or value, or no template/node name where needed.
    pub fn from_args(
        args: &[String],
        env: &dyn Fn(&str) -> Option<String>,
    ) -> anyhow::Result<Self> {
        Self::from_install_args(parse_subcommand::<InstallArgs>("install", args)?, env)
    }

    /// Builds the configuration from parsed flags and `env` (as [`Self::from_args`]).
    ///
    /// # Errors
    /// As [`Self::from_args`].
    pub fn from_install_args(
        a: InstallArgs,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> anyhow::Result<Self> {
        let token_target = TokenTarget::from_credentials(
            &a.credentials,
            env,
            a.cni_conf_dir.join(&a.kubeconfig_name),
        )?;
        let template = match (
            &a.template,
            env("TERN_CONFLIST_TEMPLATE").filter(|t| !t.trim().is_empty()),
        ) {
            (Some(path), _) => std::fs::read_to_string(path)
                .with_context(|| format!("read template {}", path.display()))?,
            (None, Some(t)) => t,
            (None, None) => DEFAULT_TEMPLATE.to_owned(),
        };
        let pod_cidrs_from_node = a
            .pod_cidrs_from_node
            .unwrap_or_else(|| template.contains(RANGES_PLACEHOLDER));
        let plugins = parse_plugins(&a.plugins)?;
        let reference_plugins = if a.reference_plugins.trim().is_empty() {
            Vec::new()
        } else {
            parse_names("--reference-plugins", &a.reference_plugins)?
        };
        if let Some(both) = reference_plugins.iter().find(|r| plugins.contains(r)) {
            anyhow::bail!("{both} is in both --plugins and --reference-plugins: list it once (--plugins for tern's own, always replaced and removed by uninstall)");
        }
        Ok(InstallConfig {
            src_bin_dir: a.src_bin_dir,
            plugins,
            reference_plugins,
            update_reference_plugins: a.update_reference_plugins.0,
            cni_bin_dir: a.cni_bin_dir,
            cni_conf_dir: a.cni_conf_dir,
            host_conf_dir: a.host_conf_dir,
            conflist_name: a.conflist_name,
            kubeconfig_name: a.kubeconfig_name,
            template,
            node_name: a.node_name.unwrap_or_default(),
            pod_cidrs_from_node,
            allowlist: a.allowlist,
            token_target,
        })
    }
}
