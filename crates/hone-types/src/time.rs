//! Timestamps as unix milliseconds, with RFC 3339 rendering and parsing for
//! query parameters. hone keeps time as integers so that every store and every
//! wire format agrees; this small civil-date conversion avoids a date crate.
//! [`now_ms`] is the one place hone reads the wall clock.

/// The wall clock as unix milliseconds (0 if the clock is before 1970).
#[allow(clippy::disallowed_methods, reason = "the one place hone reads the clock")]
pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

/// Days since 1970-01-01 for a proleptic Gregorian date (Howard Hinnant's
/// `days_from_civil`).
fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let y = if month <= 2 { year - 1 } else { year };
    let era = if y >= 0 { y } else { y - 399 } / 400;
    let yoe = y - era * 400;
    let mp = (month + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

fn civil_from_days(days: i64) -> (i64, i64, i64) {
    let z = days + 719_468;
    let era = if z >= 0 { z } else { z - 146_096 } / 146_097;
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

/// Renders unix milliseconds as `YYYY-MM-DDTHH:MM:SS.mmmZ`.
pub fn format_rfc3339(unix_ms: i64) -> String {
    let days = unix_ms.div_euclid(86_400_000);
    let ms_of_day = unix_ms.rem_euclid(86_400_000);
    let (y, mo, d) = civil_from_days(days);
    let (h, mi, s, ms) = (
        ms_of_day / 3_600_000,
        ms_of_day / 60_000 % 60,
        ms_of_day / 1000 % 60,
        ms_of_day % 1000,
    );
    format!("{y:04}-{mo:02}-{d:02}T{h:02}:{mi:02}:{s:02}.{ms:03}Z")
}

/// Parses either unix milliseconds (`1732200000000`) or an RFC 3339 time
/// (`2026-11-21T10:00:00Z`, `2026-11-21T10:00:00.5+01:00`, or a bare date).
pub fn parse_time(raw: &str) -> Option<i64> {
    if let Ok(ms) = raw.parse::<i64>() {
        return Some(ms);
    }
    let b = raw.as_bytes();
    let num = |range: std::ops::Range<usize>| -> Option<i64> {
        let s = raw.get(range)?;
        s.bytes().all(|c| c.is_ascii_digit()).then(|| s.parse().ok()).flatten()
    };
    if b.len() < 10 || b[4] != b'-' || b[7] != b'-' {
        return None;
    }
    let (year, month, day) = (num(0..4)?, num(5..7)?, num(8..10)?);
    if !(1..=12).contains(&month) || !(1..=31).contains(&day) {
        return None;
    }
    let mut ms = days_from_civil(year, month, day) * 86_400_000;
    if b.len() == 10 {
        return Some(ms);
    }
    if !matches!(b[10], b'T' | b't' | b' ') || b.len() < 19 || b[13] != b':' || b[16] != b':' {
        return None;
    }
    let (h, mi, s) = (num(11..13)?, num(14..16)?, num(17..19)?);
    if h > 23 || mi > 59 || s > 60 {
        return None;
    }
    ms += (h * 3600 + mi * 60 + s) * 1000;
    let mut rest = &raw[19..];
    if let Some(frac) = rest.strip_prefix('.') {
        let digits = frac.bytes().take_while(u8::is_ascii_digit).count();
        if digits == 0 {
            return None;
        }
        let padded = format!("{:0<3}", &frac[..digits.min(3)]);
        ms += padded.parse::<i64>().ok()?;
        rest = &frac[digits..];
    }
    let offset_minutes = match rest {
        "Z" | "z" => 0,
        _ if rest.len() == 6 && rest.as_bytes()[3] == b':' => {
            let sign = match rest.as_bytes()[0] {
                b'+' => 1,
                b'-' => -1,
                _ => return None,
            };
            let oh: i64 = rest[1..3].parse().ok()?;
            let om: i64 = rest[4..6].parse().ok()?;
            sign * (oh * 60 + om)
        }
        _ => return None,
    };
    Some(ms - offset_minutes * 60_000)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc3339_round_trips_and_offsets_apply() {
        // 2024-11-21T14:40:00Z, checked with `date -u -d @1732200000`.
        assert_eq!(format_rfc3339(1_732_200_000_000), "2024-11-21T14:40:00.000Z");
        assert_eq!(parse_time("2024-11-21T14:40:00Z"), Some(1_732_200_000_000));
        assert_eq!(parse_time("2024-11-21T15:40:00.000+01:00"), Some(1_732_200_000_000));
        assert_eq!(parse_time("2024-11-21T14:40:00.25Z"), Some(1_732_200_000_250));
        assert_eq!(parse_time("1970-01-01"), Some(0));
        assert_eq!(parse_time("1732200000000"), Some(1_732_200_000_000));
        assert_eq!(parse_time("yesterday"), None);
        assert_eq!(parse_time("2024-13-01"), None);
        for ms in [0, 951_782_400_000, 4_102_444_799_999, -86_400_000] {
            assert_eq!(parse_time(&format_rfc3339(ms)), Some(ms));
        }
    }
}
