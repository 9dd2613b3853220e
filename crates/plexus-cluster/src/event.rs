//! What a member reports about the cluster.

use std::fmt;
use std::sync::Arc;

use crate::member::Member;
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
        }
    }
}
