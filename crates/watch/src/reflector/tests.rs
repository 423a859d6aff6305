//! The reflector against a scripted API server: each test says what the server answers, in
//! order, and asserts the requests made and what the consumers received.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};

use serde_json::json;
use tern_kube::client::objects::ObjectPage;

use super::*;
use crate::source::Events;

/// One answer of the scripted server, in the order the reflector asks.
enum Answer {
    /// `connect()` fails (credentials unreadable).
    NoCredentials,
    /// A list page.
    Page(Result<ObjectPage, KubeError>),
    /// A watch: its events, then how it ends (`None`: the server closed it).
    Watch(Result<(Vec<ObjectEvent>, Option<KubeError>), KubeError>),
}

#[derive(Default)]
struct Server {
    script: Mutex<VecDeque<Answer>>,
    /// What was asked: `list <cont>`, `watch <rv>`, `connect`.
    asked: Mutex<Vec<String>>,
    done: AtomicBool,
    /// Read at each list page and noted in `asked` (`live N`).
    probe: Option<fn() -> usize>,
}

impl Server {
    fn next(&self, asked: String) -> Option<Answer> {
        self.asked.lock().unwrap().push(asked);
        let a = self.script.lock().unwrap().pop_front();
        if a.is_none() {
            self.done.store(true, Ordering::SeqCst);
        }
        a
    }
}

struct FakeApi(Arc<Server>);

struct FakeWatch(VecDeque<ObjectEvent>, Option<KubeError>);

impl Events for FakeWatch {
    fn next_event(&mut self) -> Result<Option<ObjectEvent>, KubeError> {
        match self.0.pop_front() {
            Some(e) => Ok(Some(e)),
            None => self.1.take().map_or(Ok(None), Err),
        }
    }
}

fn end() -> KubeError {
    KubeError::Connect("script ended".into())
}

impl Api for FakeApi {
    fn list_page(&self, _: &str, cont: Option<&str>) -> Result<ObjectPage, KubeError> {
        if let Some(probe) = self.0.probe {
            self.0
                .asked
                .lock()
                .unwrap()
                .push(format!("live {}", probe()));
        }
        match self.0.next(format!("list {}", cont.unwrap_or("-"))) {
            Some(Answer::Page(p)) => p,
            _ => Err(end()),
        }
    }

    fn watch(&self, _: &str, rv: &str) -> Result<Box<dyn Events + Send>, KubeError> {
        match self.0.next(format!("watch {rv}")) {
            Some(Answer::Watch(w)) => {
                let (events, ending) = w?;
                Ok(Box::new(FakeWatch(events.into(), ending)))
            }
            _ => Err(end()),
        }
    }
}

