//! Running built plugin binaries and the libcni driver as a runtime does.
