//! The `tern` binary: dispatches one CNI invocation to [`tern::Tern`] (docs/DESIGN.md).

/// Kept for the process's life rather than returned to the kernel after each use
/// (tern_node::alloc).
#[global_allocator]
static HEAP: tern_node::alloc::PluginHeap = tern_node::alloc::plugin_heap();

fn main() {
    // One verb per process: the pod netns is entered on this thread (tern_net::netns).
    tern_net::netns::enter_on_calling_thread();
    tern_cni::plugin_main(&tern::Tern)
}
