//! RFC 3339 timestamps as Kubernetes writes them (`metav1.Time`: UTC, whole seconds,
//! `2025-06-01T13:00:00Z`), converted to and from Unix seconds with the `time` crate.
//!
//! Invariant: [`format_rfc3339`] always produces the `Z` form with whole seconds, and
//! [`parse_rfc3339`] accepts that form plus fractional seconds and numeric offsets.

use time::format_description::well_known::Rfc3339;
use time::OffsetDateTime;

use crate::error::KubeError;

/// Formats Unix seconds as `YYYY-MM-DDTHH:MM:SSZ` (UTC, whole seconds), the `metav1.Time` form.
/// Times outside years 0000–9999 (which RFC 3339 cannot write) are clamped to that range.
pub fn format_rfc3339(unix: i64) -> String {
    /// 0000-01-01T00:00:00Z and 9999-12-31T23:59:59Z, the range RFC 3339 can write.
    const RANGE: (i64, i64) = (-62_167_219_200, 253_402_300_799);
    OffsetDateTime::from_unix_timestamp(unix.clamp(RANGE.0, RANGE.1))
        .ok()
        .and_then(|t| t.format(&Rfc3339).ok())
        // Unreachable within the range; an empty string rather than a panic.
        .unwrap_or_default()
}

/// Parses an RFC 3339 timestamp into Unix seconds (fractions are truncated).
///
/// Accepts `Z`/`z` or a `±HH:MM` offset.
///
/// # Errors
/// [`KubeError::Decode`] naming the text when it is not RFC 3339.
pub fn parse_rfc3339(text: &str) -> Result<i64, KubeError> {
    OffsetDateTime::parse(text, &Rfc3339)
        .map(OffsetDateTime::unix_timestamp)
        .map_err(|_| KubeError::Decode(format!("not an RFC 3339 timestamp: {text:?}")))
}

/// Current wall-clock time in Unix seconds (0 if the clock is before 1970).
pub fn unix_now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_known_values() {
        assert_eq!(format_rfc3339(0), "1970-01-01T00:00:00Z");
        assert_eq!(
            parse_rfc3339("2025-06-01T13:00:00Z").unwrap(),
            1_748_782_800
        );
        assert_eq!(format_rfc3339(1_748_782_800), "2025-06-01T13:00:00Z");
        assert_eq!(format_rfc3339(951_782_400), "2000-02-29T00:00:00Z");
        for t in [
            0_i64,
            1,
            86_399,
            951_868_799,
            1_748_782_800,
            4_102_444_800,
            -1,
        ] {
            assert_eq!(parse_rfc3339(&format_rfc3339(t)).unwrap(), t);
        }
    }

    #[test]
    fn clamps_to_what_rfc3339_can_write() {
        assert_eq!(format_rfc3339(i64::MAX), "9999-12-31T23:59:59Z");
        assert_eq!(format_rfc3339(i64::MIN), "0000-01-01T00:00:00Z");
    }

    #[test]
    fn accepts_fractions_and_offsets() {
        assert_eq!(
            parse_rfc3339("2025-06-01T13:00:00.999Z").unwrap(),
            1_748_782_800
        );
        assert_eq!(
            parse_rfc3339("2025-06-01T15:00:00+02:00").unwrap(),
            1_748_782_800
        );
        assert_eq!(
            parse_rfc3339("2025-06-01T12:30:00-00:30").unwrap(),
            1_748_782_800
        );
    }

    #[test]
    fn refuses_garbage() {
        for t in [
            "",
            "2025-06-01",
            "2025-06-01T13:00:00",
            "2025-13-01T13:00:00Z",
            "2025-06-01T13:00:00+0200",
            "2025-06-01T1a:00:00Z",
            "2025-06-01T13:00:00.Z",
        ] {
            assert!(parse_rfc3339(t).is_err(), "{t}");
        }
    }
}
