//! The `tern` binary: dispatches one CNI invocation to [`tern::Tern`] (docs/DESIGN.md).

/// Kept for the process's life rather than returned to the kernel after each use
/// (tern_node::alloc).
#[global_allocator]
static HEAP: tern_node::alloc::PluginHeap = tern_node::alloc::plugin_heap();

fn main() {
    tern_cni::plugin_main(&tern::Tern)
}
