//! Dev-only fixtures for tern's tests: throwaway host and pod network namespaces ([`netns`]) and
//! running built binaries exactly as a runtime does ([`exec`]). Never a dependency of a shipped binary.

pub mod exec;
pub mod netns;
