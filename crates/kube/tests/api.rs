//! The API client against the stand-in: status codes, Status bodies, deadlines, TLS trust.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::PathBuf;
use std::time::{Duration, Instant};

use tern_apiserver::{ApiServer, Fault};
use tern_kube::kubeconfig::{self, ClientConfig, TlsTrust};
use tern_kube::{BearerToken, BoundObjectReference, Client, KubeError, TokenRequestSpec};

const T: Duration = Duration::from_secs(5);

fn client(s: &ApiServer, token: &str) -> Client {
    Client::new(&ClientConfig {
        source: PathBuf::from("test"),
        server: s.url(),
        trust: TlsTrust::CaPem(s.ca_pem().as_bytes().to_vec()),
        tls_server_name: None,
        token: BearerToken::new(token),
    })
    .unwrap()
}

fn agent_client(s: &ApiServer) -> Client {
    let t = s.issue_token("tern", "tern-agent", 3600);
    s.add_service_account("tern", "tern-cni");
    client(s, &t)
}

fn spec(secs: Option<i64>) -> TokenRequestSpec {
    TokenRequestSpec {
        expiration_seconds: secs,
        ..TokenRequestSpec::default()
    }
}

#[test]
fn token_request_defaults_and_returned_expiry() {
    let s = ApiServer::start().unwrap();
    let c = agent_client(&s);
    let st = c.create_token("tern", "tern-cni", &spec(None), T).unwrap();
    let now = s.now();
    assert!(
        (st.expiration_timestamp - (now + 3600)).abs() <= 2,
        "default lifetime is 3600 s"
    );
    assert_eq!(st.granted_seconds, Some(3600));
    let exp = st.token.expiry().unwrap().unwrap();
    assert!((exp - st.expiration_timestamp).abs() <= 1);
    assert!(st.warnings.is_empty());
    assert_eq!(
        s.count("/api/v1/namespaces/tern/serviceaccounts/tern-cni/token"),
        1
    );
    // The new token authenticates.
    s.set_pod("default", "web-0", "uid-1", &[], false);
    assert_eq!(
        client(&s, st.token.expose())
            .get_pod("default", "web-0", T)
            .unwrap()
            .uid,
        "uid-1"
    );
}

#[test]
fn token_request_clamped_with_warning() {
    let s = ApiServer::start().unwrap();
    s.set_max_token_expiration(Some(3600));
    let c = agent_client(&s);
    let st = c
        .create_token("tern", "tern-cni", &spec(Some(86_400)), T)
        .unwrap();
    assert_eq!(st.granted_seconds, Some(3600));
    assert!((st.expiration_timestamp - (s.now() + 3600)).abs() <= 2);
    assert_eq!(
        st.warnings,
        vec![
            "299 - \"requested expiration of 86400 seconds shortened to 3600 seconds\"".to_string()
        ]
    );
}

#[test]
fn token_request_validation_and_missing_sa() {
    let s = ApiServer::start().unwrap();
    let c = agent_client(&s);
    match c.create_token("tern", "tern-cni", &spec(Some(599)), T) {
        Err(KubeError::Unprocessable { message }) => assert_eq!(
            message,
            "TokenRequest.authentication.k8s.io \"\" is invalid: spec.expirationSeconds: Invalid value: 599: may not specify a duration less than 10 minutes"
        ),
        other => panic!("{other:?}"),
    }
    match c.create_token("tern", "nobody", &spec(None), T) {
        Err(KubeError::NotFound { message }) => {
            assert_eq!(message, "serviceaccounts \"nobody\" not found")
        }
        other => panic!("{other:?}"),
    }
    assert!(c
        .create_token("tern", "tern-cni", &spec(Some(600)), T)
        .is_ok());
}

