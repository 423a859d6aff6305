//! `tern-lookup`: the Kubernetes API reads of tern's plugins, in a process of their own (see
//! `tern_kube::helper`). Reads one JSON call on stdin (at most 1 MiB), prints the reply and exits
//! 0, or prints a CNI error object and exits 1.

use std::io::{Read, Write};

use tern_cni::Error;
use tern_kube::helper::{serve, Call};

/// The largest call read; a real one is a few hundred bytes.
const MAX_CALL: u64 = 1 << 20;

fn main() {
    let mut input = Vec::new();
    let reply = match std::io::stdin().take(MAX_CALL).read_to_end(&mut input) {
        Err(e) => Err(Error::io(format!("read the call: {e}"))),
        Ok(_) => serde_json::from_slice::<Call>(&input)
            .map_err(|e| Error::decode(format!("tern-lookup: not a call: {e}")))
            .and_then(|call| serve(&call)),
    };
    let (out, status) = match reply {
        Ok(v) => (v, 0),
        Err(e) => (e.to_json("1.1.0"), 1),
    };
    let mut stdout = std::io::stdout();
    let _ = writeln!(stdout, "{out}");
    std::process::exit(status)
}
