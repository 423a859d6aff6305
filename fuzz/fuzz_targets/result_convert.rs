//! Result parsing and conversion between every pair of versions (`tern_cni::CniResult`): the
//! input is a result as JSON; whatever parses must print in each supported version, and that
//! print must parse again as a result of its version, print identically at that version (a
//! fixed point), and convert on to every other version; `prevResult` conversion to each config
//! version must never panic.
#![no_main]

use libfuzzer_sys::fuzz_target;
use serde_json::Value;
use tern_cni::{CniResult, Version};

fuzz_target!(|data: &[u8]| {
    let Ok(v) = serde_json::from_slice::<Value>(data) else {
        return;
    };
    for config in Version::ALL {
        let _ = CniResult::from_prev_result(&v, config);
    }
    let Ok((r, _)) = CniResult::from_json(&v) else {
        return;
    };
    for a in Version::ALL {
        let in_a = r.to_json(a);
        let (ra, va) = CniResult::from_json(&in_a)
            .unwrap_or_else(|e| panic!("{a} print does not parse: {e}\n{in_a}"));
        assert_eq!(va, Some(a), "{in_a}");
        assert_eq!(ra.to_json(a), in_a, "{a} print is not a fixed point");
        for b in Version::ALL {
            let in_b = ra.to_json(b);
            CniResult::from_json(&in_b)
                .unwrap_or_else(|e| panic!("{a} -> {b} does not parse: {e}\n{in_b}"));
        }
    }
});
