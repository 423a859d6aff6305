//! Helpers of the bug-report cases (`cases*.rs`): DEL of each plugin of a chain directly, C0's
//! tuning applied, a link's ifindex.

use serde_json::Value;
use tern_testkit::netns::TestNetns;

use super::*;

/// DELs each plugin of `list` directly, in reverse order as libcni does, with `netns` (possibly
/// empty) and `prev` as prevResult (`None`: no prevResult key). Each must exit 0 with nothing on
/// stdout.
pub fn del_each(node: &Node, list: &Value, cid: &str, netns: &str, prev: Option<&Value>) {
    let n = list["plugins"].as_array().unwrap().len();
    for i in (0..n).rev() {
        let mut conf = Node::plugin_conf(list, i);
        if let Some(p) = prev {
            conf["prevResult"] = p.clone();
        }
        let plugin = conf["type"].as_str().unwrap().to_owned();
        let out = node
            .call(&plugin, "DEL")
            .container_id(cid)
            .env("CNI_NETNS", netns)
            .netconf(&conf)
            .unwrap()
            .run()
            .unwrap();
        ok(
            &out,
            &format!(
                "DEL {plugin} (CNI_NETNS={netns:?}, prevResult: {})",
                prev.is_some()
            ),
        );
        assert!(
            out.stdout.is_empty(),
            "DEL {plugin} printed:\n{}",
            out.describe()
        );
    }
}

/// C0's tern-tuning ran: the pod holds the configured keepalive values.
pub fn assert_tuned(pod: &TestNetns) {
    let want: Vec<String> = KEEPALIVE.iter().map(|(_, v)| (*v).to_owned()).collect();
    assert_eq!(
        keepalive_of(pod),
        want,
        "C0's keepalive not applied in the pod"
    );
}

/// The ifindex of `dev` in `ns`.
pub fn ifindex(ns: &TestNetns, dev: &str) -> u64 {
    link_of(ns, dev)["ifindex"].as_u64().unwrap()
}
