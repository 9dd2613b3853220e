//! Durations and byte sizes in configuration files, in the units people
//! write: `"500ms"`, `"1s"`, `"2m 30s"` (humantime's grammar), and
//! `"64KiB"`, `"4 MiB"`, `"1400"` or a bare integer of bytes. Used as
//! `#[serde(with = "plexus_net::units::duration")]` on the settings structs
//! of every crate, so every file of a deployment reads the same way.
//!
//! Serialising writes the same forms back (durations as humantime strings,
//! sizes as the largest binary unit that divides them), so a printed
//! configuration can be read again. Values that do not parse are refused
//! with the text and the expected form; the caller's error adds the key.
//!
//! Feature `config`.

use std::fmt;
use std::time::Duration;

use serde::de::{self, Visitor};
use serde::{Deserializer, Serializer};

/// A `Duration` as `"500ms"`, `"1s"`, `"1m 30s"`.
pub mod duration {
    use super::*;

    /// Writes `d` as a humantime string (`"1s"`, `"500ms"`, `"0s"`).
    pub fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(&humantime::format_duration(*d))
    }

    /// Reads a humantime string; refuses bare numbers (a unit is needed:
    /// `"500ms"`, not `500`).
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        d.deserialize_any(DurationVisitor)
    }
}

/// An `Option<Duration>` as a duration or nothing (a missing key).
pub mod opt_duration {
    use super::*;

    /// Writes the duration, or nothing.
    pub fn serialize<S: Serializer>(d: &Option<Duration>, s: S) -> Result<S::Ok, S::Error> {
        match d {
            Some(d) => s.collect_str(&humantime::format_duration(*d)),
            None => s.serialize_none(),
        }
    }

    /// Reads a duration ([`duration`](super::duration)).
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Duration>, D::Error> {
        d.deserialize_any(DurationVisitor).map(Some)
    }
}

/// A byte count (`usize`) as `"64KiB"`, `"4 MiB"`, `"1400"` or `1400`.
pub mod bytes {
    use super::*;

    /// Writes the count with the largest binary unit that divides it, or
    /// as an integer if none does.
    pub fn serialize<S: Serializer>(n: &usize, s: S) -> Result<S::Ok, S::Error> {
        let n = *n as u64;
        let text = format_bytes(n);
        if text.bytes().all(|b| b.is_ascii_digit()) {
            s.serialize_u64(n)
        } else {
            s.serialize_str(&text)
        }
    }

    /// Reads an integer, or a number with a unit (B, KiB, MiB, GiB; KB,
    /// MB, GB are decimal).
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<usize, D::Error> {
        let n = d.deserialize_any(BytesVisitor)?;
        usize::try_from(n).map_err(|_| de::Error::custom(format!("{n} bytes is too large")))
    }
}

struct DurationVisitor;

impl Visitor<'_> for DurationVisitor {
    type Value = Duration;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a duration with a unit, e.g. \"500ms\", \"1s\" or \"2m 30s\"")
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<Duration, E> {
        humantime::parse_duration(v.trim()).map_err(|e| {
            E::custom(format!(
                "`{v}` is not a duration ({e}); expected e.g. \"500ms\", \"1s\" or \"2m 30s\""
            ))
        })
    }
}

struct BytesVisitor;

impl Visitor<'_> for BytesVisitor {
    type Value = u64;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a size in bytes, e.g. 1400, \"64KiB\" or \"4MiB\"")
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<u64, E> {
        Ok(v)
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<u64, E> {
        u64::try_from(v).map_err(|_| E::custom(format!("{v}: a size cannot be negative")))
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<u64, E> {
        parse_bytes(v).ok_or_else(|| {
            E::custom(format!(
                "`{v}` is not a size; expected bytes, e.g. 1400, \"64KiB\" or \"4MiB\""
            ))
        })
    }
}

/// Parses `"64KiB"`, `"4 MiB"`, `"1400"`, `"1400B"`, `"2GB"` (decimal).
pub fn parse_bytes(text: &str) -> Option<u64> {
    let t = text.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (digits, unit) = t.split_at(split);
    let n: u64 = digits.parse().ok()?;
    let scale: u64 = match unit.trim() {
        "" | "B" => 1,
        "KiB" => 1 << 10,
        "MiB" => 1 << 20,
        "GiB" => 1 << 30,
        "TiB" => 1 << 40,
        "KB" | "kB" => 1_000,
        "MB" => 1_000_000,
        "GB" => 1_000_000_000,
        _ => return None,
    };
    n.checked_mul(scale)
}

/// `n` bytes with the largest binary unit that divides it (`"64KiB"`,
/// `"1400"`).
pub fn format_bytes(n: u64) -> String {
    for (unit, scale) in [("GiB", 1u64 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)] {
        if n >= scale && n % scale == 0 {
            return format!("{}{unit}", n / scale);
        }
    }
    n.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse_in_binary_and_decimal_units_and_print_back() {
        assert_eq!(parse_bytes("1400"), Some(1400));
        assert_eq!(parse_bytes("64KiB"), Some(65_536));
        assert_eq!(parse_bytes(" 4 MiB "), Some(4 << 20));
        assert_eq!(parse_bytes("2GB"), Some(2_000_000_000));
        for bad in ["", "KiB", "4 mb", "-1", "1.5MiB", "99999999999999999999"] {
            assert_eq!(parse_bytes(bad), None, "{bad:?}");
        }
        for n in [0, 1400, 65_536, 60 * 1024, 4 << 20, 64 << 20, 3 << 30] {
            assert_eq!(parse_bytes(&format_bytes(n)), Some(n));
        }
        assert_eq!(format_bytes(60 * 1024), "60KiB");
    }
}
