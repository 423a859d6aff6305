//! The `tern` binary: dispatches one CNI invocation to [`tern::Tern`] (docs/DESIGN.md).

fn main() {
    tern_cni::plugin_main(&tern::Tern)
}
