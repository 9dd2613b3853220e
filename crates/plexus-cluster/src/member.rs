//! Members, their states and the rule that orders claims about them.
//!
//! A claim about a member is `(life, incarnation, state)`: the *life* is
//! the incarnation its current process (or its rejoin after being downed)
//! started at. Refutations raise the incarnation within a life; a restart
//! at the same address is a new life, and a claim of a new life ends the
//! old one (it is downed and removed) rather than continuing it (Akka's
//! unique address: host, port and a uid per start).
//!
//! Claims are ordered lexicographically by `(life, gone, incarnation,
//! state)`, where `gone` says the state is `Down` or `Removed`: a later
//! life wins; within a life a claim that the member is gone wins over any
//! claim that it is alive; otherwise a higher incarnation wins, and at the
//! same incarnation a later state in `Joining < Up < Suspect < Leaving <
//! Down < Removed`. Merging two views is taking the greater claim per
//! member, a join-semilattice, so gossip converges whatever order claims
//! arrive in (SWIM, Das et al. 2002, sec. 4.2; memberlist's precedence
//! rules, with Akka's rule that a downed member's uid never comes back).
//! The consequences, written out in `docs/CLUSTER.md`:
//!
//! * a suspicion is refuted only by the member itself, by raising its
//!   incarnation (nobody else may raise it);
//! * `Down` and `Removed` are final for a life: a member downed while
//!   alive comes back only as a new life, which passes through `Joining`
//!   again. A refutation it made before it heard of its downing (a higher
//!   incarnation of the same life) does not bring it back: the others acted
//!   on the downing (the sharding moved its shards away), and the member
//!   learns of it from the `Down` claim, whatever its incarnation;
//! * a member that was never `Up` at an incarnation cannot be `Up` by a
//!   stale claim once it is `Suspect`, `Leaving` or `Down` there.
//!
//! A new life starts above every incarnation of the earlier ones (a
//! restart takes a higher incarnation, a rejoin the next one), so a later
//! life is also a higher incarnation.

use std::cmp::Ordering;
use std::fmt;
use std::sync::Arc;

/// A member's state. The order of the variants is the precedence of claims
/// at one incarnation (see the [module docs](self)).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum MemberState {
    /// Admitted by a member, waiting for a leader to move it `Up`; owns no
    /// keys of the ring yet.
    Joining,
    /// A full member: owns keys, is watched, counts for split-brain
    /// decisions.
    Up,
    /// Failed its probes (direct and indirect); refutable by the member
    /// raising its incarnation. Still owns its keys.
    Suspect,
    /// Leaving gracefully; no longer owns keys.
    Leaving,
    /// Declared down (by the split-brain resolver, or by itself on the
    /// losing side of a partition). Final for this incarnation.
    Down,
    /// Gone from the cluster; kept a while as a tombstone so stale gossip
    /// cannot bring it back.
    Removed,
}

impl MemberState {
    /// The state's wire code.
    pub(crate) fn code(self) -> u8 {
        match self {
            Self::Joining => 0,
            Self::Up => 1,
            Self::Suspect => 2,
            Self::Leaving => 3,
            Self::Down => 4,
            Self::Removed => 5,
        }
    }

    /// The state of a wire code.
    pub(crate) fn from_code(code: u8) -> Option<Self> {
        Some(match code {
            0 => Self::Joining,
            1 => Self::Up,
            2 => Self::Suspect,
            3 => Self::Leaving,
            4 => Self::Down,
            5 => Self::Removed,
            _ => return None,
        })
    }

    /// Whether a member in this state is part of the running cluster (it is
    /// probed and answers probes).
    pub fn is_live(self) -> bool {
        matches!(self, Self::Joining | Self::Up | Self::Suspect)
    }

    /// Whether a member in this state owns keys of the ring.
    pub fn owns_keys(self) -> bool {
        matches!(self, Self::Up | Self::Suspect)
    }

    /// The state's name (`joining`, `up`, `suspect`, `leaving`, `down`,
    /// `removed`): in logs, metric labels and the management answers.
    pub fn name(self) -> &'static str {
        match self {
            Self::Joining => "joining",
            Self::Up => "up",
            Self::Suspect => "suspect",
            Self::Leaving => "leaving",
            Self::Down => "down",
            Self::Removed => "removed",
        }
    }

    /// Whether a member in this state is gone for good in its life
    /// (`Down` or `Removed`): only a new life brings it back.
    pub fn is_gone(self) -> bool {
        matches!(self, Self::Down | Self::Removed)
    }

    /// Whether a member in this state counts for split-brain decisions.
    pub fn counts_for_quorum(self) -> bool {
        matches!(self, Self::Up | Self::Suspect | Self::Leaving)
    }
}

