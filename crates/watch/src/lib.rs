//! tern-agent's watch layer: one list-and-watch loop ([`reflector`]) for every kind the agent
//! reads, each kind kept in a typed, slim store ([`store`]) of only what its consumers read
//! ([`kinds`]), the consumers subscribed to its changes; the API is reached through a seam
//! ([`source`]) so the loop is tested against a scripted server.
//!
//! Invariants: a list happens at start and after 410 Gone only; an event that changes no field
//! a consumer reads reaches no consumer; one copy of each object, shared by `Arc`.

pub mod kinds;
pub mod reflector;
pub mod source;
pub mod store;

pub use kinds::{Kind, PodObject};
pub use reflector::{Consumer, Control, Reflector, Relisted, WatchStats};
pub use source::{Api, ClientApi, Connect, Deadlines, Events};
pub use store::{Change, Store};
