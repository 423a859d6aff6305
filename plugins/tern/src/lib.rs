//! `tern`: routed veth pod networking. [`Tern`] is the verb table the binary dispatches to; each
//! verb lives in its own module (`add`, `del`, `check`, `status`, `gc`), over shared modules for
//! the config, the addressing scheme, the host and pod sides of the wiring, the state files, the
//! masquerade rules (`ipMasq`), the IPAM delegate, the pod lookup, NetworkPolicy admission
//! (`networkPolicy`), the CNI error codes and the teardown error collector. Verb modules never
//! import each other. Linked by the `tern` binary and by the in-process tests.

pub mod add;
pub mod admission;
pub mod attachment;
pub mod check;
pub mod codes;
pub mod config;
pub mod del;
pub mod gateway;
pub mod gc;
pub mod host_side;
pub mod ipam;
pub mod lookup;
pub mod masq;
pub mod naming;
pub mod pod_side;
pub mod rollback;
pub mod state;
pub mod status;
pub mod teardown;

use tern_cni::{AddInput, CheckInput, CniResult, DelInput, Error, GcInput, Plugin, StatusInput};
use tern_net::netns::NetNs;

/// The tern plugin: its verbs, for [`tern_cni::plugin_main`] or [`tern_cni::dispatch`].
pub struct Tern;

impl Plugin for Tern {
    fn about(&self) -> String {
        format!(
            "tern {}: routed veth pod networking",
            tern_node::version::version()
        )
    }

    fn report_as(&self) -> Option<&'static str> {
        Some("tern")
    }

    fn add(&self, input: &AddInput) -> Result<CniResult, Error> {
        // Parsed once for the verb: the checks before the lock and ADD itself read the same.
        let conf = config::TernConf::from_netconf(&input.config)?;
        // Opened before the lock, whose first use makes the network's state directory: a
        // `CNI_NETNS` that is no network namespace is refused (code 8) before anything is made.
        let netns = NetNs::open(&input.netns)?;
        tern_node::phase::mark("netns-open");
        let _lock = attachment::prepare_add(input, &conf)?;
        add::add(input, &conf, &netns)
    }

    fn del(&self, input: &DelInput) -> Result<(), Error> {
        let conf = config::DelConf::from_netconf(&input.config);
        let done = {
            let _lock = attachment::prepare_del(input, &conf);
            del::del(input, &conf)
        };
        if done.is_ok() {
            del::release_drained(&conf);
        }
        done
    }

    fn check(&self, input: &CheckInput) -> Result<(), Error> {
        check::check(input)
    }

    fn status(&self, input: &StatusInput) -> Result<(), Error> {
        status::status(input)
    }

    fn gc(&self, input: &GcInput) -> Result<(), Error> {
        gc::gc(input)
    }
}
