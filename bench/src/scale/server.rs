//! What the API server's own /metrics says about its clients: requests by verb, resource and
//! subresource (`apiserver_request_total`, summed over codes and scopes), their codes, Node
//! watch events sent, Node watches open now. A WATCH is counted in `apiserver_request_total`
//! only when it ends; the open ones are `apiserver_longrunning_requests`.
//!
//! Invariant: every count is the server's own (its counters), never the bench's estimate.

use std::collections::BTreeMap;

use crate::cluster::api::Api;
use crate::cluster::parse_metrics;

/// One read of the server's /metrics.
#[derive(Default, Clone)]
pub(crate) struct Snapshot(BTreeMap<String, f64>);

/// Reads the server's /metrics (empty when it cannot be read: every count is then 0).
pub(crate) fn read(api: &Api) -> Snapshot {
    Snapshot(parse_metrics(&api.get("/metrics").unwrap_or_default()))
}

fn label(series: &str, name: &str, value: &str) -> bool {
    series.contains(&format!("{name}=\"{value}\""))
}

impl Snapshot {
    fn requests<'a>(
        &'a self,
        verb: &'a str,
        resource: &'a str,
        sub: &'a str,
    ) -> impl Iterator<Item = (&'a String, &'a f64)> + 'a {
        self.0.iter().filter(move |(k, _)| {
            k.starts_with("apiserver_request_total{")
                && label(k, "verb", verb)
                && label(k, "resource", resource)
                && label(k, "subresource", sub)
        })
    }

    /// Requests of VERB on RESOURCE/SUB, every code.
    pub(crate) fn count(&self, verb: &str, resource: &str, sub: &str) -> i64 {
        self.requests(verb, resource, sub)
            .map(|(_, v)| v)
            .sum::<f64>() as i64
    }

    /// `code=count` of those requests, codes ascending.
    pub(crate) fn codes(&self, verb: &str, resource: &str, sub: &str) -> String {
        let mut by: BTreeMap<String, f64> = BTreeMap::new();
        for (k, v) in self.requests(verb, resource, sub) {
            let code = k
                .split("code=\"")
                .nth(1)
                .and_then(|r| r.split('"').next())
                .unwrap_or("?");
            *by.entry(code.to_string()).or_default() += v;
        }
        by.iter()
            .map(|(c, n)| format!("{c}={n}"))
            .collect::<Vec<_>>()
            .join(" ")
    }

    /// Node watch events the server sent.
    pub(crate) fn node_watch_events(&self) -> i64 {
        self.sum_where("apiserver_watch_events_total{", &[("resource", "nodes")])
    }

    /// Node watches open now.
    pub(crate) fn open_node_watches(&self) -> i64 {
        self.sum_where(
            "apiserver_longrunning_requests{",
            &[("resource", "nodes"), ("verb", "WATCH")],
        )
    }

    fn sum_where(&self, prefix: &str, labels: &[(&str, &str)]) -> i64 {
        self.0
            .iter()
            .filter(|(k, _)| k.starts_with(prefix) && labels.iter().all(|(n, v)| label(k, n, v)))
            .map(|(_, v)| v)
            .sum::<f64>() as i64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_by_verb_resource_and_subresource() {
        let text = "\
apiserver_request_total{code=\"200\",component=\"apiserver\",resource=\"nodes\",scope=\"cluster\",subresource=\"\",verb=\"LIST\"} 3
apiserver_request_total{code=\"410\",component=\"apiserver\",resource=\"nodes\",scope=\"cluster\",subresource=\"\",verb=\"LIST\"} 2
apiserver_request_total{code=\"200\",component=\"apiserver\",resource=\"nodes\",scope=\"resource\",subresource=\"status\",verb=\"PATCH\"} 7
apiserver_request_total{code=\"201\",component=\"apiserver\",resource=\"serviceaccounts\",scope=\"resource\",subresource=\"token\",verb=\"POST\"} 5
apiserver_watch_events_total{group=\"\",kind=\"Node\",resource=\"nodes\",version=\"v1\"} 40
apiserver_longrunning_requests{component=\"apiserver\",group=\"\",resource=\"nodes\",scope=\"cluster\",subresource=\"\",verb=\"WATCH\",version=\"v1\"} 4
";
        let s = Snapshot(parse_metrics(text));
        assert_eq!(s.count("LIST", "nodes", ""), 5);
        assert_eq!(s.count("PATCH", "nodes", ""), 0);
        assert_eq!(s.count("PATCH", "nodes", "status"), 7);
        assert_eq!(s.count("POST", "serviceaccounts", "token"), 5);
        assert_eq!(s.codes("LIST", "nodes", ""), "200=3 410=2");
        assert_eq!(s.node_watch_events(), 40);
        assert_eq!(s.open_node_watches(), 4);
    }
}