/// Stops once the script is used up; records each backoff's failure count and cause.
struct Ctl {
    server: Arc<Server>,
    backoffs: Vec<(u32, &'static str)>,
}

impl Control for Ctl {
    fn is_stopped(&self) -> bool {
        self.server.done.load(Ordering::SeqCst)
    }
    fn delay(&mut self, failures: &mut u32, e: &KubeError) -> Duration {
        *failures += 1;
        self.backoffs.push((*failures, e.cause_label()));
        Duration::ZERO
    }
    fn sleep(&self, _: Duration) -> bool {
        self.is_stopped()
    }
}

/// What a consumer received, one line each: `list first a=1 b=2`, `change a=3`, `change -a`.
#[derive(Clone, Default)]
struct Seen(Arc<Mutex<Vec<String>>>);

fn show(c: &Change<String>) -> String {
    match &c.new {
        Some(v) => format!("{}={v}", c.key),
        None => format!("-{}", c.key),
    }
}

impl Consumer<String> for Seen {
    fn replaced(&mut self, _: &Store<String>, r: &Relisted<String>) {
        let changes: Vec<String> = r.changes.iter().map(show).collect();
        let first = if r.first { "first " } else { "" };
        let line = format!("list {first}{}", changes.join(" "));
        self.0.lock().unwrap().push(line.trim().to_owned());
    }
    fn changed(&mut self, _: &Store<String>, c: &Change<String>) {
        self.0.lock().unwrap().push(format!("change {}", show(c)));
    }
}

/// The test kind: a ConfigMap-like object whose slim value is `data.v` (a string).
const THINGS: Kind<String> = Kind {
    collection: "/api/v1/things",
    label: "things",
    decode: |v| {
        v["data"]["v"]
            .as_str()
            .map(str::to_owned)
            .ok_or_else(|| "no data.v".to_owned())
    },
};

fn obj(name: &str, rv: &str, v: &str) -> Value {
    json!({"metadata": {"namespace": "x", "name": name, "resourceVersion": rv,
        "managedFields": [{"manager": rv}]}, "data": {"v": v}})
}

fn page(items: Vec<Value>, rv: &str, cont: Option<&str>) -> Answer {
    Answer::Page(Ok(ObjectPage {
        items,
        resource_version: rv.into(),
        cont: cont.map(str::to_owned),
    }))
}

fn watch(events: Vec<ObjectEvent>, ending: Option<KubeError>) -> Answer {
    Answer::Watch(Ok((events, ending)))
}

fn gone_status() -> KubeError {
    KubeError::UnexpectedStatus {
        code: 410,
        message: "too old".into(),
    }
}

/// What was asked, what the consumer saw, the backoffs (failures in a row, cause), the counters.
type Outcome = (
    Vec<String>,
    Vec<String>,
    Vec<(u32, &'static str)>,
    WatchStats,
);

/// Runs a reflector of [`THINGS`] over `script`; what was asked, what the consumer saw, the
/// backoffs and the counters.
fn run(script: Vec<Answer>) -> Outcome {
    let server = Arc::new(Server {
        script: Mutex::new(script.into()),
        ..Server::default()
    });
    let seen = Seen::default();
    let mut r = Reflector::new(THINGS, vec![Box::new(seen.clone())]);
    let s = Arc::clone(&server);
    let connect = move || -> Result<Box<dyn Api>, KubeError> {
        s.asked.lock().unwrap().push("connect".into());
        if matches!(
            s.script.lock().unwrap().front(),
            Some(Answer::NoCredentials)
        ) {
            s.script.lock().unwrap().pop_front();
            return Err(KubeError::Io {
                op: "read",
                path: "token".into(),
                source: std::io::Error::from(std::io::ErrorKind::NotFound),
            });
        }
        Ok(Box::new(FakeApi(Arc::clone(&s))))
    };
    let mut ctl = Ctl {
        server: Arc::clone(&server),
        backoffs: Vec::new(),
    };
    r.run(&connect, &mut ctl);
    let asked: Vec<String> = server
        .asked
        .lock()
        .unwrap()
        .iter()
        .filter(|a| *a != "connect")
        .cloned()
        .collect();
    let seen = seen.0.lock().unwrap().clone();
    let stats = r.stats().lock().unwrap().clone();
    (asked, seen, ctl.backoffs, stats)
}

#[test]
fn a_list_follows_continue_then_the_watch_starts_at_its_resource_version() {
    let (asked, seen, backoffs, stats) = run(vec![
        page(
            vec![obj("a", "3", "1"), obj("b", "4", "2")],
            "7",
            Some("t1"),
        ),
        page(vec![obj("c", "5", "3")], "7", None),
        watch(vec![ObjectEvent::Applied(obj("a", "8", "9"))], None),
    ]);
    assert_eq!(asked[..4], ["list -", "list t1", "watch 7", "watch 8"]);
    assert_eq!(seen, ["list first x/a=1 x/b=2 x/c=3", "change x/a=9"]);
    assert!(
        backoffs.iter().all(|(_, c)| *c == "connect"),
        "only the script's end"
    );
    assert_eq!((stats.lists, stats.objects, stats.synced), (1, 3, true));
}

#[test]
fn a_first_list_is_delivered_even_when_empty() {
    let (_, seen, _, _) = run(vec![page(vec![], "1", None)]);
    assert_eq!(seen, ["list first"]);
}

#[test]
fn a_broken_watch_resumes_from_the_last_bookmark_without_a_list() {
    let (asked, seen, backoffs, stats) = run(vec![
        page(vec![obj("a", "3", "1")], "5", None),
        watch(
            vec![
                ObjectEvent::Applied(obj("a", "6", "2")),
                ObjectEvent::Bookmark("12".into()),
            ],
            Some(KubeError::Timeout(Duration::from_secs(180))),
        ),
        watch(vec![ObjectEvent::Deleted(obj("a", "13", "2"))], None),
    ]);
    assert_eq!(asked[..4], ["list -", "watch 5", "watch 12", "watch 13"]);
    assert_eq!(seen, ["list first x/a=1", "change x/a=2", "change -x/a"]);
    assert_eq!(backoffs[0], (1, "timeout"));
    assert_eq!(stats.lists, 1, "no relist for a broken watch");
    assert_eq!(stats.events["bookmark"], 1);
}

#[test]
fn gone_as_an_event_or_a_status_relists_and_delivers_only_what_changed() {
    let (asked, seen, backoffs, stats) = run(vec![
        page(vec![obj("a", "3", "1"), obj("b", "3", "2")], "5", None),
        watch(vec![ObjectEvent::Gone], None),
        // The same objects at newer resourceVersions: nothing delivered.
        page(vec![obj("a", "8", "1"), obj("b", "9", "2")], "9", None),
        Answer::Watch(Err(gone_status())),
        // b changed, a went, c came.
        page(vec![obj("b", "20", "5"), obj("c", "21", "6")], "21", None),
    ]);
    assert_eq!(
        asked[..6],
        ["list -", "watch 5", "list -", "watch 9", "list -", "watch 21"]
    );
    assert_eq!(
        seen,
        ["list first x/a=1 x/b=2", "list -x/a x/b=5 x/c=6"],
        "the unchanged relist delivered nothing"
    );
    assert!(
        backoffs.iter().all(|(_, c)| *c == "connect"),
        "410 is no failure"
    );
    assert_eq!((stats.lists, stats.events["gone"]), (3, 2));
    assert_eq!(stats.unchanged, 2);
}

#[test]
fn events_that_change_no_slim_field_are_dropped_and_counted() {
    let (_, seen, _, stats) = run(vec![
        page(vec![obj("a", "3", "1")], "5", None),
        watch(
            vec![
                // Only resourceVersion and managedFields differ.
                ObjectEvent::Applied(obj("a", "6", "1")),
                ObjectEvent::Deleted(obj("nothing", "7", "1")),
                ObjectEvent::Applied(json!({"metadata": {"namespace": "x", "name": "a",
                    "resourceVersion": "8"}})),
                ObjectEvent::Applied(obj("a", "9", "4")),
            ],
            None,
        ),
    ]);
    assert_eq!(seen, ["list first x/a=1", "change x/a=4"]);
    assert_eq!((stats.unchanged, stats.undecodable), (2, 1));
}

#[test]
fn credential_errors_back_off_growing_then_reset_after_a_list() {
    let (asked, seen, backoffs, _) = run(vec![
        Answer::NoCredentials,
        Answer::NoCredentials,
        page(vec![], "1", None),
        Answer::Watch(Err(KubeError::Unauthorized)),
    ]);
    assert_eq!(asked[..2], ["list -", "watch 1"]);
    assert_eq!(seen, ["list first"]);
    assert_eq!(backoffs[..3], [(1, "io"), (2, "io"), (1, "unauthorized")]);
}

#[test]
fn an_expired_continue_token_lists_again_from_the_first_page() {
    let (asked, seen, backoffs, stats) = run(vec![
        page(vec![obj("a", "3", "1")], "7", Some("t1")),
        Answer::Page(Err(gone_status())),
        page(vec![obj("a", "3", "1"), obj("b", "9", "2")], "9", None),
    ]);
    assert_eq!(asked[..4], ["list -", "list t1", "list -", "watch 9"]);
    assert_eq!(seen, ["list first x/a=1 x/b=2"], "no half list delivered");
    assert!(backoffs.iter().all(|(_, c)| *c == "connect"));
    assert_eq!(stats.lists, 1);
}

mod one_copy;
