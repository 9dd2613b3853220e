//! Layer options written in a stack spec: `slicing(mtu=1200, max_message=4MiB)`.
//!
//! # Syntax
//!
//! ```text
//! layer   := name [ "(" [ option { "," option } ] ")" ]
//! option  := key "=" value
//! name    := [A-Za-z0-9_-]+          key := [A-Za-z0-9_-]+
//! value   := any characters but "," "(" ")" "/" (surrounding spaces trimmed)
//! ```
//!
//! Values are typed by the key that takes them:
//!
//! | kind     | examples                         | meaning                          |
//! | -------- | -------------------------------- | -------------------------------- |
//! | count    | `8`, `1_000`                     | unsigned integer                 |
//! | size     | `1200`, `64KiB`, `4MiB`, `1GiB`  | bytes; binary suffixes           |
//! | duration | `250ms`, `2s`, `500us`           | `us`, `ms` or `s` suffix required |
//! | ratio    | `0.05`, `1e-3`                   | floating point                   |
//! | flag     | `true`, `false`                  | boolean                          |
//! | word     | `strict`, `lossy`                | one of the listed words          |
//!
//! An unknown key or a malformed value is an [`OptionError`], reported when the
//! spec is parsed, never when a link is built.

use std::time::Duration;

/// The options written after a layer's name in a spec, in order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LayerOptions {
    entries: Vec<(String, String)>,
}

/// One `key=value` option.
#[derive(Debug, Clone, Copy)]
pub struct LayerOption<'a> {
    key: &'a str,
    value: &'a str,
}

/// A bad option in a spec.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum OptionError {
    /// The layer has no option of this name.
    #[error("unknown option `{key}`")]
    Unknown {
        /// The key as written.
        key: String,
    },
    /// The value does not parse as the kind the option takes.
    #[error("option `{key}`: `{value}` is not {expected}")]
    Invalid {
        /// The key as written.
        key: String,
        /// The value as written.
        value: String,
        /// What was expected, e.g. "a size such as 64KiB".
        expected: &'static str,
    },
}

impl LayerOptions {
    /// No options.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds `key=value` (used by the spec parser and by code building options
    /// by hand).
    pub fn push(&mut self, key: impl Into<String>, value: impl Into<String>) {
        self.entries.push((key.into(), value.into()));
    }

    /// Whether there are no options.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The options in the order written.
    pub fn iter(&self) -> impl Iterator<Item = LayerOption<'_>> {
        self.entries
            .iter()
            .map(|(key, value)| LayerOption { key, value })
    }
}

