//! The CNI error result (CNI spec section 5, "Error"): `{cniVersion, code, msg, details}` on stdout.
//!
//! Codes 1–11 and 50/51 are the spec's; 100 and up are tern's own, listed in the README. Every error
//! a plugin can produce is one of these values; mapping library errors to codes happens once per
//! plugin, and only the dispatcher prints.

use std::fmt;

use serde_json::{json, Value};

/// Well-known error codes (CNI spec "Error", plus the reference library's 8).
pub mod code {
    /// Incompatible CNI version.
    pub const INCOMPATIBLE_VERSION: u32 = 1;
    /// Unsupported field in the network configuration; the message names key and value.
    pub const UNSUPPORTED_FIELD: u32 = 2;
    /// Container unknown or does not exist; the runtime need not call DEL.
    pub const UNKNOWN_CONTAINER: u32 = 3;
    /// Invalid necessary environment variables, like `CNI_COMMAND` or `CNI_CONTAINERID`.
    pub const INVALID_ENVIRONMENT: u32 = 4;
    /// I/O failure, e.g. failed to read network config bytes from stdin.
    pub const IO_FAILURE: u32 = 5;
    /// Failed to decode content, e.g. failed to unmarshal network config.
    pub const DECODE_FAILURE: u32 = 6;
    /// Invalid network configuration.
    pub const INVALID_NETWORK_CONFIG: u32 = 7;
    /// `CNI_NETNS` is unusable, e.g. the plugin's own netns (reference library's `ErrInvalidNetNS`).
    pub const INVALID_NETNS: u32 = 8;
    /// Try again later: a transient condition (API server unreachable, token refresh pending).
    pub const TRY_AGAIN_LATER: u32 = 11;
    /// STATUS: the plugin is not available.
    pub const NOT_AVAILABLE: u32 = 50;
    /// STATUS: not available, and existing containers may have limited connectivity.
    pub const NOT_AVAILABLE_LIMITED_CONNECTIVITY: u32 = 51;
    /// tern: an interface named `CNI_IFNAME` already exists in the pod netns.
    pub const INTERFACE_EXISTS: u32 = 100;
    /// tern: a netlink operation failed; the message names the operation and errno.
    pub const NETLINK: u32 = 101;
    /// tern: IPAM returned no usable address.
    pub const IPAM_NO_ADDRESS: u32 = 102;
    /// tern: the kernel rejected a sysctl write; earlier writes were rolled back.
    pub const SYSCTL_WRITE: u32 = 103;
    /// tern: a state or backup file could not be read or written.
    pub const STATE_IO: u32 = 104;
    /// tern: the API server refused a permission (403); fix the RBAC, retrying will not help.
    pub const API_FORBIDDEN: u32 = 105;
    /// tern: CHECK found the attachment different from what ADD made; the message names each
    /// difference with its expected and current value.
    pub const CHECK_MISMATCH: u32 = 106;
    /// tern: `ipMasq` needs the nft tool and it is missing, or nft refused a transaction (the
    /// message quotes it); nothing of the transaction was committed.
    pub const NFTABLES: u32 = 107;
    /// tern is being uninstalled from this node (its conflist is draining): ADD is refused, DEL
    /// and GC still work.
    pub const DRAINING: u32 = 108;
}

/// A CNI error result. `msg` is lower-case without a trailing period; `details` is optional.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Error {
    /// The CNI error code (see [`code`]).
    pub code: u32,
    /// Short description.
    pub msg: String,
    /// Longer explanation; empty when there is none (then omitted from the JSON).
    pub details: String,
}

impl Error {
    /// An error with `code` and `msg` and no details.
    pub fn new(code: u32, msg: impl Into<String>) -> Self {
        Error {
            code,
            msg: msg.into(),
            details: String::new(),
        }
    }

    /// Sets the details.
    pub fn with_details(mut self, details: impl Into<String>) -> Self {
        self.details = details.into();
        self
    }

    /// Code 7, invalid network configuration.
    pub fn invalid_config(msg: impl Into<String>) -> Self {
        Error::new(code::INVALID_NETWORK_CONFIG, msg)
    }

