//! Settings of an emulated link: one [`DirectionConfig`] per direction and a
//! seed, validated on the way in so that the model never sees an impossible
//! value.
//!
//! Setting names in errors are the command line flags (`--loss`, ...), so a
//! message can be acted on directly.

use std::time::Duration;

/// Why a setting was refused. Nothing is changed when a setter fails.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// A probability outside 0..=100 %.
    #[error("{setting} {value}: a probability must be between 0 and 100 %")]
    ProbabilityOutOfRange {
        /// The flag, e.g. `--loss`.
        setting: &'static str,
        /// The refused value in percent.
        value: f64,
    },
    /// A negative (or not finite) duration.
    #[error("{setting} {value}: a duration must be a finite number of milliseconds, 0 or more")]
    InvalidDuration {
        /// The flag, e.g. `--delay-ms`.
        setting: &'static str,
        /// The refused value in milliseconds.
        value: f64,
    },
    /// A rate of zero, negative or not finite.
    #[error(
        "{setting} {value}: a rate must be more than 0 Mbit/s (leave the flag out for an unlimited link)"
    )]
    InvalidRate {
        /// The flag, e.g. `--rate-mbit`.
        setting: &'static str,
        /// The refused value in Mbit/s.
        value: f64,
    },
    /// A queue bound of zero packets.
    #[error("{setting} 0: the queue must hold at least 1 packet")]
    ZeroQueue {
        /// The flag, e.g. `--queue-packets`.
        setting: &'static str,
    },
    /// A value that is not a number, or not `A_TO_B/B_TO_A`.
    #[error("{setting} {value:?}: expected a number, or two numbers as A_TO_B/B_TO_A (e.g. 5/0)")]
    Malformed {
        /// The flag.
        setting: &'static str,
        /// The text given.
        value: String,
    },
}

/// The behaviour of one direction of the link.
///
/// The default is a perfect link: no loss, no delay, unlimited rate.
/// Setters validate and take the units of the command line (percent,
/// milliseconds, Mbit/s).
#[derive(Debug, Clone, PartialEq)]
pub struct DirectionConfig {
    loss: f64,
    delay: Duration,
    jitter: Duration,
    rate_bps: Option<u64>,
    queue_packets: usize,
    reorder: f64,
    reorder_gap: Duration,
    duplicate: f64,
}

impl Default for DirectionConfig {
    fn default() -> Self {
        DirectionConfig {
            loss: 0.0,
            delay: Duration::ZERO,
            jitter: Duration::ZERO,
            rate_bps: None,
            queue_packets: 1000,
            reorder: 0.0,
            reorder_gap: Duration::from_millis(5),
            duplicate: 0.0,
        }
    }
}

fn probability(setting: &'static str, pct: f64) -> Result<f64, ConfigError> {
    if pct.is_finite() && (0.0..=100.0).contains(&pct) {
        Ok(pct / 100.0)
    } else {
        Err(ConfigError::ProbabilityOutOfRange {
            setting,
            value: pct,
        })
    }
}

fn duration_ms(setting: &'static str, ms: f64) -> Result<Duration, ConfigError> {
    if (0.0..1e9).contains(&ms) {
        Ok(Duration::from_secs_f64(ms / 1000.0))
    } else {
        Err(ConfigError::InvalidDuration { setting, value: ms })
    }
}

impl DirectionConfig {
    /// Probability that a packet is dropped, in percent. Default 0.
    ///
    /// # Errors
    /// [`ConfigError::ProbabilityOutOfRange`] outside 0..=100.
    pub fn set_loss_percent(&mut self, pct: f64) -> Result<&mut Self, ConfigError> {
        self.loss = probability("--loss", pct)?;
        Ok(self)
    }

    /// Fixed one-way delay in milliseconds. Default 0.
    ///
    /// # Errors
    /// [`ConfigError::InvalidDuration`] if negative or not finite.
    pub fn set_delay_ms(&mut self, ms: f64) -> Result<&mut Self, ConfigError> {
        self.delay = duration_ms("--delay-ms", ms)?;
        Ok(self)
    }

    /// Jitter in milliseconds: each packet's delay is drawn uniformly from
    /// `delay ± jitter` (never below 0). Jitter never reorders packets: a
    /// packet leaves no earlier than the one before it. Default 0.
    ///
    /// # Errors
    /// [`ConfigError::InvalidDuration`] if negative or not finite.
    pub fn set_jitter_ms(&mut self, ms: f64) -> Result<&mut Self, ConfigError> {
        self.jitter = duration_ms("--jitter-ms", ms)?;
        Ok(self)
    }

    /// Bandwidth cap in Mbit/s (10^6 bits per second of IP packet bytes);
    /// `None` is unlimited (the default).
    ///
    /// # Errors
    /// [`ConfigError::InvalidRate`] if 0, negative or not finite.
    pub fn set_rate_mbit(&mut self, mbit: Option<f64>) -> Result<&mut Self, ConfigError> {
        self.rate_bps = match mbit {
            None => None,
            Some(m) if m.is_finite() && m > 0.0 && m <= 1e6 => Some(((m * 1e6) as u64).max(1)),
            Some(m) => {
                return Err(ConfigError::InvalidRate {
                    setting: "--rate-mbit",
                    value: m,
                })
            }
        };
        Ok(self)
    }

    /// Bound of the queue in front of the rate cap, in packets; a packet
    /// arriving at a full queue is dropped (tail drop). Only used with a
    /// rate cap. Default 1000; memory up to this many packets (≤ 64 KiB
    /// each, usually the 1500-byte MTU).
    ///
    /// # Errors
    /// [`ConfigError::ZeroQueue`] for 0.
    pub fn set_queue_packets(&mut self, packets: usize) -> Result<&mut Self, ConfigError> {
        if packets == 0 {
            return Err(ConfigError::ZeroQueue {
                setting: "--queue-packets",
            });
        }
        self.queue_packets = packets;
        Ok(self)
    }

