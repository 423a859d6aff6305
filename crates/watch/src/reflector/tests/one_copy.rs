//! A relist's memory: objects equal to the stored ones are not held twice while the list reads
//! its pages (a slim type that counts its live values).

use std::sync::atomic::{AtomicUsize, Ordering};

use super::*;

/// Objects of [`COUNTED`] alive now: decoded and not yet dropped.
static LIVE: AtomicUsize = AtomicUsize::new(0);

/// A slim value that counts itself in [`LIVE`].
#[derive(Debug, PartialEq)]
struct Counted(String);

impl Drop for Counted {
    fn drop(&mut self) {
        LIVE.fetch_sub(1, Ordering::SeqCst);
    }
}

const COUNTED: Kind<Counted> = Kind {
    collection: "/api/v1/counted",
    label: "counted",
    decode: |v| {
        let s = v["data"]["v"].as_str().ok_or("no data.v")?;
        LIVE.fetch_add(1, Ordering::SeqCst);
        Ok(Counted(s.to_owned()))
    },
};

#[test]
fn a_relist_of_unchanged_objects_holds_one_copy_of_each_while_it_reads_its_pages() {
    let two_pages = || {
        [
            page(
                vec![obj("a", "3", "1"), obj("b", "4", "2")],
                "7",
                Some("t1"),
            ),
            page(vec![obj("c", "5", "3")], "7", None),
        ]
    };
    let mut script: Vec<Answer> = two_pages().into();
    script.push(watch(vec![ObjectEvent::Gone], None));
    script.extend(two_pages());
    let server = Arc::new(Server {
        script: Mutex::new(script.into()),
        probe: Some(|| LIVE.load(Ordering::SeqCst)),
        ..Server::default()
    });
    let s = Arc::clone(&server);
    let connect =
        move || -> Result<Box<dyn Api>, KubeError> { Ok(Box::new(FakeApi(Arc::clone(&s)))) };
    let mut ctl = Ctl {
        server: Arc::clone(&server),
        backoffs: Vec::new(),
    };
    let mut r = Reflector::new(COUNTED, Vec::new());
    r.run(&connect, &mut ctl);
    let asked = server.asked.lock().unwrap().clone();
    let at = |i: usize| {
        asked
            .iter()
            .filter(|a| a.starts_with("live"))
            .nth(i)
            .cloned()
    };
    // The first list: nothing stored, page 1's two objects held while page 2 is read.
    assert_eq!(
        (at(0), at(1)),
        (Some("live 0".into()), Some("live 2".into()))
    );
    // The relist: the three stored; page 1's two equal to them are dropped as read.
    assert_eq!(
        (at(2), at(3)),
        (Some("live 3".into()), Some("live 3".into())),
        "{asked:?}"
    );
    assert_eq!(r.stats().lock().unwrap().lists, 2);
    drop(r);
    assert_eq!(LIVE.load(Ordering::SeqCst), 0);
}
