//! What the crash tests share after an ADD SIGKILLed midway: the DEL that must follow (with the
//! one runtime-library failure accepted), and host-local's own torn reservations.

use serde_json::Value;
use tern_testkit::netns::TestNetns;

use super::{failed_with, files_under, ok, Node};

/// DEL through libcni after a killed ADD (`what` names the kill in messages); it must exit 0.
/// Returns whether libcni's own torn result cache had to be removed first: Debian's libcni 1.1.2
/// writes that cache with a plain WriteFile, so a kill mid-write leaves a truncated file that
/// fails DEL before any plugin runs (the containerd#5438 story, on the runtime's side). Only that
/// failure is accepted (the runtime library's own file), then removed as a fixed runtime would.
pub fn del_after_kill(node: &mut Node, pod: &TestNetns, what: &str) -> bool {
    let mut del = node.tool.del(pod.path()).unwrap();
    let mut torn = false;
    if !del.success() {
        failed_with(&del, 0, "cached result", "libcni DEL after a kill");
        let corrupt: Vec<_> = files_under(&node.tool.cache_dir())
            .into_iter()
            .filter(|p| serde_json::from_slice::<Value>(&std::fs::read(p).unwrap()).is_err())
            .collect();
        assert!(
            !corrupt.is_empty(),
            "DEL failed, but no torn libcni cache file:\n{}",
            del.describe()
        );
        torn = true;
        corrupt
            .iter()
            .for_each(|p| std::fs::remove_file(p).unwrap());
        del = node.tool.del(pod.path()).unwrap();
    }
    ok(&del, &format!("DEL after a kill at {what}"));
    torn
}

/// Debian's host-local creates a reservation file (O_EXCL) and then writes the container ID into
/// it: killed in between, it leaves an empty file that no DEL can match (release is by the ID in
/// the file). That is host-local's own torn write, not a missed release: only *empty* files are
/// accepted, removed and counted; a reservation holding an ID after DEL fails the test.
pub fn remove_torn_reservations(node: &Node) -> usize {
    let mut torn = 0;
    for p in files_under(&node.data_dir()) {
        let name = p.file_name().unwrap().to_string_lossy().into_owned();
        if name.parse::<std::net::IpAddr>().is_err() {
            continue;
        }
        let content = std::fs::read_to_string(&p).unwrap();
        assert!(
            content.trim().is_empty(),
            "reservation {name} still holds {content:?} after DEL: IPAM was not released"
        );
        std::fs::remove_file(&p).unwrap();
        torn += 1;
    }
    torn
}
