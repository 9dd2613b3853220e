//! How messages are delimited on a QUIC strand stream: the `framing`
//! layer's wire format (`len: u32 big-endian | payload`), with its own
//! header and decoder ([`plexus_net::layers::framing`]). QUIC streams are
//! ordered and reliable but carry bytes, not messages; what this module
//! adds is how a strand's outgoing messages are gathered into stream
//! chunks.
//!
//! The decoder bounds the announced length by the link's largest message
//! and never panics on any input.

use bytes::{BufMut, Bytes, BytesMut};
use plexus_net::layers::framing::{self, FrameHeader, FramingError};
use plexus_net::Frame;

/// Bytes of the length prefix.
pub(super) const LEN: usize = FrameHeader::LEN;

/// The announced length of the message at the front of `buf`, checked
/// against `max`; `Ok(None)` while fewer than [`LEN`] bytes are there.
pub(super) fn parse(buf: &[u8], max: usize) -> Result<Option<usize>, FramingError> {
    Ok(FrameHeader::parse(buf, max)?.map(|h| h.len as usize))
}

/// Decodes one message from the front of `src`: `Ok(Some(payload))`
/// consumed a whole message, `Ok(None)` needs more bytes (nothing
/// consumed), `Err` means the stream is corrupt.
pub(super) fn decode(src: &mut BytesMut, max: usize) -> Result<Option<Bytes>, FramingError> {
    framing::decode(src, max)
}

/// Appends `message`, prefixed, to a strand's outgoing `chunks`: a message
/// up to `copy_max` bytes is copied into `buf` (which collects a run of
/// small ones into one chunk); a longer one goes as a chunk of its own,
/// uncopied where it is one buffer, after `buf`'s bytes and its prefix.
/// The link's largest message fits a `u32` (the driver checks it).
pub(super) fn encode(message: Frame, copy_max: usize, buf: &mut BytesMut, chunks: &mut Vec<Bytes>) {
    let len = message.len();
    buf.put_slice(&FrameHeader { len: len as u32 }.emit());
    if len <= copy_max {
        message.extend_into(buf);
    } else {
        chunks.push(buf.split().freeze());
        chunks.push(message.into_bytes());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encoded_messages_decode_back_small_and_large() {
        let mut buf = BytesMut::new();
        let mut chunks = Vec::new();
        encode(Frame::copy_from_slice(b"hi"), 4, &mut buf, &mut chunks);
        encode(
            Frame::from_payload(Bytes::from_static(b"a longer one")),
            4,
            &mut buf,
            &mut chunks,
        );
        chunks.push(buf.split().freeze());
        let mut wire = BytesMut::new();
        for c in &chunks {
            wire.extend_from_slice(c);
        }
        assert_eq!(decode(&mut wire, 64).unwrap().unwrap(), "hi");
        assert_eq!(decode(&mut wire, 64).unwrap().unwrap(), "a longer one");
        assert!(wire.is_empty());
    }

    #[test]
    fn an_announced_length_over_the_maximum_is_refused() {
        let mut wire = BytesMut::from(&[0, 0, 1, 0, 9][..]);
        assert_eq!(
            decode(&mut wire, 255),
            Err(FramingError::FrameTooLarge { len: 256, max: 255 })
        );
    }

    proptest::proptest! {
        /// Any bytes, fed in any cuts: decoding never panics, never hands
        /// back a message over the maximum, and never consumes bytes
        /// without handing back a message.
        #[test]
        fn decoding_any_input_never_panics(
            input in proptest::collection::vec(proptest::num::u8::ANY, 0..600),
            cut in 0usize..600,
            max in 0usize..300,
        ) {
            let cut = cut.min(input.len());
            let mut buf = BytesMut::from(&input[..cut]);
            let mut rest = &input[cut..];
            loop {
                let before = buf.len();
                match decode(&mut buf, max) {
                    Ok(Some(m)) => proptest::prop_assert!(m.len() <= max),
                    Ok(None) if !rest.is_empty() => {
                        proptest::prop_assert_eq!(buf.len(), before);
                        buf.extend_from_slice(rest);
                        rest = &[];
                    }
                    Ok(None) | Err(_) => break,
                }
            }
        }

        /// What `encode` writes, `decode` reads back, message by message.
        #[test]
        fn encoded_runs_decode_back(
            messages in proptest::collection::vec(
                proptest::collection::vec(proptest::num::u8::ANY, 0..80), 0..20),
            copy_max in 0usize..64,
        ) {
            let mut buf = BytesMut::new();
            let mut chunks = Vec::new();
            for m in &messages {
                encode(Frame::copy_from_slice(m), copy_max, &mut buf, &mut chunks);
            }
            chunks.push(buf.split().freeze());
            let mut wire = BytesMut::new();
            for c in &chunks {
                wire.extend_from_slice(c);
            }
            for m in &messages {
                let got = decode(&mut wire, 80).expect("valid").expect("whole");
                proptest::prop_assert_eq!(&got[..], &m[..]);
            }
            proptest::prop_assert!(wire.is_empty());
        }
    }

    #[test]
    fn a_cut_prefix_or_payload_needs_more_bytes() {
        let mut wire = BytesMut::from(&[0, 0][..]);
        assert_eq!(decode(&mut wire, 8), Ok(None));
        let mut wire = BytesMut::from(&[0, 0, 0, 3, 1][..]);
        assert_eq!(decode(&mut wire, 8), Ok(None));
        assert_eq!(wire.len(), 5);
    }
}