    /// Probability in percent that a packet is held back by the reorder gap,
    /// so that packets sent after it overtake it. Default 0.
    ///
    /// # Errors
    /// [`ConfigError::ProbabilityOutOfRange`] outside 0..=100.
    pub fn set_reorder_percent(&mut self, pct: f64) -> Result<&mut Self, ConfigError> {
        self.reorder = probability("--reorder", pct)?;
        Ok(self)
    }

    /// How long a reordered packet is held back, in milliseconds. Default 5.
    ///
    /// # Errors
    /// [`ConfigError::InvalidDuration`] if negative or not finite.
    pub fn set_reorder_gap_ms(&mut self, ms: f64) -> Result<&mut Self, ConfigError> {
        self.reorder_gap = duration_ms("--reorder-gap-ms", ms)?;
        Ok(self)
    }

    /// Probability in percent that a packet is sent twice (the copy follows
    /// right after it, through the same queue). Default 0.
    ///
    /// # Errors
    /// [`ConfigError::ProbabilityOutOfRange`] outside 0..=100.
    pub fn set_duplicate_percent(&mut self, pct: f64) -> Result<&mut Self, ConfigError> {
        self.duplicate = probability("--duplicate", pct)?;
        Ok(self)
    }

    /// Loss probability, 0.0..=1.0.
    pub fn loss(&self) -> f64 {
        self.loss
    }
    /// Fixed delay.
    pub fn delay(&self) -> Duration {
        self.delay
    }
    /// Jitter (half-width of the uniform delay spread).
    pub fn jitter(&self) -> Duration {
        self.jitter
    }
    /// Rate cap in bits per second, `None` if unlimited.
    pub fn rate_bps(&self) -> Option<u64> {
        self.rate_bps
    }
    /// Queue bound in packets (only with a rate cap).
    pub fn queue_packets(&self) -> usize {
        self.queue_packets
    }
    /// Reorder probability, 0.0..=1.0.
    pub fn reorder(&self) -> f64 {
        self.reorder
    }
    /// Hold-back of a reordered packet.
    pub fn reorder_gap(&self) -> Duration {
        self.reorder_gap
    }
    /// Duplication probability, 0.0..=1.0.
    pub fn duplicate(&self) -> f64 {
        self.duplicate
    }
}

impl std::fmt::Display for DirectionConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let ms = |d: Duration| d.as_secs_f64() * 1000.0;
        write!(
            f,
            "loss {} %, delay {} ms, jitter {} ms, rate ",
            self.loss * 100.0,
            ms(self.delay),
            ms(self.jitter)
        )?;
        match self.rate_bps {
            Some(bps) => write!(
                f,
                "{} Mbit/s (queue {} packets)",
                bps as f64 / 1e6,
                self.queue_packets
            )?,
            None => f.write_str("unlimited")?,
        }
        write!(
            f,
            ", reorder {} % (gap {} ms), duplicate {} %",
            self.reorder * 100.0,
            ms(self.reorder_gap),
            self.duplicate * 100.0
        )
    }
}

/// Settings of the whole link: both directions and the seed of their RNGs.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct LinkConfig {
    /// Packets sent by side a to side b.
    pub a_to_b: DirectionConfig,
    /// Packets sent by side b to side a.
    pub b_to_a: DirectionConfig,
    /// Seed of the RNGs: a→b uses `seed`, b→a uses `seed ^ 0x9e37_79b9_7f4a_7c15`,
    /// so one seed replays both directions. Default 0.
    pub seed: u64,
}

/// A value given for both directions (`5`) or for each (`5/0`: a→b, b→a).
///
/// # Errors
/// [`ConfigError::Malformed`] if the text is neither.
pub fn parse_pair(setting: &'static str, text: &str) -> Result<(f64, f64), ConfigError> {
    let malformed = || ConfigError::Malformed {
        setting,
        value: text.to_owned(),
    };
    let num = |s: &str| s.trim().parse::<f64>().map_err(|_| malformed());
    match text.split_once('/') {
        None => {
            let v = num(text)?;
            Ok((v, v))
        }
        Some((ab, ba)) => Ok((num(ab)?, num(ba)?)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loss_above_100_percent_is_refused_with_the_flag_named() {
        let err = DirectionConfig::default()
            .set_loss_percent(120.0)
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            "--loss 120: a probability must be between 0 and 100 %"
        );
    }

    #[test]
    fn negative_delay_and_zero_rate_are_refused() {
        let mut c = DirectionConfig::default();
        assert!(matches!(
            c.set_delay_ms(-1.0),
            Err(ConfigError::InvalidDuration { .. })
        ));
        assert!(matches!(
            c.set_rate_mbit(Some(0.0)),
            Err(ConfigError::InvalidRate { .. })
        ));
        assert!(matches!(
            c.set_jitter_ms(f64::NAN),
            Err(ConfigError::InvalidDuration { .. })
        ));
        assert!(matches!(
            c.set_queue_packets(0),
            Err(ConfigError::ZeroQueue { .. })
        ));
        assert_eq!(
            c,
            DirectionConfig::default(),
            "a refused setter changes nothing"
        );
    }

    #[test]
    fn pair_takes_one_value_for_both_or_one_per_direction() {
        assert_eq!(parse_pair("--loss", "5").unwrap(), (5.0, 5.0));
        assert_eq!(parse_pair("--loss", "5/0.5").unwrap(), (5.0, 0.5));
        assert!(parse_pair("--loss", "five").is_err());
        assert!(parse_pair("--loss", "1/2/3").is_err());
    }
}
