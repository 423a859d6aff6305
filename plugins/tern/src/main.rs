//! `tern`: routed veth pod networking (DESIGN.md). The binary is the verb table; each verb lives
//! in its own module.

mod add;
mod check;
mod config;
mod del;
mod errors;
mod gc;
mod ipam;
mod lookup;
mod naming;
mod rollback;
mod state;
mod status;

use tern_cni::{AddInput, CheckInput, CniResult, DelInput, Error, GcInput, Plugin, StatusInput};

struct Tern;

impl Plugin for Tern {
    fn about(&self) -> &str {
        concat!(
            "tern ",
            env!("CARGO_PKG_VERSION"),
            ": routed veth pod networking"
        )
    }

    fn add(&self, input: &AddInput) -> Result<CniResult, Error> {
        add::add(input)
    }

    fn del(&self, input: &DelInput) -> Result<(), Error> {
        del::del(input)
    }

    fn check(&self, input: &CheckInput) -> Result<(), Error> {
        check::check(input)
    }

    fn status(&self, input: &StatusInput) -> Result<(), Error> {
        status::status(input)
    }

    fn gc(&self, input: &GcInput) -> Result<(), Error> {
        gc::gc(input)
    }
}

fn main() {
    tern_cni::plugin_main(&Tern)
}
