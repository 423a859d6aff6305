//! The API server restarted by a case (lib.sh's `start_apiserver`), then the wait until the
//! control plane serves pods again.
//!
//! Seen here: after a 13 s outage the scheduler's and the kubelet's pod watches came back 70-90 s
//! after the server did (client-go's list/watch retries back off exponentially from 0.8 s, capped
//! at 30 s, with jitter), so a pod created at once waited that long; with the server killed the
//! wait took 14-59 s. The cases' own timeouts start after it.

use std::time::Instant;

use crate::{fail, Node, Res};

impl Node {
    /// lib.sh's `start_apiserver FLAGS...` with `env`; then, when the node's kubelet runs and its
    /// Node is registered, a host-network canary pod (no CNI call, nothing of tern's to count)
    /// created, Ready and deleted again.
    ///
    /// # Errors
    /// node.sh's, or the canary not Ready within 240 s.
    pub fn start_apiserver(&self, flags: &[&str], env: &[(&str, &str)]) -> Res {
        let mut args = vec!["start_apiserver"];
        args.extend_from_slice(flags);
        self.sh(&args, env)?;
        let pid = std::fs::read_to_string(self.kt.join("kubelet/pid")).unwrap_or_default();
        let kubelet_runs =
            !pid.trim().is_empty() && std::path::Path::new("/proc").join(pid.trim()).exists();
        if !kubelet_runs || self.kubectl(&["get", "node", &self.name]).is_err() {
            return Ok(());
        }
        let t0 = Instant::now();
        let pod = format!(
            "settle-{}-{}",
            std::process::id(),
            t0.elapsed().subsec_nanos() % 100_000
        );
        let image = self.var("PAUSE_IMAGE");
        let doc = format!(
            "apiVersion: v1\nkind: Pod\nmetadata: {{name: {pod}, namespace: default}}\nspec:\n  \
             hostNetwork: true\n  automountServiceAccountToken: false\n  terminationGracePeriodSeconds: 1\n  \
             nodeSelector: {{kubernetes.io/hostname: {}}}\n  tolerations: [{{operator: Exists}}]\n  \
             containers: [{{name: main, image: {image}, imagePullPolicy: Never}}]\n",
            self.name
        );
        self.kubectl_in(&["apply", "-f", "-"], &doc)?;
        let target = format!("pod/{pod}");
        if self
            .kubectl(&["wait", "--for=condition=Ready", &target, "--timeout=240s"])
            .is_err()
        {
            self.kubectl(&["delete", "pod", &pod, "--wait=false"]).ok();
            return fail(format!(
                "canary pod {pod} not Ready 240 s after the API server's restart"
            ));
        }
        self.kubectl(&["delete", "pod", &pod, "--wait=true", "--timeout=120s"])?;
        let secs = t0.elapsed().as_secs();
        self.note(&format!(
            "control plane settled after the API server's restart in {secs}s"
        ));
        Ok(())
    }
}
