//! The tern-tuning binary: the CNI verb table, plus `tern-tuning validate [--allowlist PATH] FILE`.

/// Kept for the process's life rather than returned to the kernel after each use
/// (tern_node::alloc).
#[global_allocator]
static HEAP: tern_node::alloc::PluginHeap = tern_node::alloc::plugin_heap();

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) == Some("validate") {
        std::process::exit(tern_tuning::validate::main(&args[1..]));
    }
    // One verb per process: the pod netns is entered on this thread (tern_net::netns).
    tern_net::netns::enter_on_calling_thread();
    tern_cni::plugin_main(&tern_tuning::TuningPlugin::default())
}
