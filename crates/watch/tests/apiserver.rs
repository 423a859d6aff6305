//! The reflector over real HTTP: tern's client against the API server stand-in
//! (`tests/apiserver`), on Nodes: a list of two pages, events, an unchanged write dropped, a cut
//! watch resumed without a list, and a compacted history (410 as an `ERROR` event) listed again.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tern_apiserver::ApiServer;
use tern_kube::client::nodes::NodeEntry;
use tern_kube::kubeconfig::{ClientConfig, TlsTrust};
use tern_kube::token::BearerToken;
use tern_kube::{Client, KubeError};
use tern_watch::kinds::NODES;
use tern_watch::{
    Api, Change, ClientApi, Consumer, Control, Deadlines, Reflector, Relisted, Store,
};

/// What the consumer saw: `list first 600`, `list 3`, `change n-new`.
#[derive(Clone, Default)]
struct Seen(Arc<Mutex<Vec<String>>>);

impl Consumer<NodeEntry> for Seen {
    fn replaced(&mut self, store: &Store<NodeEntry>, r: &Relisted<NodeEntry>) {
        let first = if r.first { "first " } else { "" };
        let line = format!("list {first}{} of {}", r.changes.len(), store.len());
        self.0.lock().unwrap().push(line);
    }
    fn changed(&mut self, _: &Store<NodeEntry>, c: &Change<NodeEntry>) {
        self.0.lock().unwrap().push(format!("change {}", c.key));
    }
}

struct Ctl(Arc<AtomicBool>);

impl Control for Ctl {
    fn is_stopped(&self) -> bool {
        self.0.load(Ordering::SeqCst)
    }
    fn delay(&mut self, failures: &mut u32, _: &KubeError) -> Duration {
        *failures += 1;
        Duration::from_millis(50)
    }
    fn sleep(&self, d: Duration) -> bool {
        std::thread::sleep(d);
        self.is_stopped()
    }
}

fn wait_for(what: &str, cond: impl Fn() -> bool) {
    let t = Instant::now();
    while !cond() {
        assert!(t.elapsed() < Duration::from_secs(20), "timed out: {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn pages_events_resume_and_relist_over_http() {
    let s = Arc::new(ApiServer::start().unwrap());
    s.set_bookmark_interval(Duration::from_secs(60));
    for i in 0..600 {
        s.set_node(
            &format!("n{i:03}"),
            &[&format!("10.{}.{}.0/24", i / 256, i % 256)],
        );
    }
    let token = s.issue_token("tern", "tern-agent", 3600);
    let cfg = ClientConfig {
        source: PathBuf::from("test"),
        server: s.url(),
        trust: TlsTrust::CaPem(s.ca_pem().as_bytes().to_vec()),
        tls_server_name: None,
        token: BearerToken::new(token),
    };
    let connect = move || -> Result<Box<dyn Api>, KubeError> {
        Ok(Box::new(ClientApi {
            client: Client::new(&cfg)?,
            deadlines: Deadlines {
                request: Duration::from_secs(10),
                watch: Duration::from_secs(60),
                idle: Duration::from_secs(90),
            },
        }))
    };
    let seen = Seen::default();
    let mut reflector = Reflector::new(NODES, vec![Box::new(seen.clone())]);
    let stats = reflector.stats();
    let stop = Arc::new(AtomicBool::new(false));
    let mut ctl = Ctl(Arc::clone(&stop));
    let thread = std::thread::spawn(move || reflector.run(&connect, &mut ctl));
    let lines = || seen.0.lock().unwrap().clone();
    let watches = || stats.lock().unwrap().watches;

    wait_for("the first list", || !lines().is_empty() && watches() == 1);
    assert_eq!(lines(), ["list first 600 of 600"]);
    assert_eq!(s.count("/api/v1/nodes"), 3, "two pages and a watch");
    s.set_node("n-new", &["10.9.0.0/24"]);
    wait_for("the new node", || lines().len() == 2);
    assert_eq!(lines()[1], "change n-new");
    // The same node written again (a new resourceVersion, nothing the routes read): dropped.
    s.set_node("n-new", &["10.9.0.0/24"]);
    wait_for("the unchanged event", || {
        stats.lock().unwrap().unchanged == 1
    });
    // A cut watch resumes where it was, without a list.
    s.cut_node_watches();
    wait_for("a second watch", || watches() == 2);
    assert_eq!(stats.lock().unwrap().lists, 1);
    // History compacted behind the watch: 410 as an ERROR event, one list, nothing delivered
    // (nothing changed); then a change arrives on the new watch.
    s.compact_node_history();
    s.cut_node_watches();
    wait_for("the relist", || {
        stats.lock().unwrap().lists == 2 && watches() == 4
    });
    assert_eq!(stats.lock().unwrap().events.get("gone"), Some(&1));
    assert_eq!(lines().len(), 2, "an unchanged relist delivers nothing");
    s.delete_node("n000");
    wait_for("the delete", || lines().len() == 3);
    assert_eq!(lines()[2], "change n000");
    stop.store(true, Ordering::SeqCst);
    s.cut_node_watches();
    thread.join().unwrap();
}
