//! Split-brain resolution: which side of a partition stays up.
//!
//! When some members are unreachable and the picture has been stable for
//! `stable_after`, each reachable member applies the strategy to its own
//! view: either its side keeps running and downs the unreachable members, or
//! its side is the losing one and it downs itself, saying why. Every member
//! of one side sees the same unreachable set once it is stable, so a side
//! decides as one. The strategies are Akka's split-brain resolver's:
//!
//! * **keep-majority**: the side with more than half of the members stays;
//!   on an exact half, the side with the lowest address. Never two sides.
//! * **static-quorum(n)**: a side with at least `n` members stays. With
//!   `n` more than half of the cluster's size, never two sides; if no side
//!   has `n`, all go down.
//! * **keep-oldest**: the side with the oldest member (first up) stays; with
//!   `down_if_alone`, the oldest alone downs itself when the others are
//!   together.
//! * **down-all**: every side downs itself (for deployments that restart
//!   members on their own).

use std::fmt;

/// How partitions are resolved. See the [module docs](self).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SplitBrainStrategy {
    /// The majority side stays (default).
    KeepMajority,
    /// A side of at least `size` members stays.
    StaticQuorum {
        /// Members a side needs.
        size: usize,
    },
    /// The side of the oldest member stays.
    KeepOldest {
        /// The oldest downs itself when it is alone and the rest are
        /// together.
        down_if_alone: bool,
    },
    /// Every side downs itself.
    DownAll,
}

impl fmt::Display for SplitBrainStrategy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::KeepMajority => f.write_str("keep-majority"),
            Self::StaticQuorum { size } => write!(f, "static-quorum({size})"),
            Self::KeepOldest { down_if_alone } => {
                write!(f, "keep-oldest(down_if_alone={down_if_alone})")
            }
            Self::DownAll => f.write_str("down-all"),
        }
    }
}

impl SplitBrainStrategy {
    /// The strategy's name in configuration files and on the command line:
    /// `keep-majority`, `static-quorum=N`, `keep-oldest`,
    /// `keep-oldest-down-if-alone`, `down-all`.
    pub fn config_name(&self) -> String {
        match self {
            Self::KeepMajority => "keep-majority".into(),
            Self::StaticQuorum { size } => format!("static-quorum={size}"),
            Self::KeepOldest {
                down_if_alone: false,
            } => "keep-oldest".into(),
            Self::KeepOldest {
                down_if_alone: true,
            } => "keep-oldest-down-if-alone".into(),
            Self::DownAll => "down-all".into(),
        }
    }
}

/// A strategy name that names no strategy.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "`{0}` is not a split-brain strategy; expected keep-majority, keep-oldest, \
     keep-oldest-down-if-alone, down-all or static-quorum=N (N >= 1)"
)]
pub struct UnknownStrategy(pub String);

impl std::str::FromStr for SplitBrainStrategy {
    type Err = UnknownStrategy;

    fn from_str(s: &str) -> Result<Self, UnknownStrategy> {
        Ok(match s {
            "keep-majority" => Self::KeepMajority,
            "keep-oldest" => Self::KeepOldest {
                down_if_alone: false,
            },
            "keep-oldest-down-if-alone" => Self::KeepOldest {
                down_if_alone: true,
            },
            "down-all" => Self::DownAll,
            _ => match s
                .strip_prefix("static-quorum=")
                .and_then(|n| n.parse::<usize>().ok())
            {
                Some(size) if size >= 1 => Self::StaticQuorum { size },
                _ => return Err(UnknownStrategy(s.to_owned())),
            },
        })
    }
}

impl serde::Serialize for SplitBrainStrategy {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.config_name())
    }
}

impl<'de> serde::Deserialize<'de> for SplitBrainStrategy {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let name = String::deserialize(d)?;
        name.parse().map_err(serde::de::Error::custom)
    }
}

/// One member as the resolver sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Seen<'a> {
    /// The member's address.
    pub address: &'a str,
    /// Its up-number (lower is older; 0 if unknown).
    pub up_number: u64,
    /// Whether it is on this side (reachable from here).
    pub reachable: bool,
}

/// What a side does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// This side stays: down the unreachable members.
    DownUnreachable,
    /// This side loses: down itself.
    DownSelf,
}

