//! Sysctl key and value validation (`tern_net::sysctl`): input `key \0 ifname \0 value`. Whatever
//! is accepted must stay strictly under `/proc/sys/net/` with no `.`/`..`/empty segment, and a
//! value must be one line of printable ASCII (spaces and tabs allowed), 1..=256 bytes.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tern_net::sysctl::{SysctlKey, SysctlValue};

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let mut parts = text.splitn(3, '\0');
    let key = parts.next().unwrap_or_default();
    let ifname = parts.next().unwrap_or("eth0");
    let value = parts.next().unwrap_or("1");
    if let Ok(k) = SysctlKey::parse(key, ifname) {
        let rel = k.relative();
        assert!(rel.starts_with("net/"), "{key:?} ({ifname:?}) -> {rel:?}");
        assert!(
            rel.split('/')
                .all(|s| !s.is_empty() && s != "." && s != ".."),
            "{key:?} ({ifname:?}) -> {rel:?}"
        );
        assert!(k.path().starts_with("/proc/sys/net"), "{:?}", k.path());
        assert!(
            !rel.bytes().any(|b| b.is_ascii_control() || b == b' '),
            "{rel:?}"
        );
        assert_eq!(k.raw(), key);
    }
    if let Ok(v) = SysctlValue::parse(key, value) {
        let s = v.as_str();
        assert!(!s.is_empty() && s.len() <= 256, "{s:?}");
        assert!(
            s.bytes()
                .all(|b| b == b' ' || b == b'\t' || b.is_ascii_graphic()),
            "{s:?}"
        );
    }
});
