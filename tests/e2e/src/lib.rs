//! tern's end-to-end tests live in `tests/*.rs`; this library is empty. They need root, the release
//! binaries (`TERN_BIN_DIR`), the libcni driver (`TERN_CNITOOL`) and the reference plugins
//! (`TERN_REF_PLUGINS`); `scripts/test` sets all three.