/// Applies `strategy` to `members` (this side's view of every member that
/// counts, itself included).
pub fn decide(strategy: SplitBrainStrategy, members: &[Seen<'_>]) -> Decision {
    let total = members.len();
    let reachable = members.iter().filter(|m| m.reachable).count();
    let stay = match strategy {
        SplitBrainStrategy::KeepMajority => {
            if 2 * reachable != total {
                2 * reachable > total
            } else {
                // An exact half: the side with the lowest address stays.
                members
                    .iter()
                    .min_by_key(|m| m.address)
                    .is_some_and(|m| m.reachable)
            }
        }
        SplitBrainStrategy::StaticQuorum { size } => reachable >= size,
        SplitBrainStrategy::KeepOldest { down_if_alone } => {
            let oldest = members.iter().min_by_key(|m| {
                (
                    if m.up_number == 0 {
                        u64::MAX
                    } else {
                        m.up_number
                    },
                    m.address,
                )
            });
            match oldest {
                Some(o) if o.reachable => !(down_if_alone && reachable == 1 && total > 2),
                Some(_) => down_if_alone && reachable == total - 1 && total > 2,
                None => false,
            }
        }
        SplitBrainStrategy::DownAll => false,
    };
    if stay {
        Decision::DownUnreachable
    } else {
        Decision::DownSelf
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn view(names: &[&'static str], reachable: &[&str]) -> Vec<Seen<'static>> {
        names
            .iter()
            .enumerate()
            .map(|(i, n)| Seen {
                address: n,
                up_number: i as u64 + 1,
                reachable: reachable.contains(n),
            })
            .collect()
    }

    const FIVE: [&str; 5] = ["a", "b", "c", "d", "e"];

    /// Both sides of every split of five members, under every strategy:
    /// never both stay.
    #[test]
    fn no_strategy_keeps_two_sides() {
        let strategies = [
            SplitBrainStrategy::KeepMajority,
            SplitBrainStrategy::StaticQuorum { size: 3 },
            SplitBrainStrategy::KeepOldest {
                down_if_alone: false,
            },
            SplitBrainStrategy::KeepOldest {
                down_if_alone: true,
            },
            SplitBrainStrategy::DownAll,
        ];
        for mask in 1u32..31 {
            let side: Vec<&str> = FIVE
                .iter()
                .enumerate()
                .filter(|(i, _)| mask & (1 << i) != 0)
                .map(|(_, n)| *n)
                .collect();
            let other: Vec<&str> = FIVE.iter().filter(|n| !side.contains(n)).copied().collect();
            for s in strategies {
                let a = decide(s, &view(&FIVE, &side));
                let b = decide(s, &view(&FIVE, &other));
                assert!(
                    !(a == Decision::DownUnreachable && b == Decision::DownUnreachable),
                    "{s}: {side:?} and {other:?} both stay"
                );
            }
        }
    }

    #[test]
    fn keep_majority_keeps_the_larger_side_and_breaks_ties_by_address() {
        let s = SplitBrainStrategy::KeepMajority;
        assert_eq!(
            decide(s, &view(&FIVE, &["a", "b", "c"])),
            Decision::DownUnreachable
        );
        assert_eq!(decide(s, &view(&FIVE, &["d", "e"])), Decision::DownSelf);
        let four = ["a", "b", "c", "d"];
        assert_eq!(
            decide(s, &view(&four, &["a", "d"])),
            Decision::DownUnreachable
        );
        assert_eq!(decide(s, &view(&four, &["b", "c"])), Decision::DownSelf);
    }

    #[test]
    fn keep_oldest_follows_the_first_up() {
        let s = SplitBrainStrategy::KeepOldest {
            down_if_alone: false,
        };
        assert_eq!(decide(s, &view(&FIVE, &["a"])), Decision::DownUnreachable);
        assert_eq!(
            decide(s, &view(&FIVE, &["b", "c", "d", "e"])),
            Decision::DownSelf
        );
        let alone = SplitBrainStrategy::KeepOldest {
            down_if_alone: true,
        };
        assert_eq!(decide(alone, &view(&FIVE, &["a"])), Decision::DownSelf);
        assert_eq!(
            decide(alone, &view(&FIVE, &["b", "c", "d", "e"])),
            Decision::DownUnreachable
        );
    }

    #[test]
    fn static_quorum_and_down_all() {
        let q = SplitBrainStrategy::StaticQuorum { size: 3 };
        assert_eq!(
            decide(q, &view(&FIVE, &["a", "b", "c"])),
            Decision::DownUnreachable
        );
        assert_eq!(decide(q, &view(&FIVE, &["a", "b"])), Decision::DownSelf);
        assert_eq!(
            decide(SplitBrainStrategy::DownAll, &view(&FIVE, &FIVE)),
            Decision::DownSelf
        );
    }
}