    /// Code 4, invalid environment.
    pub fn invalid_env(msg: impl Into<String>) -> Self {
        Error::new(code::INVALID_ENVIRONMENT, msg)
    }

    /// Code 5, I/O failure.
    pub fn io(msg: impl Into<String>) -> Self {
        Error::new(code::IO_FAILURE, msg)
    }

    /// Code 6, decode failure.
    pub fn decode(msg: impl Into<String>) -> Self {
        Error::new(code::DECODE_FAILURE, msg)
    }

    /// Code 11, try again later.
    pub fn try_again_later(msg: impl Into<String>) -> Self {
        Error::new(code::TRY_AGAIN_LATER, msg)
    }

    /// Prefixes the message with context, keeping the code: `"{ctx}: {msg}"`.
    pub fn context(mut self, ctx: impl fmt::Display) -> Self {
        self.msg = format!("{ctx}: {}", self.msg);
        self
    }

    /// The error as the spec's JSON object, with `cniVersion` (the config's, when known).
    pub fn to_json(&self, cni_version: &str) -> Value {
        let mut v = json!({
            "cniVersion": cni_version,
            "code": self.code,
            "msg": self.msg,
        });
        if !self.details.is_empty() {
            v["details"] = Value::String(self.details.clone());
        }
        v
    }

    /// Parses an error result printed by another plugin (a delegated IPAM plugin), keeping its
    /// code. `None` when `v` is not an error object.
    pub fn from_json(v: &Value) -> Option<Error> {
        // Code 0 is no error at all (CNI spec "Error"): such an object is not an error result.
        let code = u32::try_from(v.get("code")?.as_u64()?)
            .ok()
            .filter(|c| *c != 0)?;
        let msg = v.get("msg").and_then(Value::as_str).unwrap_or_default();
        let details = v.get("details").and_then(Value::as_str).unwrap_or_default();
        Some(Error::new(code, msg).with_details(details))
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.details.is_empty() {
            write!(f, "{}", self.msg)
        } else {
            write!(f, "{}; {}", self.msg, self.details)
        }
    }
}

impl std::error::Error for Error {}

/// A per-attachment file that cannot be stored is an invalid network config (code 7): its name
/// comes from the netconf (`stateDir`, `dataDir`, the network name) and the runtime's container
/// ID and ifname. A name too long says so in `details`.
impl From<tern_node::lock::NotStorable> for Error {
    fn from(e: tern_node::lock::NotStorable) -> Error {
        let too_long = matches!(e, tern_node::lock::NotStorable::NameTooLong { .. });
        let err = Error::invalid_config(e.to_string());
        if too_long {
            err.with_details("the container ID, interface name or network name is too long")
        } else {
            err
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_has_version_and_omits_empty_details() {
        let e = Error::new(7, "bad");
        assert_eq!(
            e.to_json("1.0.0"),
            json!({"cniVersion":"1.0.0","code":7,"msg":"bad"})
        );
        let e = e.with_details("why");
        assert_eq!(e.to_json("0.4.0")["details"], "why");
    }

    #[test]
    fn parses_a_delegate_error_keeping_its_code() {
        let e = Error::from_json(&json!({"code": 11, "msg": "busy", "details": "d"})).unwrap();
        assert_eq!(
            (e.code, e.msg.as_str(), e.details.as_str()),
            (11, "busy", "d")
        );
        assert!(Error::from_json(&json!({"cniVersion": "1.0.0", "ips": []})).is_none());
    }

    #[test]
    fn a_file_that_cannot_be_stored_is_code_7() {
        let dir = std::env::temp_dir();
        let long = tern_node::lock::check_storable(&dir, &"a".repeat(300), "state").unwrap_err();
        let e = Error::from(long);
        assert_eq!(e.code, code::INVALID_NETWORK_CONFIG);
        assert_eq!(
            e.details,
            "the container ID, interface name or network name is too long"
        );
        assert!(e.msg.starts_with("state \"aaa"), "{e}");
        let deep = dir.join("x/".repeat(2100));
        let e = Error::from(tern_node::lock::check_storable(&deep, "x.json", "state").unwrap_err());
        assert_eq!(
            (e.code, e.details.as_str()),
            (code::INVALID_NETWORK_CONFIG, "")
        );
    }
}
