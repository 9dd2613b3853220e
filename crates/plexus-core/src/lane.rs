//! Lanes: how a message to a remote actor travels.
//!
//! A link to a peer node is a set of lanes, each carried by a stack of its
//! own (possibly over another transport): [`Lane::Control`] for system
//! frames (resolves, monitors, `Down`, links, receipts, ask replies),
//! [`Lane::Default`] for ordinary messages, [`Lane::Bulk`] for large ones
//! and [`Lane::Unreliable`] for messages that may be lost. A node maps
//! lanes to stacks in its configuration; a lane without a mapping rides
//! the default lane's link.
//!
//! A message takes its type's lane ([`RemoteMessage::LANE`], set with
//! `remote_message!(T = "name", lane = Bulk)`), or the one a send names:
//! [`ActorRef::via`](crate::ActorRef::via) with a lane, or
//! [`ActorRef::with_properties`](crate::ActorRef::with_properties) with
//! TAPS-style [`MessageProperties`] (RFC 9622, section 9.1.3) that map to a
//! lane. Messages from one sender to one actor stay in order within a lane;
//! across lanes there is no order.
//!
//! Local actors ignore lanes: a local message is moved into the mailbox.
//!
//! [`RemoteMessage::LANE`]: crate::remote::RemoteMessage::LANE

use std::fmt;
use std::str::FromStr;

/// A lane of a link to a peer node. See the [module docs](self).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub enum Lane {
    /// System frames (resolves, monitors, `Down`, links, exits, receipts,
    /// ask replies) and urgent messages: kept clear of bulk traffic.
    Control,
    /// Ordinary messages.
    #[default]
    Default,
    /// Large messages and transfers.
    Bulk,
    /// Messages that may be lost: no retransmission where the lane's stack
    /// has none. A receipt on this lane says "sent", not "delivered".
    Unreliable,
}

impl Lane {
    /// Every lane, in index order.
    pub const ALL: [Lane; 4] = [Lane::Control, Lane::Default, Lane::Bulk, Lane::Unreliable];
    /// The number of lanes.
    pub const COUNT: usize = 4;

    /// The lane's index, `0..COUNT`, in [`ALL`](Self::ALL) order.
    pub const fn index(self) -> usize {
        match self {
            Lane::Control => 0,
            Lane::Default => 1,
            Lane::Bulk => 2,
            Lane::Unreliable => 3,
        }
    }

    /// The lane of `index`, if below [`COUNT`](Self::COUNT).
    pub const fn from_index(index: usize) -> Option<Lane> {
        match index {
            0 => Some(Lane::Control),
            1 => Some(Lane::Default),
            2 => Some(Lane::Bulk),
            3 => Some(Lane::Unreliable),
            _ => None,
        }
    }

    /// The lane's name in configuration: `control`, `default`, `bulk`,
    /// `unreliable`.
    pub const fn name(self) -> &'static str {
        match self {
            Lane::Control => "control",
            Lane::Default => "default",
            Lane::Bulk => "bulk",
            Lane::Unreliable => "unreliable",
        }
    }

    /// What a stack must guarantee to carry this lane: the control lane's
    /// frames (monitors, `Down`, receipts) must neither be lost nor
    /// reordered; the others carry whatever their stack gives, and a send
    /// that needs more says so with [`MessageProperties`].
    pub const fn needs(self) -> Requirements {
        match self {
            Lane::Control => Requirements {
                reliable: true,
                ordered: true,
            },
            _ => Requirements {
                reliable: false,
                ordered: false,
            },
        }
    }
}

impl fmt::Display for Lane {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A lane name that is none of `control`, `default`, `bulk`, `unreliable`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown lane {name:?}: the lanes are control, default, bulk and unreliable")]
pub struct UnknownLane {
    /// The name given.
    pub name: String,
}

impl FromStr for Lane {
    type Err = UnknownLane;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Lane::ALL
            .into_iter()
            .find(|l| l.name() == s.trim())
            .ok_or_else(|| UnknownLane { name: s.to_owned() })
    }
}

/// What a send needs of the stack that carries it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Requirements {
    /// Nothing lost, nothing duplicated while the link lives.
    pub reliable: bool,
    /// Messages of one sender to one actor arrive in the order sent.
    pub ordered: bool,
}

