//! Dev-only fixtures for tern's tests: throwaway host and pod network namespaces ([`netns`]),
//! running built binaries exactly as a runtime does ([`exec`]), the processes of a killed
//! invocation ([`procs`]), pod churn with kills through libcni ([`churn`]), hostile netconfs
//! ([`hostile`]), a real node's audit of one pod address ([`node`]) and the gate every test that
//! needs root begins with ([`root`]). Never a dependency of a shipped binary.

pub mod churn;
pub mod exec;
pub mod hostile;
pub mod netns;
pub mod node;
pub mod procs;
pub mod root;
pub mod summary;

/// The host veth name tern must give the attachment (`container_id`, `ifname`): `tern` + the first
/// 11 hex characters of SHA-256(container ID, NUL, ifname) (DESIGN.md). Computed here, apart from
/// the plugin, so a change of scheme fails the tests that use it.
pub fn tern_host_veth(container_id: &str, ifname: &str) -> String {
    use sha2::{Digest, Sha256};
    let mut h = Sha256::new();
    h.update(container_id.as_bytes());
    h.update([0u8]);
    h.update(ifname.as_bytes());
    let hex: String = h.finalize().iter().map(|b| format!("{b:02x}")).collect();
    format!("tern{}", &hex[..11])
}
