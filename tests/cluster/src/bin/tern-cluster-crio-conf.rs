//! `tern-cluster-crio-conf DIR PINNS RUNC NETWORK_DIR PLUGIN_DIR STREAM_PORT`: prints the
//! real-cluster tier's CRI-O `crio.conf` (tests/cluster/crio.sh writes it to `DIR/crio.conf`),
//! rendered by the one renderer tests/cri has ([`tern_cri::crio_conf::crio_conf`]): instance dir
//! `DIR`, the node's CNI dirs, no default network (CRI-O takes the first conflist, tern's), the
//! overlay driver (crio.sh's podman loads images with it) and a fixed streaming port.

use std::path::PathBuf;
use std::process::ExitCode;

use tern_cri::crio_conf::{crio_conf, CrioConf};

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [dir, pinns, runc, net, plugins, port] = args.as_slice() else {
        eprintln!(
            "usage: tern-cluster-crio-conf DIR PINNS RUNC NETWORK_DIR PLUGIN_DIR STREAM_PORT"
        );
        return ExitCode::from(2);
    };
    let Ok(stream_port) = port.parse() else {
        eprintln!("tern-cluster-crio-conf: STREAM_PORT {port:?} is not a port number");
        return ExitCode::from(2);
    };
    let conf = CrioConf {
        dir: PathBuf::from(dir),
        default_network: None,
        network_dir: PathBuf::from(net),
        plugin_dir: PathBuf::from(plugins),
        pinns: PathBuf::from(pinns),
        runc: PathBuf::from(runc),
        stream_port,
        storage_driver: "overlay",
    };
    print!("{}", crio_conf(&conf));
    ExitCode::SUCCESS
}
