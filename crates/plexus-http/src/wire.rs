//! What the `http` layer hands up and takes down: a request numbered on its
//! connection, and the response parts that answer a number.
//!
//! Requests go up as [`RequestMessage`]s; the application answers each by
//! its number with a [`ResponseMessage`] (a whole response, or a chunked
//! head, chunks and an end), in any order: the layer writes responses in
//! the order the requests came (pipelining).
//!
//! Encoding (little endian): a request is `id: u64`, `head_len: u32`, the
//! head (postcard: method, target, version, fields, keep-alive), then the
//! body; a response part is `id: u64`, `kind: u8` (0 whole, 1 chunked head,
//! 2 chunk, 3 end), then for a whole response `head_len: u32`, the head
//! (postcard: status, fields) and the body, for a chunked head the head
//! alone, for a chunk its data. Bodies travel as segments of their own (no
//! copy); a file body ([`Body::File`]) as the frame's file region, which
//! only a stack that passes regions takes (see [`plexus_net::file_region`]).

use bytes::{Buf, Bytes};
use plexus_net::Frame;
use serde::{Deserialize, Serialize};

use crate::body::Body;
use crate::message::{Method, Request, Version};
use crate::response::Response;

/// A request as the `http` layer hands it up: its number on the
/// connection (from 0) and the request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestMessage {
    /// The request's number on its connection; the response names it.
    pub id: u64,
    /// The request.
    pub request: Request,
}

/// A part of the response to request `id`, as the application hands it to
/// the `http` layer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ResponseMessage {
    /// A whole response, written with its `Content-Length`.
    Whole {
        /// The request it answers.
        id: u64,
        /// The response.
        response: Response,
    },
    /// The head of a chunked response; [`Chunk`](Self::Chunk)s and an
    /// [`End`](Self::End) follow.
    ChunkedHead {
        /// The request it answers.
        id: u64,
        /// The status code.
        status: u16,
        /// Header fields (no `Transfer-Encoding` or `Content-Length`).
        headers: Vec<(String, Bytes)>,
    },
    /// A chunk of a chunked response's body.
    Chunk {
        /// The request it answers.
        id: u64,
        /// The data.
        data: Bytes,
    },
    /// The end of a chunked response.
    End {
        /// The request it answers.
        id: u64,
    },
}

impl ResponseMessage {
    /// The request it answers.
    pub fn id(&self) -> u64 {
        match self {
            ResponseMessage::Whole { id, .. }
            | ResponseMessage::ChunkedHead { id, .. }
            | ResponseMessage::Chunk { id, .. }
            | ResponseMessage::End { id } => *id,
        }
    }
}

