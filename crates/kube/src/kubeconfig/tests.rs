//! Unit tests of kubeconfig parsing, rendering and the regular-file reads.

use super::*;

fn p() -> PathBuf {
    PathBuf::from("/nonexistent/dir/kc")
}

#[test]
fn only_regular_files_are_read_and_a_fifo_is_never_waited_on() {
    let dir = std::env::temp_dir().join(format!("tern-kc-regular-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("kubeconfig");
    std::fs::write(&file, "apiVersion: v1\n").unwrap();
    assert_eq!(read_regular_file(&file).unwrap(), b"apiVersion: v1\n");
    let fifo = dir.join("fifo");
    let made = std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap();
    assert!(made.success());
    for (p, what) in [
        (fifo.as_path(), "a FIFO"),
        (dir.as_path(), "a directory"),
        (Path::new("/dev/null"), "a device"),
    ] {
        let e = read_regular_file(p).unwrap_err().to_string();
        assert!(e.contains(what), "{}: {e}", p.display());
    }
    // The CA file and the tokenFile a kubeconfig names go through the same reader.
    let kc = dir.join("kc-token-fifo");
    std::fs::write(
        &kc,
        format!(
            "clusters: [{{name: c, cluster: {{server: 'https://10.0.0.1'}}}}]\n\
             users: [{{name: u, user: {{tokenFile: {}}}}}]\n\
             contexts: [{{name: x, context: {{cluster: c, user: u}}}}]\ncurrent-context: x\n",
            fifo.display()
        ),
    )
    .unwrap();
    let e = load(&kc).unwrap_err().to_string();
    assert!(e.contains("a FIFO"), "{e}");
    let e = load(&fifo).unwrap_err().to_string();
    assert!(e.contains("a FIFO"), "{e}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_kubeconfig_without_end_is_refused_after_a_mebibyte() {
    // A device that never ends is not even opened for reading past the type check.
    let e = load(Path::new("/dev/zero")).unwrap_err().to_string();
    assert!(e.contains("a device"), "{e}");
    let big = std::env::temp_dir().join(format!("tern-kc-big-{}", std::process::id()));
    let too_long = usize::try_from(MAX_KUBECONFIG).unwrap() + 1;
    std::fs::write(&big, vec![b'#'; too_long]).unwrap();
    let e = load(&big).unwrap_err().to_string();
    std::fs::remove_file(&big).unwrap();
    assert!(e.contains("larger than"), "{e}");
}

#[test]
fn render_round_trips() {
    let t = BearerToken::new("aaa.bbb.ccc");
    let text = render(
        "https://10.0.0.1:6443",
        b"-----BEGIN CERTIFICATE-----\nx\n",
        &t,
    );
    let c = parse(&text, &p()).unwrap();
    assert_eq!(c.server, "https://10.0.0.1:6443");
    assert_eq!(c.token, t);
    assert_eq!(
        c.trust,
        TlsTrust::CaPem(b"-----BEGIN CERTIFICATE-----\nx\n".to_vec())
    );
}

/// Found by the kubeconfig fuzz target: JSON quoting leaves DEL, the C1 controls and the
/// Unicode line separators raw, which YAML refuses ("control characters are not allowed") or
/// folds into a space, so the rendered file did not parse back to the same token.
#[test]
fn render_round_trips_characters_json_leaves_raw() {
    for odd in [
        "\u{7f}", "\u{85}", "\u{9f}", "\u{2028}", "\u{2029}", "\u{feff}", "\u{fffe}",
    ] {
        let t = BearerToken::new(format!("a{odd}b\u{0}c\td"));
        let server = format!("https://h{odd}:6443");
        let text = render(&server, b"PEM", &t);
        let c = parse(&text, &p()).unwrap_or_else(|e| panic!("{odd:?}: {e}\n{text}"));
        assert_eq!(c.token, t, "{odd:?}");
        assert_eq!(c.server, server, "{odd:?}");
    }
}

#[test]
fn parses_json_and_token_file_relative() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("tok"), "file-token\n").unwrap();
    std::fs::write(dir.path().join("ca.pem"), "PEM").unwrap();
    let kc = dir.path().join("kc.json");
    let json = r#"{"apiVersion":"v1","kind":"Config","current-context":"c",
      "clusters":[{"name":"k","cluster":{"server":"https://h:1/","certificate-authority":"ca.pem"}}],
      "users":[{"name":"u","user":{"token":"inline","tokenFile":"tok"}}],
      "contexts":[{"name":"c","context":{"cluster":"k","user":"u"}}]}"#;
    std::fs::write(&kc, json).unwrap();
    let c = load(&kc).unwrap();
    assert_eq!(c.token.expose(), "file-token");
    assert_eq!(c.server, "https://h:1");
    assert_eq!(c.trust, TlsTrust::CaPem(b"PEM".to_vec()));
}

#[test]
fn clear_errors_naming_the_path() {
    let cases = [
        ("", "no current-context"),
        ("current-context: x\ncontexts: []\n", "context \"x\" does not exist"),
        ("{{{", "not valid YAML"),
        (
            "current-context: c\ncontexts: [{name: c, context: {cluster: k, user: u}}]\nclusters: [{name: k, cluster: {server: 'http://h'}}]\nusers: [{name: u, user: {token: t}}]\n",
            "not https",
        ),
        (
            "current-context: c\ncontexts: [{name: c, context: {cluster: k, user: u}}]\nclusters: [{name: k, cluster: {server: 'https://h', certificate-authority-data: UEVN, insecure-skip-tls-verify: true}}]\nusers: [{name: u, user: {token: t}}]\n",
            "insecure flag is not allowed",
        ),
        (
            "current-context: c\ncontexts: [{name: c, context: {cluster: k, user: u}}]\nclusters: [{name: k, cluster: {server: 'https://h', insecure-skip-tls-verify: true}}]\nusers: [{name: u, user: {}}]\n",
            "has no token",
        ),
    ];
    for (text, want) in cases {
        let e = parse(text, &p()).unwrap_err().to_string();
        assert!(e.contains(want) && e.contains("/nonexistent/dir/kc"), "{e}");
    }
    let e = load(Path::new("/nonexistent/kc")).unwrap_err().to_string();
    assert!(
        e.contains("/nonexistent/kc") && e.contains("cannot read"),
        "{e}"
    );
}
