use super::*;
use crate::netpol::NetpolStats;
use crate::routes::RouteStats;
use crate::run::Snapshot;

const NOW: f64 = 1_800_000_000.0;

/// The agent's own /metrics text for these states (what `tern-agent run` serves).
fn served(snap: Snapshot, routes: Option<RouteStats>, netpol: Option<NetpolStats>) -> String {
    let h = prometheus_client::metrics::histogram::Histogram::new([0.1]);
    crate::run::metrics::render(
        snap,
        &h,
        routes,
        netpol,
        &crate::run::verbs::VerbMetrics::default(),
    )
}

fn fresh() -> Snapshot {
    Snapshot {
        token_expiry: Some(NOW as i64 + 3600),
        last_success: Some(NOW as i64 - 600),
        ..Snapshot::default()
    }
}

#[test]
fn a_ready_synced_agent_is_reported_with_its_figures_and_exit_0() {
    let routes = RouteStats {
        synced: true,
        installed: 3,
        nodes: 4,
        ..RouteStats::default()
    };
    let mut netpol = NetpolStats {
        synced: true,
        compiles: 7,
        pods_compiled: 2,
        ..NetpolStats::default()
    };
    netpol.size.pods = 5;
    netpol.unreadable_policies.insert("rules", 1);
    let text = served(fresh(), Some(routes), Some(netpol));
    let (out, ok) = report(&text, true, NOW);
    assert!(ok, "{out}");
    for want in [
        ": ready",
        "token: expires in 1h0m; last refresh 10m0s ago; 0 failure(s) in a row",
        "node routes: synced; 3 routes for 4 nodes",
        "network policy: synced; 5 isolated pods",
        "work: 7 compiles (2 pods, 0 sets)",
        "unreadable policies: reason=rules 1",
        "CNI verbs: 0 run, 0 failed",
    ] {
        assert!(out.contains(want), "{want:?} in\n{out}");
    }
}

#[test]
fn not_ready_not_synced_or_an_expired_token_is_exit_1() {
    let text = served(fresh(), None, Some(NetpolStats::default()));
    let (out, ok) = report(&text, true, NOW);
    assert!(!ok && out.contains("network policy: NOT SYNCED"), "{out}");
    assert!(
        !out.contains("node routes"),
        "no routes controller, no line: {out}"
    );
    let (out, ok) = report(&served(fresh(), None, None), false, NOW);
    assert!(!ok && out.contains("NOT READY"), "{out}");
    let expired = Snapshot {
        token_expiry: Some(NOW as i64 - 60),
        ..Snapshot::default()
    };
    let (out, ok) = report(&served(expired, None, None), true, NOW);
    assert!(
        !ok && out.contains("expires in -1m0s; last refresh never"),
        "{out}"
    );
    let (out, ok) = report(&served(Snapshot::default(), None, None), true, NOW);
    assert!(!ok && out.contains("token: none written yet"), "{out}");
}

#[test]
fn no_agent_at_the_address_is_exit_2() {
    // A port nothing listens on (bound, then closed).
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .unwrap_or(1);
    let code = main(&StatusArgs {
        address: SocketAddr::from(([127, 0, 0, 1], port)),
    });
    assert_eq!(code, ExitCode::from(2));
}
