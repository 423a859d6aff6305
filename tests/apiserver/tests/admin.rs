//! The `tern-apiserver` process and its loopback admin endpoint.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Command, Stdio};

fn admin(base: &str, method: &str, path: &str) -> (u16, String) {
    let addr = base.trim_start_matches("http://");
    let mut c = TcpStream::connect(addr).unwrap();
    write!(c, "{method} {path} HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
    let mut s = String::new();
    c.read_to_string(&mut s).unwrap();
    let code = s.split_whitespace().nth(1).unwrap().parse().unwrap();
    (code, s.split_once("\r\n\r\n").unwrap().1.to_owned())
}

#[test]
fn process_serves_tls_and_admin_controls_it() {
    let dir = tempfile::tempdir().unwrap();
    let ca = dir.path().join("ca.pem");
    let mut child = Command::new(env!("CARGO_BIN_EXE_tern-apiserver"))
        .args(["--ca-out", ca.to_str().unwrap()])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let url = lines
        .next()
        .unwrap()
        .unwrap()
        .strip_prefix("url=")
        .unwrap()
        .to_owned();
    let adm = lines
        .next()
        .unwrap()
        .unwrap()
        .strip_prefix("admin=")
        .unwrap()
        .to_owned();
    assert!(url.starts_with("https://127.0.0.1:"));
    assert!(std::fs::read_to_string(&ca)
        .unwrap()
        .contains("BEGIN CERTIFICATE"));
    assert_eq!(
        admin(&adm, "POST", "/node?name=n1&podCIDRs=10.1.0.0/24").0,
        200
    );
    let (code, token) = admin(&adm, "POST", "/token?ns=a&name=b&seconds=600");
    assert_eq!(code, 200);
    assert_eq!(token.split('.').count(), 3, "a JWT");
    assert_eq!(admin(&adm, "POST", "/fault?code=503").0, 200);
    assert_eq!(admin(&adm, "POST", "/fault?clear=1").0, 200);
    assert_eq!(admin(&adm, "GET", "/counts"), (200, "{}".to_owned()));
    assert_eq!(admin(&adm, "POST", "/nope").0, 404);
    child.kill().unwrap();
    child.wait().unwrap();
}