#[test]
fn bound_3607_gets_the_one_year_extension() {
    let s = ApiServer::start().unwrap();
    let c = agent_client(&s);
    s.set_pod("tern", "agent-x", "pod-uid", &[], false);
    let pod_ref = BoundObjectReference {
        kind: "Pod".into(),
        api_version: "v1".into(),
        name: "agent-x".into(),
        uid: "pod-uid".into(),
    };
    let bound = Some(pod_ref.clone());
    let st = c
        .create_token(
            "tern",
            "tern-cni",
            &TokenRequestSpec {
                expiration_seconds: Some(3607),
                bound_object_ref: bound.clone(),
                ..Default::default()
            },
            T,
        )
        .unwrap();
    let exp = st.token.expiry().unwrap().unwrap();
    assert!(
        exp - st.expiration_timestamp > 300 * 86_400,
        "JWT exp is a year out while the status says 3607 s"
    );
    let wrong = BoundObjectReference {
        uid: "other".into(),
        ..pod_ref
    };
    assert!(matches!(
        c.create_token(
            "tern",
            "tern-cni",
            &TokenRequestSpec {
                bound_object_ref: Some(wrong),
                ..Default::default()
            },
            T
        ),
        Err(KubeError::Conflict { .. })
    ));
}

#[test]
fn get_pod_and_node_and_their_errors() {
    let s = ApiServer::start().unwrap();
    let tok = s.issue_token("kube-system", "cni", 3600);
    let c = client(&s, &tok);
    s.set_pod(
        "default",
        "web-0",
        "u-1",
        &[("tern.io/ip-addrs", "[\"10.99.0.7\"]")],
        false,
    );
    let p = c.get_pod("default", "web-0", T).unwrap();
    assert_eq!(
        (p.uid.as_str(), p.deletion_timestamp.is_none()),
        ("u-1", true)
    );
    assert_eq!(
        p.annotations.get("tern.io/ip-addrs").map(String::as_str),
        Some("[\"10.99.0.7\"]")
    );
    match c.get_pod("default", "web-1", T) {
        Err(KubeError::NotFound { message }) => assert_eq!(message, "pods \"web-1\" not found"),
        other => panic!("{other:?}"),
    }
    s.forbid("system:serviceaccount:kube-system:cni", "get", "pods");
    match c.get_pod("default", "web-0", T) {
        Err(KubeError::Forbidden { message }) => assert_eq!(
            message,
            "pods \"web-0\" is forbidden: User \"system:serviceaccount:kube-system:cni\" cannot get resource \"pods\" in API group \"\" in the namespace \"default\""
        ),
        other => panic!("{other:?}"),
    }
    s.set_node("node-1", &["10.99.0.0/24", "fd00:99::/64"]);
    assert_eq!(
        c.get_node("node-1", T).unwrap().pod_cidrs,
        vec!["10.99.0.0/24", "fd00:99::/64"]
    );
    // No token at all is anonymous: 403, not 401.
    assert!(matches!(
        client(&s, "").get_node("node-1", T),
        Err(KubeError::Forbidden { .. })
    ));
}

#[test]
fn expiry_leeway_and_key_rotation_give_401() {
    let s = ApiServer::start().unwrap();
    s.set_node("n", &[]);
    let tok = s.issue_token("kube-system", "cni", 600);
    let c = client(&s, &tok);
    s.advance_clock(600 + 30);
    assert!(c.get_node("n", T).is_ok(), "within the 60 s leeway");
    s.advance_clock(40);
    assert!(matches!(c.get_node("n", T), Err(KubeError::Unauthorized)));
    let fresh = s.issue_token("kube-system", "cni", 600);
    assert!(client(&s, &fresh).get_node("n", T).is_ok());
    s.rotate_signing_key();
    assert!(matches!(
        client(&s, &fresh).get_node("n", T),
        Err(KubeError::Unauthorized)
    ));
    assert!(matches!(
        client(&s, "garbage").get_node("n", T),
        Err(KubeError::Unauthorized)
    ));
}