impl fmt::Display for Requirements {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (self.reliable, self.ordered) {
            (true, true) => f.write_str("reliable and ordered"),
            (true, false) => f.write_str("reliable"),
            (false, true) => f.write_str("ordered"),
            (false, false) => f.write_str("nothing"),
        }
    }
}

/// How much of the path's capacity a message wants (RFC 9622's capacity
/// profile).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum CapacityProfile {
    /// No preference: the default lane.
    #[default]
    Default,
    /// Small, latency-sensitive messages: the control lane.
    LowLatency,
    /// Throughput over latency: the bulk lane.
    CapacitySeeking,
    /// Only spare capacity: the bulk lane.
    Scavenger,
}

/// TAPS-style properties of one send (RFC 9622): what it needs of the
/// lane that carries it. [`lane`](Self::lane) picks the lane; a node
/// refuses the send with an error if that lane's stack cannot honour
/// [`reliable`](Self::reliable) or [`ordered`](Self::ordered), rather than
/// carry it with less than asked.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct MessageProperties {
    /// The message must not be lost (default `true`). `false` picks the
    /// unreliable lane.
    pub reliable: bool,
    /// The message must stay in order with the sender's others to the same
    /// actor (default `true`).
    pub ordered: bool,
    /// Urgent: the control lane, kept clear of bulk traffic.
    pub urgent: bool,
    /// The capacity profile.
    pub capacity: CapacityProfile,
}

impl Default for MessageProperties {
    fn default() -> Self {
        Self {
            reliable: true,
            ordered: true,
            urgent: false,
            capacity: CapacityProfile::Default,
        }
    }
}

impl MessageProperties {
    /// The lane these properties pick: unreliable if loss is allowed,
    /// control if urgent or low-latency, bulk if capacity-seeking or
    /// scavenger, else default.
    pub const fn lane(&self) -> Lane {
        if !self.reliable {
            return Lane::Unreliable;
        }
        if self.urgent {
            return Lane::Control;
        }
        match self.capacity {
            CapacityProfile::LowLatency => Lane::Control,
            CapacityProfile::CapacitySeeking | CapacityProfile::Scavenger => Lane::Bulk,
            CapacityProfile::Default => Lane::Default,
        }
    }

    /// What the carrying stack must guarantee.
    pub const fn requires(&self) -> Requirements {
        Requirements {
            reliable: self.reliable,
            ordered: self.ordered,
        }
    }
}

/// A send whose properties the lane they pick cannot honour, refused
/// before anything was sent.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("send to {actor}: the {lane} lane is carried by `{stack}`, which is not {missing}; no message was sent")]
pub struct RouteError {
    /// The actor the message was for.
    pub actor: crate::ActorId,
    /// The lane the properties picked.
    pub lane: Lane,
    /// The stack spec that carries the lane.
    pub stack: String,
    /// What the stack lacks.
    pub missing: Requirements,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn properties_pick_lanes() {
        let p = MessageProperties::default();
        assert_eq!(p.lane(), Lane::Default);
        let bulk = MessageProperties {
            capacity: CapacityProfile::CapacitySeeking,
            ..p
        };
        assert_eq!(bulk.lane(), Lane::Bulk);
        let urgent = MessageProperties { urgent: true, ..p };
        assert_eq!(urgent.lane(), Lane::Control);
        let lossy = MessageProperties {
            reliable: false,
            ordered: false,
            urgent: true,
            ..p
        };
        assert_eq!(lossy.lane(), Lane::Unreliable, "loss allowed wins");
        assert_eq!(
            lossy.requires(),
            Requirements {
                reliable: false,
                ordered: false
            }
        );
    }

    #[test]
    fn lane_names_round_trip_and_unknown_ones_are_refused() {
        for lane in Lane::ALL {
            assert_eq!(lane.name().parse::<Lane>(), Ok(lane));
            assert_eq!(Lane::from_index(lane.index()), Some(lane));
        }
        let err = "fast".parse::<Lane>().unwrap_err();
        assert!(err.to_string().contains("\"fast\""), "{err}");
        assert_eq!(Lane::from_index(4), None);
    }
}
