//! `tern-lookup`: the Kubernetes API reads of tern's plugins, in a process of their own (see
//! `tern_kube::helper`). Reads one JSON call on stdin (at most 1 MiB), prints the reply and exits
//! 0, or prints a CNI error object and exits 1.

use std::io::{Read, Write};

use tern_cni::Error;
use tern_kube::helper::{serve, Call, HELPER_GRACE};

/// Kept for the process's life rather than returned to the kernel after each use
/// (tern_node::alloc).
#[global_allocator]
static HEAP: tern_node::alloc::PluginHeap = tern_node::alloc::plugin_heap();

/// The largest call read; a real one is a few hundred bytes.
const MAX_CALL: u64 = 1 << 20;

/// Ends this process with code 11 once `limit` has passed, whatever it is blocked on outside the
/// request's own deadline (which already bounds connecting, name resolution included): the plugin that started it kills it at the same
/// time, but a plugin that was itself killed cannot, and no helper may outlive its call for long.
fn give_up_after(limit: std::time::Duration) {
    let _ = std::thread::Builder::new().spawn(move || {
        std::thread::sleep(limit);
        let e = Error::try_again_later(format!("tern-lookup: no answer within {limit:?}"));
        let _ = writeln!(std::io::stdout(), "{}", e.to_json("1.1.0"));
        std::process::exit(1);
    });
}

fn main() {
    if std::env::args_os().nth(1).is_some_and(|a| a == "--version") {
        println!("tern-lookup {}", tern_node::version::version());
        return;
    }
    let mut input = Vec::new();
    let reply = match std::io::stdin().take(MAX_CALL).read_to_end(&mut input) {
        Err(e) => Err(Error::io(format!("read the call: {e}"))),
        Ok(_) => serde_json::from_slice::<Call>(&input)
            .map_err(|e| Error::decode(format!("tern-lookup: not a call: {e}")))
            .and_then(|call| {
                give_up_after(call.budget() + HELPER_GRACE);
                serve(&call)
            }),
    };
    let (out, status) = match reply {
        Ok(v) => (v, 0),
        Err(e) => (e.to_json("1.1.0"), 1),
    };
    let mut stdout = std::io::stdout();
    let _ = writeln!(stdout, "{out}");
    std::process::exit(status)
}