impl fmt::Display for MemberState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// What one member knows of another (or of itself): the claim that gossip
/// carries.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Member {
    /// Where the member is reached: the base URI of its node
    /// (`tcp://10.0.0.7:4000`), or a simulator's name for it.
    pub address: Arc<str>,
    /// Raised by the member to refute a suspicion, and on every new life
    /// (a restart, or a rejoin after being downed).
    pub incarnation: u64,
    /// The incarnation this life of the member started at (at most
    /// `incarnation`): kept through refutations, new on a restart or a
    /// rejoin. A claim of another life is about another process at the
    /// address.
    pub life: u64,
    /// The member's state at that incarnation.
    pub state: MemberState,
    /// Relative share of the ring (virtual nodes = weight × the configured
    /// count per weight).
    pub weight: u16,
    /// The order in which members went `Up` (1 = the first); 0 while
    /// joining. Lower is older (for keep-oldest).
    pub up_number: u64,
}

impl Member {
    /// A joining member at the start of a life (its `life` is
    /// `incarnation`).
    pub fn joining(address: impl Into<Arc<str>>, incarnation: u64, weight: u16) -> Self {
        Self {
            address: address.into(),
            incarnation,
            life: incarnation,
            state: MemberState::Joining,
            weight,
            up_number: 0,
        }
    }

    /// How this claim compares with `other` about the same member: greater
    /// wins (see the [module docs](self)).
    pub fn precedence(&self, other: &Member) -> Ordering {
        let key = |m: &Member| (m.life, m.state.is_gone(), m.incarnation, m.state);
        key(self).cmp(&key(other))
    }

    /// Whether this claim replaces `other`.
    pub fn supersedes(&self, other: &Member) -> bool {
        self.precedence(other) == Ordering::Greater
    }

    /// Whether this claim is about another life of the member than `other`
    /// (a restarted process, or a rejoin after being downed).
    pub fn is_other_life(&self, other: &Member) -> bool {
        self.life != other.life
    }
}

impl fmt::Display for Member {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} (incarnation {}, {})",
            self.address, self.incarnation, self.state
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn state() -> impl Strategy<Value = MemberState> {
        (0u8..6).prop_map(|c| MemberState::from_code(c).expect("codes 0..6 exist"))
    }

    fn claim() -> impl Strategy<Value = Member> {
        (0u64..3, 0u64..4, state()).prop_map(|(life, above, state)| Member {
            address: "a".into(),
            incarnation: life * 4 + above,
            life: life * 4,
            state,
            weight: 1,
            up_number: 0,
        })
    }

    fn merge(a: &Member, b: &Member) -> Member {
        if b.supersedes(a) {
            b.clone()
        } else {
            a.clone()
        }
    }

    proptest! {
        /// Gossip converges whatever order claims arrive in: merging is
        /// commutative, associative and idempotent.
        #[test]
        fn merging_claims_is_a_semilattice(a in claim(), b in claim(), c in claim()) {
            prop_assert_eq!(merge(&a, &b).precedence(&merge(&b, &a)), Ordering::Equal);
            prop_assert_eq!(merge(&merge(&a, &b), &c), merge(&a, &merge(&b, &c)));
            prop_assert_eq!(merge(&a, &a), a);
        }
    }

    #[test]
    fn only_a_new_incarnation_brings_a_member_back() {
        let down = Member {
            state: MemberState::Down,
            ..Member::joining("a", 3, 1)
        };
        let stale_up = Member {
            state: MemberState::Up,
            ..Member::joining("a", 3, 1)
        };
        assert!(!stale_up.supersedes(&down));
        assert!(Member::joining("a", 4, 1).supersedes(&down));
        let suspect = Member {
            state: MemberState::Suspect,
            ..stale_up.clone()
        };
        assert!(suspect.supersedes(&stale_up));
        assert!(!stale_up.supersedes(&suspect));
    }

    /// A refutation the member made before it heard of its downing (a
    /// higher incarnation of the same life) does not undo the downing; a
    /// new life does.
    #[test]
    fn a_downed_life_stays_down_whatever_its_incarnation() {
        let down = Member {
            state: MemberState::Down,
            ..Member::joining("a", 3, 1)
        };
        let refuted = Member {
            incarnation: 5,
            state: MemberState::Up,
            ..Member::joining("a", 3, 1)
        };
        assert!(down.supersedes(&refuted));
        assert!(!refuted.supersedes(&down));
        let removed = Member {
            state: MemberState::Removed,
            ..down.clone()
        };
        assert!(removed.supersedes(&down));
        assert!(Member::joining("a", 6, 1).supersedes(&removed));
    }

    #[test]
    fn wire_codes_round_trip() {
        for code in 0..=255u8 {
            if let Some(s) = MemberState::from_code(code) {
                assert_eq!(s.code(), code);
            }
        }
        assert!(MemberState::from_code(6).is_none());
    }
}
