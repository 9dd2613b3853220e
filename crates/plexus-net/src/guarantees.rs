//! What a stack guarantees its messages: [`Guarantees`], and how each layer
//! changes what the layers below give ([`GuaranteeEffect`]).
//!
//! A transport gives a starting point ([`TransportProfile::guarantees`]:
//! TCP is reliable and ordered, UDP neither); each layer of a spec then
//! adds or removes guarantees (`delivery` makes a lossy link reliable,
//! `ordering` restores order, `faults(drop=0.1)` takes reliability away).
//! [`StackSpec::guarantees`] folds them once the spec is fit to its
//! transport. The remote layer uses this to refuse, at configuration time,
//! a control lane on a lossy stack, and at send time a message asking for
//! more than its lane's stack gives.
//!
//! [`TransportProfile::guarantees`]: crate::TransportProfile::guarantees
//! [`StackSpec::guarantees`]: crate::StackSpec::guarantees

use std::fmt;

/// What a stack guarantees the messages it carries while the link lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Guarantees {
    /// No message is lost or duplicated.
    pub reliable: bool,
    /// Messages arrive in the order they were sent.
    pub ordered: bool,
}

impl Guarantees {
    /// Nothing: datagrams may be lost, duplicated and reordered.
    pub const NONE: Guarantees = Guarantees {
        reliable: false,
        ordered: false,
    };
    /// Reliable and ordered: a byte stream, or a datagram stack with
    /// `delivery / ordering`.
    pub const RELIABLE_ORDERED: Guarantees = Guarantees {
        reliable: true,
        ordered: true,
    };

    /// What `needed` asks for that `self` does not give (`NONE` if
    /// nothing).
    pub const fn missing(self, needed: Guarantees) -> Guarantees {
        Guarantees {
            reliable: needed.reliable && !self.reliable,
            ordered: needed.ordered && !self.ordered,
        }
    }

    /// Whether this is [`NONE`](Self::NONE).
    pub const fn is_none(self) -> bool {
        !self.reliable && !self.ordered
    }
}

impl fmt::Display for Guarantees {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match (self.reliable, self.ordered) {
            (true, true) => "reliable and ordered",
            (true, false) => "reliable",
            (false, true) => "ordered",
            (false, false) => "neither reliable nor ordered",
        })
    }
}

/// How a layer changes the guarantees of the layers below it: first
/// [`removes`](Self::removes), then [`adds`](Self::adds).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct GuaranteeEffect {
    /// Guarantees the layer gives whatever is below (`delivery`: reliable).
    pub adds: Guarantees,
    /// Guarantees the layer takes away (`faults` with drops: reliable).
    pub removes: Guarantees,
}

impl GuaranteeEffect {
    /// Changes nothing (most layers: framing, compression, batching...).
    pub const KEEP: GuaranteeEffect = GuaranteeEffect {
        adds: Guarantees::NONE,
        removes: Guarantees::NONE,
    };

    /// Gives `g` whatever is below.
    pub const fn adds(g: Guarantees) -> Self {
        Self {
            adds: g,
            removes: Guarantees::NONE,
        }
    }

    /// Takes `g` away.
    pub const fn removes(g: Guarantees) -> Self {
        Self {
            adds: Guarantees::NONE,
            removes: g,
        }
    }

    /// The guarantees above the layer, given those below.
    pub const fn apply(self, below: Guarantees) -> Guarantees {
        Guarantees {
            reliable: (below.reliable && !self.removes.reliable) || self.adds.reliable,
            ordered: (below.ordered && !self.removes.ordered) || self.adds.ordered,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{LayerRegistry, StackSpec, TransportProfile};

    fn of(spec: &str, profile: TransportProfile) -> Guarantees {
        let spec = StackSpec::parse(spec, &LayerRegistry::default()).unwrap();
        assert_eq!(spec.guarantees(), None, "not fit yet");
        let name = spec.transport().to_owned();
        spec.fit(&name, profile).unwrap().guarantees().unwrap()
    }

    #[test]
    fn stacks_report_what_their_transport_and_layers_give() {
        let udp = TransportProfile::datagrams(Some(65_507));
        let tcp = TransportProfile::byte_stream();
        assert_eq!(of("udp / slicing", udp), Guarantees::NONE);
        assert_eq!(
            of("udp / slicing / delivery / ordering", udp),
            Guarantees::RELIABLE_ORDERED
        );
        assert_eq!(
            of("udp / slicing / delivery", udp),
            Guarantees {
                reliable: true,
                ordered: false
            }
        );
        assert_eq!(of("tcp / framing", tcp), Guarantees::RELIABLE_ORDERED);
        assert_eq!(
            of("tcp / framing / faults(drop=0.1)", tcp),
            Guarantees {
                reliable: false,
                ordered: true
            }
        );
        assert_eq!(
            of("tcp / framing / faults(drop=0)", tcp),
            Guarantees::RELIABLE_ORDERED,
            "a fault layer that drops nothing takes nothing away"
        );
    }

    #[test]
    fn effects_fold_bottom_up() {
        let lossy = GuaranteeEffect::removes(Guarantees::RELIABLE_ORDERED);
        let delivery = GuaranteeEffect::adds(Guarantees {
            reliable: true,
            ordered: false,
        });
        let ordering = GuaranteeEffect::adds(Guarantees {
            reliable: false,
            ordered: true,
        });
        let g = lossy.apply(Guarantees::RELIABLE_ORDERED);
        assert_eq!(g, Guarantees::NONE);
        assert_eq!(
            ordering.apply(delivery.apply(g)),
            Guarantees::RELIABLE_ORDERED
        );
        assert_eq!(
            Guarantees::NONE.missing(Guarantees::RELIABLE_ORDERED),
            Guarantees::RELIABLE_ORDERED
        );
        assert!(Guarantees::RELIABLE_ORDERED
            .missing(Guarantees::RELIABLE_ORDERED)
            .is_none());
    }
}
