//! The image's JSON documents: configuration, manifest and index, as `jq -c` wrote them.

use serde_json::{json, Value};

use super::Spec;
use crate::{usage, Res};

const MANIFEST: &str = "application/vnd.oci.image.manifest.v1+json";

/// The image's JSON documents, each on one line ending in a newline.
pub(super) struct Documents {
    arch: &'static str,
    name: String,
    entrypoint: Value,
    cmd: Value,
    env: Value,
}

impl Documents {
    pub(super) fn new(spec: &Spec, entrypoint: &str, env: &str) -> Res<Self> {
        let parse = |what: &str, s: &str| {
            serde_json::from_str(s)
                .map_err(|e| usage(format!("image: {what} {s:?} is not JSON: {e}")))
        };
        let arch = match std::env::consts::ARCH {
            "x86_64" => "amd64",
            "aarch64" => "arm64",
            other => other,
        };
        Ok(Self {
            arch,
            name: spec.name.clone(),
            entrypoint: parse("--entrypoint", entrypoint)?,
            cmd: parse("--cmd", spec.cmd.as_deref().unwrap_or("null"))?,
            env: parse("the environment", env)?,
        })
    }

    fn line(v: &Value) -> String {
        format!("{v}\n")
    }

    pub(super) fn config(&self, layer: &str) -> String {
        let mut config = json!({"Entrypoint": self.entrypoint, "Env": self.env, "WorkingDir": "/"});
        if !matches!(self.cmd, Value::Null | Value::Bool(false)) {
            config["Cmd"] = self.cmd.clone();
        }
        Self::line(
            &json!({"architecture": self.arch, "os": "linux", "config": config,
            "rootfs": {"type": "layers", "diff_ids": [layer]}}),
        )
    }

    pub(super) fn manifest(config: &(String, usize), layer: &(String, usize)) -> String {
        Self::line(&json!({"schemaVersion": 2, "mediaType": MANIFEST,
            "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": config.0, "size": config.1},
            "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar", "digest": layer.0, "size": layer.1}]}))
    }

    pub(super) fn index(&self, manifest: &(String, usize)) -> String {
        // the reference's tag: what follows its last `:` (the whole name when it has none)
        let tag = self
            .name
            .rsplit_once(':')
            .map_or(self.name.as_str(), |(_, t)| t);
        Self::line(
            &json!({"schemaVersion": 2, "manifests": [{"mediaType": MANIFEST,
            "digest": manifest.0, "size": manifest.1, "platform": {"architecture": self.arch, "os": "linux"},
            "annotations": {"io.containerd.image.name": self.name, "org.opencontainers.image.ref.name": tag}}]}),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::image::parse;
    use crate::Args;

    #[test]
    fn the_documents_are_what_jq_wrote() {
        let spec = parse(Args::of(&[
            "--rootfs",
            "/",
            "--entrypoint",
            r#"["/agnhost"]"#,
            "--cmd",
            r#"["pause"]"#,
            "--name",
            "registry.k8s.io/e2e-test-images/agnhost:2.56",
            "--out",
            "x",
        ]))
        .unwrap();
        let d = Documents::new(&spec, r#"["/agnhost"]"#, r#"["PATH=/bin"]"#).unwrap();
        assert_eq!(
            d.config("sha256:ab"),
            format!("{{\"architecture\":\"{}\",\"os\":\"linux\",\"config\":{{\"Entrypoint\":[\"/agnhost\"],\"Env\":[\"PATH=/bin\"],\"WorkingDir\":\"/\",\"Cmd\":[\"pause\"]}},\"rootfs\":{{\"type\":\"layers\",\"diff_ids\":[\"sha256:ab\"]}}}}\n", d.arch)
        );
        let index = d.index(&("sha256:cd".into(), 7));
        assert!(index.ends_with("\"annotations\":{\"io.containerd.image.name\":\"registry.k8s.io/e2e-test-images/agnhost:2.56\",\"org.opencontainers.image.ref.name\":\"2.56\"}}]}\n"), "{index}");
        let no_cmd = Documents {
            cmd: Value::Null,
            ..d
        };
        assert!(!no_cmd.config("sha256:ab").contains("Cmd"));
        assert!(Documents::manifest(&("sha256:c".into(), 1), &("sha256:l".into(), 2))
            .contains("\"layers\":[{\"mediaType\":\"application/vnd.oci.image.layer.v1.tar\",\"digest\":\"sha256:l\",\"size\":2}]"));
    }
}
