//! RFC 3339 timestamps as Kubernetes writes them (`metav1.Time`: UTC, whole seconds,
//! `2025-06-01T13:00:00Z`), converted to and from Unix seconds without a date library.
//!
//! Invariant: [`format_rfc3339`] always produces the `Z` form with whole seconds, and
//! [`parse_rfc3339`] accepts that form plus fractional seconds and numeric offsets.

use tern_cni::time::civil_from_days;

use crate::error::KubeError;

/// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's `days_from_civil`).
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = if y >= 0 { y } else { y - 399 } / 400;
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// Formats Unix seconds as `YYYY-MM-DDTHH:MM:SSZ` (UTC, whole seconds), the `metav1.Time` form.
///
/// Delegates the calendar to [`tern_cni::time::civil_from_days`].
pub fn format_rfc3339(unix: i64) -> String {
    let days = unix.div_euclid(86_400);
    let secs = unix.rem_euclid(86_400);
    let (y, m, d) = civil_from_days(days);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        secs / 3600,
        (secs / 60) % 60,
        secs % 60
    )
}

/// Parses an RFC 3339 timestamp into Unix seconds (fractions are truncated).
///
/// Accepts `Z`/`z` or a `±HH:MM` offset.
///
/// # Errors
/// [`KubeError::Decode`] naming the text when it is not RFC 3339.
pub fn parse_rfc3339(text: &str) -> Result<i64, KubeError> {
    let bad = || KubeError::Decode(format!("not an RFC 3339 timestamp: {text:?}"));
    let b = text.as_bytes();
    if b.len() < 20 || b[4] != b'-' || b[7] != b'-' || !matches!(b[10], b'T' | b't' | b' ') {
        return Err(bad());
    }
    if b[13] != b':' || b[16] != b':' {
        return Err(bad());
    }
    let num = |r: std::ops::Range<usize>| -> Result<i64, KubeError> {
        let s = text.get(r).ok_or_else(bad)?;
        if !s.bytes().all(|c| c.is_ascii_digit()) {
            return Err(bad());
        }
        s.parse::<i64>().map_err(|_| bad())
    };
    let (y, mo, d, h, mi, s) = (
        num(0..4)?,
        num(5..7)?,
        num(8..10)?,
        num(11..13)?,
        num(14..16)?,
        num(17..19)?,
    );
    if !(1..=12).contains(&mo) || !(1..=31).contains(&d) || h > 23 || mi > 59 || s > 60 {
        return Err(bad());
    }
    let mut rest = &text[19..];
    if let Some(frac) = rest.strip_prefix('.') {
        let digits = frac.bytes().take_while(u8::is_ascii_digit).count();
        if digits == 0 {
            return Err(bad());
        }
        rest = &frac[digits..];
    }
    let offset = match rest {
        "Z" | "z" => 0,
        _ if rest.len() == 6
            && (rest.starts_with('+') || rest.starts_with('-'))
            && &rest[3..4] == ":" =>
        {
            let oh = num(text.len() - 5..text.len() - 3)?;
            let om = num(text.len() - 2..text.len())?;
            let sign = if rest.starts_with('-') { -1 } else { 1 };
            sign * (oh * 3600 + om * 60)
        }
        _ => return Err(bad()),
    };
    Ok(days_from_civil(y, mo, d) * 86_400 + h * 3600 + mi * 60 + s - offset)
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