#[test]
fn faults_429_503_and_stall_deadline() {
    let s = ApiServer::start().unwrap();
    s.set_node("n", &[]);
    let c = client(&s, &s.issue_token("a", "b", 3600));
    s.set_fault(Some(Fault::TooManyRequests { retry_after: 7 }));
    let e = c.get_node("n", T).unwrap_err();
    assert!(
        matches!(
            e,
            KubeError::TooManyRequests {
                retry_after: Some(7)
            }
        ),
        "{e:?}"
    );
    s.set_fault(Some(Fault::Status(503)));
    let e = c.get_node("n", T).unwrap_err();
    assert!(
        matches!(
            e,
            KubeError::ServerError {
                code: 503,
                retry_after: Some(1),
                ..
            }
        ),
        "{e:?}"
    );
    assert!(e.to_string().contains("apiserver is shutting down"));
    s.set_fault(Some(Fault::Stall));
    let start = Instant::now();
    let e = c.get_node("n", Duration::from_millis(400)).unwrap_err();
    let took = start.elapsed();
    assert!(matches!(e, KubeError::Timeout(_)), "{e:?}");
    assert!(
        took >= Duration::from_millis(390) && took < Duration::from_millis(1500),
        "{took:?}"
    );
    s.set_fault(None);
    assert!(c.get_node("n", T).is_ok());
    assert_eq!(s.count("/api/v1/nodes/n"), 4);
}

#[test]
fn untrusted_ca_is_a_tls_error_and_tokens_never_leak() {
    let s = ApiServer::start().unwrap();
    let other = ApiServer::start().unwrap();
    let tok = s.issue_token("a", "b", 3600);
    let c = Client::new(&ClientConfig {
        source: PathBuf::from("x"),
        server: s.url(),
        trust: TlsTrust::CaPem(other.ca_pem().as_bytes().to_vec()),
        tls_server_name: None,
        token: BearerToken::new(tok.clone()),
    })
    .unwrap();
    let e = c.get_node("n", T).unwrap_err();
    assert!(matches!(e, KubeError::Tls(_)), "{e:?}");
    assert!(!format!("{e} {e:?} {c:?}").contains(&tok));
    drop(s);
    let e = client(&other, &tok).get_node("n", Duration::from_millis(300));
    assert!(e.is_err());
}

#[test]
fn kubeconfig_file_round_trip_against_the_server() {
    let s = ApiServer::start().unwrap();
    s.set_node("n", &["10.1.0.0/24"]);
    let d = tempfile::tempdir().unwrap();
    let kc = d.path().join("kc");
    let tok = BearerToken::new(s.issue_token("a", "b", 3600));
    tern_kube::write_atomic(
        &kc,
        kubeconfig::render(&s.url(), s.ca_pem().as_bytes(), &tok).as_bytes(),
        0o600,
    )
    .unwrap();
    let cfg = kubeconfig::load(&kc).unwrap();
    assert_eq!(
        Client::new(&cfg)
            .unwrap()
            .get_node("n", T)
            .unwrap()
            .pod_cidrs,
        vec!["10.1.0.0/24"]
    );
}

#[test]
fn an_event_is_created_once_and_a_second_writer_gets_false() {
    let s = ApiServer::start().unwrap();
    let c = agent_client(&s);
    let e = serde_json::json!({"apiVersion": "v1", "kind": "Event",
        "metadata": {"name": "web.tern-policyunreadable.0a1b2c3d", "namespace": "team-a"},
        "involvedObject": {"kind": "NetworkPolicy", "namespace": "team-a", "name": "web"},
        "type": "Warning", "reason": "PolicyUnreadable", "message": "m"});
    assert!(c.create_event("team-a", &e, T).unwrap(), "the first create");
    assert!(
        !c.create_event("team-a", &e, T).unwrap(),
        "409: another agent was first"
    );
    assert_eq!(s.events().len(), 1);
    s.forbid("system:serviceaccount:tern:tern-agent", "create", "events");
    match c.create_event("team-a", &e, T) {
        Err(KubeError::Forbidden { .. }) => {}
        other => panic!("expected Forbidden, got {other:?}"),
    }
}
