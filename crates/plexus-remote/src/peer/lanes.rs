//! Which lane each frame takes (see `docs/PROTOCOL.md`, "Lanes"): frames
//! about one actor of the receiving node share that actor's lane, so what
//! is sent to it and the signals that follow stay in order on transports
//! with several streams per link (`quic`).

use plexus_transport::Lane;

use crate::wire::WireFrame;

/// The lane of a frame (see PROTOCOL.md, "Lanes"): frames about one
/// actor of the receiving node take the lane of its serial, so that what
/// one sender sends it, and the signals that follow, stay in order; `DOWN`
/// takes the lane its token names ([`down_token`]); `NAMED` its name's
/// lane; frames about no actor take lane 0. A forged ref chooses the lanes
/// of its frames itself, not by this function: its name's lane until it
/// has settled on its target's, its fence `RESOLVE`s too (see `NamedState`
/// in `proxy.rs`). Only `quic` links keep lanes apart; others carry every
/// lane on one ordered stream.
pub(crate) fn lane_of(frame: &WireFrame) -> Lane {
    match frame {
        WireFrame::Message { to, .. }
        | WireFrame::Exit { to, .. }
        | WireFrame::Link { to, .. }
        | WireFrame::Unlink { to, .. } => Lane::for_key(*to),
        WireFrame::Stop { target, .. }
        | WireFrame::Monitor { target, .. }
        | WireFrame::Demonitor { target, .. } => Lane::for_key(*target),
        WireFrame::Named { name, .. } => Lane::for_key(name_key(name)),
        WireFrame::Down { token, .. } => down_lane(*token),
        _ => Lane::ZERO,
    }
}

/// The lane key of a published name (FNV-1a).
pub(crate) fn name_key(name: &str) -> u64 {
    plexus_core::remote::type_id_of(name)
}

/// A monitor token whose `DOWN` travels on the lane of the watching actor:
/// the watched actor's messages to its watcher take that lane too, so the
/// `DOWN` comes after them. The low 6 bits carry the lane.
pub(super) fn down_token(id: u64, watcher_lane: Lane) -> u64 {
    (id << 6) | u64::from(watcher_lane.index())
}

/// The lane of a `DOWN` frame: the one its token names (lane 0 if none).
fn down_lane(token: u64) -> Lane {
    // `Lane::COUNT` is 64: six bits.
    Lane::new((token & 63) as u8).unwrap_or(Lane::ZERO)
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;

    use super::*;

    #[test]
    fn down_travels_on_the_lane_of_the_watchers_messages() {
        for watcher in [1u64, 2, 17, 1 << 40, u64::MAX >> 8] {
            let lane = Lane::for_key(watcher);
            let token = down_token(12_345, lane);
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
            assert_eq!(lane_of(&down), lane_of(&message));
            assert_ne!(lane_of(&message), Lane::ZERO);
        }
        // Control frames about no actor take lane 0.
        assert_eq!(
            lane_of(&WireFrame::Goodbye {
                reason: "bye".into()
            }),
            Lane::ZERO
        );
    }

    #[test]
    fn signals_about_an_actor_share_its_lane() {
        let to = 77;
        let lane = lane_of(&WireFrame::Message {
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
        assert_eq!(lane_of(&exit), lane);
        assert_eq!(lane_of(&stop), lane);
    }
}
