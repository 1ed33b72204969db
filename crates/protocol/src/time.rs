//! Timestamps are milliseconds since the Unix epoch (`i64`), the unit JavaScript's
//! `Date.now()` uses, so a browser can compare them without conversion.

use ::time::format_description::well_known::Iso8601;
use ::time::format_description::well_known::iso8601::{Config, EncodedConfig, TimePrecision};
use ::time::{OffsetDateTime, PrimitiveDateTime};
use std::num::NonZeroU8;
use std::time::{SystemTime, UNIX_EPOCH};

/// Milliseconds since the Unix epoch.
pub type Millis = i64;

/// The current wall-clock time in milliseconds.
pub fn now_ms() -> Millis {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_millis() as Millis).unwrap_or(0)
}

/// ISO 8601 in UTC to the millisecond: `2026-12-03T16:05:00.000Z`.
const ISO_MILLIS: EncodedConfig = Config::DEFAULT
    .set_time_precision(TimePrecision::Second { decimal_digits: NonZeroU8::new(3) })
    .encode();

/// Milliseconds since the epoch as ISO 8601 in UTC (`2026-12-03T16:05:00.000Z`), for a
/// wire form that wants a date as text. An instant outside the years 0000–9999 (which
/// ISO 8601 writes with four digits) is clamped to the nearest one inside.
pub fn iso8601(ms: Millis) -> String {
    let nanos = i128::from(ms) * 1_000_000;
    let (first, last) = (PrimitiveDateTime::MIN.assume_utc(), PrimitiveDateTime::MAX.assume_utc());
    let at = OffsetDateTime::from_unix_timestamp_nanos(nanos)
        .unwrap_or(if ms < 0 { first } else { last })
        .clamp(year_zero(), last);
    at.format(&Iso8601::<ISO_MILLIS>).expect("a UTC instant in the years 0000-9999 formats")
}

/// The first instant of the year 0000.
fn year_zero() -> OffsetDateTime {
    OffsetDateTime::from_unix_timestamp(-62_167_219_200).expect("year 0000 is in range")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn iso8601_is_utc_to_the_millisecond() {
        assert_eq!(iso8601(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(iso8601(951_782_400_000), "2000-02-29T00:00:00.000Z");
        assert_eq!(iso8601(1_796_313_600_123), "2026-12-03T16:00:00.123Z");
        assert_eq!(iso8601(1_700_000_000_001), "2023-11-14T22:13:20.001Z");
        assert_eq!(iso8601(-1), "1969-12-31T23:59:59.999Z");
        assert_eq!(iso8601(i64::MAX), "9999-12-31T23:59:59.999Z");
        assert_eq!(iso8601(i64::MIN), "0000-01-01T00:00:00.000Z");
    }
}