/// A message between the `http` layer and the application that does not
/// decode.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("http layer message: {0}")]
pub struct WireError(pub &'static str);

#[derive(Serialize, Deserialize)]
struct RequestHead {
    method: Method,
    target: String,
    version: Version,
    headers: Vec<(String, Bytes)>,
    keep_alive: bool,
}

#[derive(Serialize, Deserialize)]
struct ResponseHead {
    status: u16,
    headers: Vec<(String, Bytes)>,
}

const WHOLE: u8 = 0;
const CHUNKED_HEAD: u8 = 1;
const CHUNK: u8 = 2;
const END: u8 = 3;

fn head_bytes<T: Serialize>(prefix: &[u8], head: &T, with_len: bool) -> Bytes {
    let encoded = postcard::to_allocvec(head).unwrap_or_default();
    let mut out = Vec::with_capacity(prefix.len() + 4 + encoded.len());
    out.extend_from_slice(prefix);
    if with_len {
        out.extend_from_slice(&(encoded.len() as u32).to_le_bytes());
    }
    out.extend_from_slice(&encoded);
    Bytes::from(out)
}

impl RequestMessage {
    /// Encodes the message as a frame whose body is a segment of its own.
    pub fn encode(&self) -> Frame {
        let r = &self.request;
        let head = RequestHead {
            method: r.method.clone(),
            target: r.target.clone(),
            version: r.version,
            headers: r.headers.clone(),
            keep_alive: r.keep_alive,
        };
        let mut frame = Frame::from_payload(head_bytes(&self.id.to_le_bytes(), &head, true));
        frame.push_payload(r.body.clone());
        frame
    }

    /// Decodes a message the `http` layer handed up.
    ///
    /// # Errors
    ///
    /// [`WireError`] if the bytes are not one.
    pub fn decode(mut bytes: Bytes) -> Result<Self, WireError> {
        let id = take_u64(&mut bytes)?;
        let head: RequestHead = take_head(&mut bytes)?;
        Ok(Self {
            id,
            request: Request {
                method: head.method,
                target: head.target,
                version: head.version,
                headers: head.headers,
                body: bytes,
                keep_alive: head.keep_alive,
            },
        })
    }
}

impl ResponseMessage {
    /// Encodes the message as a frame (a body or chunk as a segment of its
    /// own).
    pub fn encode(&self) -> Frame {
        let mut prefix = [0u8; 9];
        prefix[..8].copy_from_slice(&self.id().to_le_bytes());
        match self {
            ResponseMessage::Whole { response, .. } => {
                prefix[8] = WHOLE;
                let head = ResponseHead {
                    status: response.status,
                    headers: response.headers.clone(),
                };
                let mut frame = Frame::from_payload(head_bytes(&prefix, &head, true));
                match &response.body {
                    Body::Bytes(bytes) => frame.push_payload(bytes.clone()),
                    Body::File(region) => frame.push_file(region.clone()),
                }
                frame
            }
            ResponseMessage::ChunkedHead {
                status, headers, ..
            } => {
                prefix[8] = CHUNKED_HEAD;
                let head = ResponseHead {
                    status: *status,
                    headers: headers.clone(),
                };
                Frame::from_payload(head_bytes(&prefix, &head, true))
            }
            ResponseMessage::Chunk { data, .. } => {
                prefix[8] = CHUNK;
                let mut frame = Frame::from_payload(Bytes::copy_from_slice(&prefix));
                frame.push_payload(data.clone());
                frame
            }
            ResponseMessage::End { .. } => {
                prefix[8] = END;
                Frame::from_payload(Bytes::copy_from_slice(&prefix))
            }
        }
    }

    /// Decodes a message handed to the `http` layer.
    ///
    /// # Errors
    ///
    /// [`WireError`] if the bytes are not one.
    pub fn decode(bytes: Bytes) -> Result<Self, WireError> {
        Self::decode_frame(&Frame::from_payload(bytes))
    }

    /// Decodes a message handed to the `http` layer as the frame it came
    /// in, however it is split: a body or chunk that is one segment of the
    /// frame (as [`encode`](Self::encode) makes it) is taken as it is, not
    /// copied.
    ///
    /// # Errors
    ///
    /// [`WireError`] if the frame is not one.
    pub fn decode_frame(frame: &Frame) -> Result<Self, WireError> {
        // The number, the kind, and (for heads) the head's length.
        let mut fixed = [0u8; 13];
        let have = frame.copy_prefix(&mut fixed);
        if have < 8 {
            return Err(WireError("shorter than its number"));
        }
        let id = u64::from_le_bytes(fixed[..8].try_into().unwrap_or_default());
        if have < 9 {
            return Err(WireError("no response kind"));
        }
        let rest = |from: usize| frame.slice(from, frame.len()).into_bytes();
        let head = || -> Result<(ResponseHead, usize), WireError> {
            if have < 13 {
                return Err(WireError("no head length"));
            }
            let len = u32::from_le_bytes(fixed[9..13].try_into().unwrap_or_default()) as usize;
            let end = 13usize.saturating_add(len);
            if end > frame.len() {
                return Err(WireError("head longer than the message"));
            }
            let bytes = frame.slice(13, end).into_bytes();
            let head =
                postcard::from_bytes(&bytes).map_err(|_| WireError("head does not decode"))?;
            Ok((head, end))
        };
        Ok(match fixed[8] {
            WHOLE => {
                let (head, end) = head()?;
                let body = match frame.file_region() {
                    None => Body::Bytes(rest(end)),
                    // A file body is the region alone.
                    Some(region) if frame.bytes_len() == end => Body::File(region.clone()),
                    Some(_) => return Err(WireError("bytes before a file body")),
                };
                ResponseMessage::Whole {
                    id,
                    response: Response {
                        status: head.status,
                        headers: head.headers,
                        body,
                    },
                }
            }
            CHUNKED_HEAD => {
                let (head, end) = head()?;
                if end != frame.len() {
                    return Err(WireError("bytes after a chunked head"));
                }
                ResponseMessage::ChunkedHead {
                    id,
                    status: head.status,
                    headers: head.headers,
                }
            }
            CHUNK => ResponseMessage::Chunk { id, data: rest(9) },
            END if frame.len() == 9 => ResponseMessage::End { id },
            END => return Err(WireError("bytes after an end")),
            _ => return Err(WireError("unknown response kind")),
        })
    }
}

fn take_u64(bytes: &mut Bytes) -> Result<u64, WireError> {
    if bytes.len() < 8 {
        return Err(WireError("shorter than its number"));
    }
    Ok(bytes.get_u64_le())
}

fn take_head<T: for<'de> Deserialize<'de>>(bytes: &mut Bytes) -> Result<T, WireError> {
    if bytes.len() < 4 {
        return Err(WireError("no head length"));
    }
    let len = bytes.get_u32_le() as usize;
    if bytes.len() < len {
        return Err(WireError("head longer than the message"));
    }
    let head = bytes.split_to(len);
    postcard::from_bytes(&head).map_err(|_| WireError("head does not decode"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_round_trip() {
        let request = RequestMessage {
            id: 7,
            request: Request {
                method: Method::Post,
                target: "/x?y".into(),
                version: Version::Http11,
                headers: vec![("Host".into(), Bytes::from_static(b"h"))],
                body: Bytes::from_static(b"body"),
                keep_alive: true,
            },
        };
        assert_eq!(
            RequestMessage::decode(request.encode().into_bytes()).unwrap(),
            request
        );
        for m in [
            ResponseMessage::Whole {
                id: 1,
                response: Response::new(404, "no").header("X", "1"),
            },
            ResponseMessage::ChunkedHead {
                id: 2,
                status: 200,
                headers: vec![],
            },
            ResponseMessage::Chunk {
                id: 2,
                data: Bytes::from_static(b"abc"),
            },
            ResponseMessage::End { id: 2 },
        ] {
            assert_eq!(ResponseMessage::decode(m.encode().into_bytes()).unwrap(), m);
            // However the frame is split, it decodes the same.
            let frame = m.encode();
            for cut in 0..=frame.len() {
                let mut split = frame.slice(0, cut);
                split.push_payload(frame.slice(cut, frame.len()).into_bytes());
                assert_eq!(
                    ResponseMessage::decode_frame(&split).unwrap(),
                    m,
                    "cut at {cut}"
                );
            }
        }
        assert!(ResponseMessage::decode(Bytes::from_static(b"short")).is_err());
        assert!(
            RequestMessage::decode(Bytes::from_static(b"\0\0\0\0\0\0\0\0\xff\xff\xff\xff"))
                .is_err()
        );
    }

    #[test]
    fn a_response_body_is_not_copied_on_its_way_to_the_layer() {
        let body = Bytes::from(vec![7u8; 100_000]);
        let m = ResponseMessage::Whole {
            id: 3,
            response: Response::new(200, body.clone()),
        };
        let ResponseMessage::Whole { response, .. } =
            ResponseMessage::decode_frame(&m.encode()).unwrap()
        else {
            panic!("a whole response");
        };
        assert_eq!(
            response.body.as_bytes().map(|b| b.as_ptr()),
            Some(body.as_ptr())
        );
    }
}
