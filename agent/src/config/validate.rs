//! The invariants of a [`RunConfig`], checked once before the agent starts.

use std::time::Duration;

use anyhow::bail;

use super::{RunConfig, REFRESH_ENV};

impl RunConfig {
    /// A message naming the setting and what is accepted.
    pub fn validate(&self, allow_non_loopback: bool) -> anyhow::Result<()> {
        crate::mint::check_token_lifetime(self.token_lifetime)?;
        let life = self.token_lifetime.as_secs();
        if let Some(o) = self.policy.refresh_override {
            if o < Duration::from_secs(60) || o >= self.token_lifetime {
                bail!("{REFRESH_ENV} must be at least 1m and shorter than the token lifetime ({life}s), e.g. 10m or 2h");
            }
        }
        if self.wall_check.is_zero() || self.wall_check > Duration::from_secs(60) {
            bail!("--wall-check must be between 1ms and 1m");
        }
        if self.policy.backoff_base.is_zero() || self.policy.backoff_cap < self.policy.backoff_base
        {
            bail!("--backoff-base must be positive and not above --backoff-cap");
        }
        if self.request_timeout.is_zero() {
            bail!("--request-timeout must be positive");
        }
        if !self.metrics_socket.is_absolute() {
            bail!(
                "--metrics-socket {} must be an absolute path",
                self.metrics_socket.display()
            );
        }
        if !allow_non_loopback && !self.listen.ip().is_loopback() {
            bail!("--listen {} is not loopback; pass --allow-non-loopback-listen true to expose metrics", self.listen);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::config::test_env::env_of;

    #[test]
    fn refuses_3607_short_lifetimes_and_exposed_listen() {
        let env = env_of(&[]);
        let a = |v: &[&str]| v.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
        assert!(RunConfig::from_args(&[], &env)
            .unwrap_err()
            .to_string()
            .contains("KUBERNETES_SERVICE_HOST"));
        let base = ["--api-server", "https://h:1", "--namespace", "n"];
        let with = |extra: &[&str]| {
            let mut v = a(&base);
            v.extend(a(extra));
            RunConfig::from_args(&v, &env)
        };
        assert!(with(&["--token-lifetime", "3607s"])
            .unwrap_err()
            .to_string()
            .contains("3607"));
        assert!(with(&["--token-lifetime", "5m"]).is_err());
        assert!(with(&["--listen", "0.0.0.0:9412"])
            .unwrap_err()
            .to_string()
            .contains("not loopback"));
        assert!(with(&["--wall-check", "2m"]).is_err());
        assert!(with(&["--bogus", "1"])
            .unwrap_err()
            .to_string()
            .contains("unknown flag"));
        assert!(with(&["--token-lifetime", "1h"]).is_ok());
    }

    #[test]
    fn denied_flow_logging_needs_network_policy_and_takes_its_rate_and_group() {
        let env = env_of(&[]);
        let base = [
            "--api-server",
            "https://h:1",
            "--namespace",
            "n",
            "--node-name",
            "n1",
        ];
        let with = |extra: &[&str]| {
            let v: Vec<String> = base.iter().chain(extra).map(|s| (*s).to_owned()).collect();
            RunConfig::from_args(&v, &env)
        };
        let e = with(&["--network-policy-log-denied", "true"]).unwrap_err();
        assert!(e.to_string().contains("needs --network-policy"), "{e}");
        let on = [
            "--network-policy",
            "true",
            "--network-policy-log-denied",
            "true",
        ];
        let c = with(&[&on[..], &["--network-policy-log-rate", "20"]].concat()).unwrap();
        let log = c.netpol.and_then(|n| n.log_denied).unwrap();
        assert_eq!((log.group, log.rate), (4242, 20));
        assert!(with(&[&on[..], &["--network-policy-log-rate", "0"]].concat()).is_err());
        let off = with(&["--network-policy", "true"]).unwrap();
        assert_eq!(off.netpol.unwrap().log_denied, None);
    }
}
