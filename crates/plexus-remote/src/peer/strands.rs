//! Which strand each frame takes (see `docs/PROTOCOL.md`, "Strands"): frames
//! about one actor of the receiving node share that actor's strand, so what
//! is sent to it and the signals that follow stay in order on transports
//! with several streams per link (`quic`).

use plexus_transport::Strand;

use crate::wire::WireFrame;

/// The strand of a frame (see PROTOCOL.md, "Strands"): frames about one
/// actor of the receiving node take the strand of its serial, so that what
/// one sender sends it, and the signals that follow, stay in order; `DOWN`
/// takes the strand its token names ([`down_token`]); `NAMED` its name's
/// strand; frames about no actor take strand 0. A forged ref chooses the strands
/// of its frames itself, not by this function: its name's strand until it
/// has settled on its target's, its fence `RESOLVE`s too (see `NamedState`
/// in `proxy.rs`). Only `quic` links keep strands apart; others carry every
/// strand on one ordered stream.
pub(crate) fn strand_of(frame: &WireFrame) -> Strand {
    match frame {
        WireFrame::Message { to, .. }
        | WireFrame::Exit { to, .. }
        | WireFrame::Link { to, .. }
        | WireFrame::Unlink { to, .. } => Strand::for_key(*to),
        WireFrame::Stop { target, .. }
        | WireFrame::Monitor { target, .. }
        | WireFrame::Demonitor { target, .. } => Strand::for_key(*target),
        WireFrame::Named { name, .. } => Strand::for_key(name_key(name)),
        WireFrame::Down { token, .. } => down_strand(*token),
        _ => Strand::ZERO,
    }
}

/// The strand key of a published name (FNV-1a).
pub(crate) fn name_key(name: &str) -> u64 {
    plexus_core::remote::type_id_of(name)
}

/// A monitor token whose `DOWN` travels on the strand of the watching actor:
/// the watched actor's messages to its watcher take that strand too, so the
/// `DOWN` comes after them. The low 6 bits carry the strand.
pub(super) fn down_token(id: u64, watcher_strand: Strand) -> u64 {
    (id << 6) | u64::from(watcher_strand.index())
}

/// The strand of a `DOWN` frame: the one its token names (strand 0 if none).
fn down_strand(token: u64) -> Strand {
    // `Strand::COUNT` is 64: six bits.
    Strand::new((token & 63) as u8).unwrap_or(Strand::ZERO)
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;

    use super::*;

    #[test]
    fn down_travels_on_the_strand_of_the_watchers_messages() {
        for watcher in [1u64, 2, 17, 1 << 40, u64::MAX >> 8] {
            let strand = Strand::for_key(watcher);
            let token = down_token(12_345, strand);
            let down = WireFrame::Down {
                token,
                reason: plexus_core::ExitReason::Normal,
            };
            let message = WireFrame::Message {
                to: watcher,
                type_id: 1,
                receipt: 0,
                payload: Bytes::new(),
            };
            assert_eq!(strand_of(&down), strand_of(&message));
            assert_ne!(strand_of(&message), Strand::ZERO);
        }
        // Control frames about no actor take strand 0.
        assert_eq!(
            strand_of(&WireFrame::Goodbye {
                code: crate::wire::GoodbyeCode::Shutdown
            }),
            Strand::ZERO
        );
    }

    #[test]
    fn signals_about_an_actor_share_its_strand() {
        let to = 77;
        let strand = strand_of(&WireFrame::Message {
            to,
            type_id: 1,
            receipt: 0,
            payload: Bytes::new(),
        });
        let exit = WireFrame::Exit {
            from: 5,
            to,
            reason: plexus_core::ExitReason::Normal,
        };
        let stop = WireFrame::Stop {
            target: to,
            kill: false,
        };
        assert_eq!(strand_of(&exit), strand);
        assert_eq!(strand_of(&stop), strand);
    }
}
