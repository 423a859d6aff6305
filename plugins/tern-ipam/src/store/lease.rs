//! One lease file's content, as host-local writes it: `<containerID>\r\n<ifname>`, or only the
//! container ID in files of old host-local versions ("legacy").

use std::net::IpAddr;

/// Separator between container ID and ifname in a lease file.
pub const LINE_BREAK: &str = "\r\n";

/// Who holds a lease, as read from its file (content trimmed of surrounding whitespace).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Owner {
    /// `<containerID>\r\n<ifname>`.
    Attachment {
        /// The container ID.
        id: String,
        /// The interface name.
        ifname: String,
    },
    /// Only a container ID (files written by host-local before 0.8).
    Legacy {
        /// The container ID.
        id: String,
    },
}

impl Owner {
    /// Parses a lease file's content.
    pub fn parse(content: &str) -> Owner {
        let content = content.trim();
        match content.split_once(LINE_BREAK) {
            Some((id, ifname)) => Owner::Attachment {
                id: id.to_owned(),
                ifname: ifname.to_owned(),
            },
            None => Owner::Legacy {
                id: content.to_owned(),
            },
        }
    }

    /// Whether this is exactly the attachment (`id`, `ifname`); `id` is trimmed as host-local does.
    pub fn is_attachment(&self, id: &str, ifname: &str) -> bool {
        matches!(self, Owner::Attachment { id: i, ifname: n } if i == id.trim() && n == ifname)
    }

    /// Whether this is a legacy lease of container `id`.
    pub fn is_legacy_of(&self, id: &str) -> bool {
        matches!(self, Owner::Legacy { id: i } if i == id.trim())
    }
}

/// One lease file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Lease {
    /// The leased address (the file name).
    pub ip: IpAddr,
    /// The file name exactly as found.
    pub file_name: String,
    /// Its holder.
    pub owner: Owner,
}
