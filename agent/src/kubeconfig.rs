//! The kubeconfig the agent writes for the plugins: client-go's schema
//! (`client-go/tools/clientcmd/api/v1/types.go`) as typed structs, serialised by serde_yaml_ng.
//!
//! Invariant: the text holds the token, so it only ever goes to [`crate::mint::MintedKubeconfig`]
//! and from there to the file; nothing here is `Debug`.

use base64::Engine as _;
use serde::Serialize;
use tern_kube::BearerToken;

/// The comment the file opens with.
const HEADER: &str =
    "# Written by tern-agent and replaced atomically on every token refresh; do not edit.\n";

#[derive(Serialize)]
#[serde(rename_all = "kebab-case")]
struct Config<'a> {
    #[serde(rename = "apiVersion")]
    api_version: &'static str,
    kind: &'static str,
    clusters: [Named<ClusterEntry<'a>>; 1],
    users: [Named<UserEntry<'a>>; 1],
    contexts: [Named<ContextEntry>; 1],
    current_context: &'static str,
}

#[derive(Serialize)]
struct Named<T> {
    name: &'static str,
    #[serde(flatten)]
    item: T,
}

#[derive(Serialize)]
struct ClusterEntry<'a> {
    cluster: Cluster<'a>,
}

#[derive(Serialize)]
#[serde(rename_all = "kebab-case")]
struct Cluster<'a> {
    server: &'a str,
    certificate_authority_data: String,
}

#[derive(Serialize)]
struct UserEntry<'a> {
    user: User<'a>,
}

#[derive(Serialize)]
struct User<'a> {
    token: &'a str,
}

#[derive(Serialize)]
struct ContextEntry {
    context: Context,
}

#[derive(Serialize)]
struct Context {
    cluster: &'static str,
    user: &'static str,
}

/// Renders the kubeconfig: one cluster (`server`, `certificate-authority-data` = standard base64
/// of `ca_pem`), one user (`token`), one context, made current.
///
/// # Errors
/// The YAML serialiser failed (it does not for these types; kept rather than panicking).
pub fn render(server: &str, ca_pem: &[u8], token: &BearerToken) -> Result<String, String> {
    let config = Config {
        api_version: "v1",
        kind: "Config",
        clusters: [Named {
            name: "kubernetes",
            item: ClusterEntry {
                cluster: Cluster {
                    server,
                    certificate_authority_data: base64::engine::general_purpose::STANDARD
                        .encode(ca_pem),
                },
            },
        }],
        users: [Named {
            name: "tern-cni",
            item: UserEntry {
                user: User {
                    token: token.expose(),
                },
            },
        }],
        contexts: [Named {
            name: "tern",
            item: ContextEntry {
                context: Context {
                    cluster: "kubernetes",
                    user: "tern-cni",
                },
            },
        }],
        current_context: "tern",
    };
    // The serialiser's message never quotes the values (the token).
    let body = serde_yaml_ng::to_string(&config).map_err(|e| format!("render kubeconfig: {e}"))?;
    Ok(format!("{HEADER}{body}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_client_go_schema_that_tern_kube_reads_back() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("kc");
        // Characters YAML would otherwise read as syntax: quotes, a colon, a hash, a newline-free
        // token with a leading dash.
        let token = BearerToken::new("-ey: \"a#b\" 'c'".to_owned());
        let text = render(
            "https://[fd00::1]:6443",
            b"-----BEGIN CERTIFICATE-----\n",
            &token,
        )
        .unwrap();
        assert!(text.starts_with("# Written by tern-agent"));
        let v: serde_json::Value = serde_yaml_ng::from_str(&text).unwrap();
        assert_eq!(v["apiVersion"], "v1");
        assert_eq!(v["current-context"], "tern");
        assert_eq!(
            v["clusters"][0]["cluster"]["server"],
            "https://[fd00::1]:6443"
        );
        assert_eq!(v["users"][0]["user"]["token"], "-ey: \"a#b\" 'c'");
        assert_eq!(v["contexts"][0]["context"]["user"], "tern-cni");
        std::fs::write(&path, &text).unwrap();
        let cfg = tern_kube::kubeconfig::load(&path).unwrap();
        assert_eq!(cfg.server, "https://[fd00::1]:6443");
        assert_eq!(cfg.token.expose(), token.expose());
    }
}
