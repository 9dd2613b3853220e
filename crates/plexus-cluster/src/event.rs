//! What a member reports about the cluster.

use std::fmt;
use std::sync::Arc;

use crate::member::{Member, MemberState};
use crate::split_brain::SplitBrainStrategy;

/// A change of the cluster as one member sees it.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum ClusterEvent {
    /// The first update a subscriber receives: the local member as it is.
    Subscribed {
        /// This member.
        local: Member,
    },
    /// No seed answered (or none was configured): this member formed a new
    /// cluster and is its first member.
    Formed {
        /// This member.
        local: Member,
    },
    /// A member admitted this one; it is `Joining` until a leader moves it
    /// `Up` (reported as [`ClusterEvent::MemberUp`] of itself).
    Admitted {
        /// This member.
        local: Member,
        /// The member that admitted it.
        by: Arc<str>,
    },
    /// A member (or a new incarnation of one) is joining.
    MemberJoined(Member),
    /// A member is up (this one included).
    MemberUp(Member),
    /// A member failed its direct and indirect probes; it may refute.
    MemberSuspected(Member),
    /// A suspect refuted its suspicion (a new incarnation).
    MemberReachable(Member),
    /// A suspicion was not refuted in time; the split-brain resolver counts
    /// the member as unreachable.
    MemberUnreachable(Member),
    /// A member is down.
    MemberDowned {
        /// The member.
        member: Member,
        /// Why.
        reason: DownReason,
    },
    /// A member is leaving gracefully.
    MemberLeaving(Member),
    /// A member is removed from the cluster.
    MemberRemoved(Member),
    /// This member was suspected and refuted it by raising its incarnation.
    Refuted {
        /// The new incarnation.
        incarnation: u64,
    },
    /// This member is down; it stops watching and (if configured) rejoins
    /// under a new incarnation.
    SelfDowned {
        /// Why.
        reason: DownReason,
    },
    /// This member is rejoining under a new incarnation.
    Rejoining {
        /// The new incarnation.
        incarnation: u64,
    },
    /// This member left the cluster.
    Left,
}

/// Why a member is down.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum DownReason {
    /// The split-brain resolver of this member decided.
    SplitBrain {
        /// The strategy.
        strategy: SplitBrainStrategy,
        /// Members reachable from this side (itself included).
        reachable: usize,
        /// Members that count.
        members: usize,
    },
    /// Another member's claim said so.
    ReportedBy(Arc<str>),
    /// A new life of the member (its process restarted at the same
    /// address, or it rejoined) replaced this one.
    Restarted {
        /// The new life's incarnation.
        incarnation: u64,
    },
    /// An operator downed it (a management call on this member).
    Operator,
}

/// Why a member could not be downed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum DownError {
    /// No member has that address.
    #[error("no member has the address {0}")]
    UnknownMember(String),
    /// The member is not joining, up or suspected.
    #[error("{member} is {state:?} already")]
    NotUp {
        /// The member.
        member: String,
        /// Its state.
        state: MemberState,
    },
    /// This member left or stopped.
    #[error("this member has stopped")]
    Stopped,
}

impl fmt::Display for DownReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::SplitBrain {
                strategy,
                reachable,
                members,
            } => write!(
                f,
                "split-brain resolver ({strategy}): {reachable} of {members} members reachable"
            ),
            Self::ReportedBy(by) => write!(f, "reported down by {by}"),
            Self::Operator => f.write_str("downed by an operator"),
            Self::Restarted { incarnation } => {
                write!(f, "replaced by its new life, incarnation {incarnation}")
            }
        }
    }
}

/// One readable line per event, for logs: `member up: tcp://10.0.0.7:4000
/// (incarnation 1795000000123, up)`.
impl fmt::Display for ClusterEvent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Subscribed { local } => write!(f, "subscribed: this member is {local}"),
            Self::Formed { local } => write!(f, "formed a new cluster: this member is {local}"),
            Self::Admitted { local, by } => write!(f, "admitted by {by}: this member is {local}"),
            Self::MemberJoined(m) => write!(f, "member joined: {m}"),
            Self::MemberUp(m) => write!(f, "member up: {m}"),
            Self::MemberSuspected(m) => write!(f, "member suspected: {m}"),
            Self::MemberReachable(m) => write!(f, "member reachable again: {m}"),
            Self::MemberUnreachable(m) => write!(f, "member unreachable: {m}"),
            Self::MemberDowned { member, reason } => {
                write!(f, "member downed: {member}: {reason}")
            }
            Self::MemberLeaving(m) => write!(f, "member leaving: {m}"),
            Self::MemberRemoved(m) => write!(f, "member removed: {m}"),
            Self::Refuted { incarnation } => write!(
                f,
                "refuted a suspicion of this member: now incarnation {incarnation}"
            ),
            Self::SelfDowned { reason } => write!(f, "this member is down: {reason}"),
            Self::Rejoining { incarnation } => {
                write!(f, "rejoining as a new life, incarnation {incarnation}")
            }
            Self::Left => f.write_str("this member left the cluster"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::member::MemberState;

    #[test]
    fn events_read_as_lines() {
        let m = Member {
            state: MemberState::Down,
            ..Member::joining("tcp://10.0.0.7:4000", 17, 1)
        };
        let downed = ClusterEvent::MemberDowned {
            member: m.clone(),
            reason: DownReason::Restarted { incarnation: 42 },
        };
        assert_eq!(
            downed.to_string(),
            "member downed: tcp://10.0.0.7:4000 (incarnation 17, down): \
             replaced by its new life, incarnation 42"
        );
        assert_eq!(
            ClusterEvent::MemberUp(Member {
                state: MemberState::Up,
                ..m
            })
            .to_string(),
            "member up: tcp://10.0.0.7:4000 (incarnation 17, up)"
        );
        assert_eq!(
            ClusterEvent::Left.to_string(),
            "this member left the cluster"
        );
    }
}