impl<'a> LayerOption<'a> {
    /// The option's key.
    pub fn key(&self) -> &'a str {
        self.key
    }

    /// The option's raw value.
    pub fn value(&self) -> &'a str {
        self.value
    }

    /// The error for a key the layer does not know.
    pub fn unknown(&self) -> OptionError {
        OptionError::Unknown {
            key: self.key.to_owned(),
        }
    }

    fn invalid(&self, expected: &'static str) -> OptionError {
        OptionError::Invalid {
            key: self.key.to_owned(),
            value: self.value.to_owned(),
            expected,
        }
    }

    /// The value as a count.
    ///
    /// # Errors
    ///
    /// [`OptionError::Invalid`] if it is not an unsigned integer.
    pub fn count(&self) -> Result<u64, OptionError> {
        parse_u64(self.value).ok_or_else(|| self.invalid("an unsigned integer"))
    }

    /// The value as a count that fits `u32`.
    ///
    /// # Errors
    ///
    /// [`OptionError::Invalid`] if it is not an unsigned 32-bit integer.
    pub fn count_u32(&self) -> Result<u32, OptionError> {
        parse_u64(self.value)
            .and_then(|v| u32::try_from(v).ok())
            .ok_or_else(|| self.invalid("an unsigned 32-bit integer"))
    }

    /// The value as a count that fits `usize`.
    ///
    /// # Errors
    ///
    /// [`OptionError::Invalid`] if it is not an unsigned integer.
    pub fn count_usize(&self) -> Result<usize, OptionError> {
        parse_u64(self.value)
            .and_then(|v| usize::try_from(v).ok())
            .ok_or_else(|| self.invalid("an unsigned integer"))
    }

    /// The value as a size in bytes (`1200`, `64KiB`, `4MiB`, `1GiB`).
    ///
    /// # Errors
    ///
    /// [`OptionError::Invalid`] if it is not a size.
    pub fn size(&self) -> Result<usize, OptionError> {
        let v = self.value;
        let (num, mul) = if let Some(n) = v.strip_suffix("GiB") {
            (n, 1 << 30)
        } else if let Some(n) = v.strip_suffix("MiB") {
            (n, 1 << 20)
        } else if let Some(n) = v.strip_suffix("KiB") {
            (n, 1 << 10)
        } else if let Some(n) = v.strip_suffix('B') {
            (n, 1)
        } else {
            (v, 1)
        };
        parse_u64(num.trim())
            .and_then(|n| n.checked_mul(mul))
            .and_then(|n| usize::try_from(n).ok())
            .ok_or_else(|| self.invalid("a size such as 1200, 64KiB or 4MiB"))
    }

    /// The value as a duration (`500us`, `250ms`, `2s`).
    ///
    /// # Errors
    ///
    /// [`OptionError::Invalid`] if it is not a duration with a unit.
    pub fn duration(&self) -> Result<Duration, OptionError> {
        let v = self.value;
        let parsed = if let Some(n) = v.strip_suffix("us") {
            parse_u64(n.trim()).map(Duration::from_micros)
        } else if let Some(n) = v.strip_suffix("ms") {
            parse_u64(n.trim()).map(Duration::from_millis)
        } else if let Some(n) = v.strip_suffix('s') {
            parse_u64(n.trim()).map(Duration::from_secs)
        } else {
            None
        };
        parsed.ok_or_else(|| self.invalid("a duration such as 250ms or 2s"))
    }

    /// The value as a finite, non-negative floating point number.
    ///
    /// # Errors
    ///
    /// [`OptionError::Invalid`] if it is not one.
    pub fn ratio(&self) -> Result<f64, OptionError> {
        self.value
            .parse::<f64>()
            .ok()
            .filter(|v| v.is_finite() && *v >= 0.0)
            .ok_or_else(|| self.invalid("a non-negative number"))
    }

    /// The value as a probability in `0..=1`.
    ///
    /// # Errors
    ///
    /// [`OptionError::Invalid`] if it is not one.
    pub fn probability(&self) -> Result<f64, OptionError> {
        self.ratio()
            .ok()
            .filter(|v| *v <= 1.0)
            .ok_or_else(|| self.invalid("a probability between 0 and 1"))
    }

    /// The value as `true` or `false`.
    ///
    /// # Errors
    ///
    /// [`OptionError::Invalid`] otherwise.
    pub fn flag(&self) -> Result<bool, OptionError> {
        match self.value {
            "true" => Ok(true),
            "false" => Ok(false),
            _ => Err(self.invalid("true or false")),
        }
    }

    /// The value as one of `words`, returning its index.
    ///
    /// # Errors
    ///
    /// [`OptionError::Invalid`] if it is none of them (`expected` describes
    /// them, e.g. "strict or lossy").
    pub fn word(&self, words: &[&str], expected: &'static str) -> Result<usize, OptionError> {
        words
            .iter()
            .position(|w| *w == self.value)
            .ok_or_else(|| self.invalid(expected))
    }
}

fn parse_u64(s: &str) -> Option<u64> {
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit() || b == b'_') {
        return None;
    }
    let digits: String = s.chars().filter(|c| *c != '_').collect();
    digits.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn opt(key: &str, value: &str) -> LayerOptions {
        let mut o = LayerOptions::new();
        o.push(key, value);
        o
    }

    fn first(o: &LayerOptions) -> LayerOption<'_> {
        o.iter().next().expect("one option was pushed")
    }

    #[test]
    fn sizes_accept_binary_suffixes() {
        assert_eq!(first(&opt("m", "4MiB")).size(), Ok(4 << 20));
        assert_eq!(first(&opt("m", "64KiB")).size(), Ok(64 << 10));
        assert_eq!(first(&opt("m", "1_200")).size(), Ok(1200));
        assert!(first(&opt("m", "12x")).size().is_err());
    }

    #[test]
    fn durations_require_a_unit() {
        assert_eq!(
            first(&opt("t", "250ms")).duration(),
            Ok(Duration::from_millis(250))
        );
        assert_eq!(
            first(&opt("t", "2s")).duration(),
            Ok(Duration::from_secs(2))
        );
        assert!(first(&opt("t", "250")).duration().is_err());
    }

    #[test]
    fn probabilities_outside_unit_interval_are_rejected() {
        assert_eq!(first(&opt("p", "0.25")).probability(), Ok(0.25));
        assert!(first(&opt("p", "1.5")).probability().is_err());
        assert!(first(&opt("p", "NaN")).probability().is_err());
    }
}
