//! Allowlist parsing (`tern_net::sysctl::Allowlist`): the input's first line is a key, the rest
//! the allowlist file. Parsing and matching must never panic; an empty list allows nothing;
//! a key is allowed only by a pattern matching it whole.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tern_net::sysctl::Allowlist;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let (key, file) = text.split_once('\n').unwrap_or((text, ""));
    let lines: Vec<&str> = file.lines().collect();
    let Ok(list) = Allowlist::from_patterns(&lines, "fuzz") else {
        return;
    };
    let allowed = list.is_allowed(key);
    assert_eq!(allowed, list.check(key).is_ok());
    if list.patterns().is_empty() {
        assert!(!allowed, "an empty allowlist allowed {key:?}");
    }
    // A literal pattern equal to the key, escaped, always allows it, and only it.
    let escaped: String = key
        .chars()
        .flat_map(|c| {
            let special = "\\.+*?()|[]{}^$#&-~".contains(c);
            special
                .then_some('\\')
                .into_iter()
                .chain(std::iter::once(c))
        })
        .collect();
    if !key.is_empty() && !key.contains(char::is_whitespace) {
        if let Ok(one) = Allowlist::from_patterns(&[escaped.as_str()], "fuzz") {
            assert!(one.is_allowed(key), "{key:?} not allowed by {escaped:?}");
            let longer = format!("{key}x");
            assert!(
                !one.is_allowed(&longer),
                "{escaped:?} matched {longer:?}: not anchored"
            );
        }
    }
});
