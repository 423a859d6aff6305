//! Unit tests of the exec helpers: deadlines, environment, output parsing.

use super::*;

#[test]
fn conflist_shape() {
    let c = conflist("n", "1.0.0", vec![json!({"type": "ptp"})]);
    assert_eq!(c["name"], "n");
    assert_eq!(c["cniVersion"], "1.0.0");
    assert_eq!(c["plugins"][0]["type"], "ptp");
}

#[test]
fn unique_ids_differ() {
    assert_ne!(unique_container_id(), unique_container_id());
}

#[test]
fn plugin_call_env_set_and_unset() {
    let call = PluginCall::new("/bin/sh", "ADD")
        .unset("CNI_IFNAME")
        .env("CNI_ARGS", "A=1")
        .netns("/var/run/netns/x");
    let cmd = call.command();
    let envs: BTreeMap<_, _> = cmd
        .get_envs()
        .map(|(k, v)| (k.to_os_string(), v.map(|v| v.to_os_string())))
        .collect();
    assert_eq!(
        envs.get(&OsString::from("CNI_COMMAND")),
        Some(&Some("ADD".into()))
    );
    assert_eq!(
        envs.get(&OsString::from("CNI_ARGS")),
        Some(&Some("A=1".into()))
    );
    assert!(!envs.contains_key(&OsString::from("CNI_IFNAME")));
}

#[test]
fn run_passes_stdin_env_and_parses_json() {
    // /bin/sh stands in for a plugin: echoes the env and stdin back as JSON.
    let out = PluginCall::new("/bin/sh", "VERSION")
        .env("X", "y")
        .stdin(b"echo \"{\\\"cmd\\\":\\\"$CNI_COMMAND\\\",\\\"x\\\":\\\"$X\\\"}\"; echo oops >&2; exit 3".to_vec())
        .run()
        .unwrap();
    assert_eq!(out.status.code(), Some(3));
    assert_eq!(out.json, Some(json!({"cmd": "VERSION", "x": "y"})));
    assert_eq!(out.stderr, "oops\n");
}

#[test]
fn run_times_out() {
    let err = PluginCall::new("/bin/sh", "ADD")
        .stdin(b"sleep 5".to_vec())
        .timeout(Duration::from_millis(200))
        .run()
        .unwrap_err();
    assert!(matches!(err, ExecError::Timeout { .. }), "{err}");
}

#[test]
fn missing_binary_is_spawn_error() {
    let err = PluginCall::new("/nonexistent/plugin", "ADD")
        .run()
        .unwrap_err();
    assert!(matches!(err, ExecError::Spawn { .. }), "{err}");
}
