//! The phase trace's line format, which `tern-bench --breakdown` parses: its own process (the
//! trace is read from the environment once per process).

use tern_node::phase;

#[test]
fn one_line_per_process_with_marks_in_order() {
    let dir = std::env::temp_dir().join(format!("tern-phase-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("trace");
    // Off until init has read the variable: marks record nothing and finish writes nothing.
    phase::mark("before-init");
    phase::finish("ADD");
    assert!(!phase::on());
    assert!(!file.exists());

    std::env::set_var(phase::ENV, &file);
    phase::init();
    assert!(phase::on());
    phase::mark("netconf");
    phase::mark("nl:RTM_NEWLINK");
    phase::finish("ADD");

    let text = std::fs::read_to_string(&file).unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 1, "{text}");
    let f: Vec<&str> = lines[0].split(' ').collect();
    assert_eq!(f[1], "ADD");
    assert_eq!(f[2], format!("pid={}", std::process::id()));
    let marks: Vec<(&str, u64)> = f[3..]
        .iter()
        .map(|kv| {
            let (k, v) = kv.rsplit_once('=').unwrap();
            (k, v.parse().unwrap())
        })
        .collect();
    let names: Vec<&str> = marks.iter().map(|m| m.0).collect();
    assert_eq!(names, ["main", "netconf", "nl:RTM_NEWLINK"], "{text}");
    assert!(marks.windows(2).all(|w| w[0].1 <= w[1].1), "{text}");
    assert!(marks[0].1 > 0);
}
