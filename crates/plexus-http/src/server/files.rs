//! Static files: a directory loaded once and served without copying a
//! file per request, with `ETag` / `If-None-Match` and single byte
//! `Range`s.
//!
//! - **Small files** (below [`LoadOptions::sendfile_from`]) are read once,
//!   when the server is built, into a `Bytes`; a response's body is that
//!   buffer (or a slice of it), handed to the connection as a segment of
//!   its own and written with a vectored write. Their total is bounded
//!   ([`LoadOptions::max_in_memory`]).
//! - **Large files** stay open (one descriptor each) and a response's body
//!   is a region of the file ([`Body::File`]): on a TCP or Unix connection
//!   the driver sends it with `sendfile`, from the page cache to the
//!   socket, never through user space; on any other (TLS, a shared `ws`
//!   port) it is read per response.
//!
//! Files are taken as they are at load: their length, type and `ETag` are
//! fixed then. A large file shortened afterwards ends the connections that
//! were sending it (an error, never other bytes); one rewritten in place is
//! sent as it is now under its old `ETag`: replace files by renaming a new
//! one over them and restart, or do not change them under a running
//! server.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use bytes::Bytes;
use plexus_net::FileRegion;

use crate::body::Body;
use crate::message::{Method, Request};
use crate::response::Response;

/// How [`StaticFiles::load_with`] holds files.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LoadOptions {
    /// The most bytes of small files held in memory, in all.
    pub max_in_memory: usize,
    /// Files of at least this many bytes stay open and are sent from the
    /// page cache (`sendfile`) instead of being held in memory. Default
    /// 16 KiB: below it, one vectored write of head and body costs less than
    /// a write and a `sendfile`.
    pub sendfile_from: usize,
}

impl Default for LoadOptions {
    fn default() -> Self {
        Self {
            max_in_memory: 64 << 20,
            sendfile_from: 16 << 10,
        }
    }
}

/// A file ready to serve.
#[derive(Debug, Clone)]
struct File {
    body: Body,
    etag: Bytes,
    content_type: &'static str,
}

/// A directory's files, by their path below it (`css/site.css`).
#[derive(Debug, Clone, Default)]
pub struct StaticFiles {
    files: HashMap<String, File>,
}

/// Why a directory could not be loaded.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum FilesError {
    /// Reading the directory or a file failed.
    #[error("load static files from {path}: {source}")]
    Io {
        /// The path.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// The files add up to more than allowed.
    #[error("load static files from {dir}: more than {max_total} bytes")]
    TooLarge {
        /// The directory.
        dir: PathBuf,
        /// The bound.
        max_total: usize,
    },
}

impl StaticFiles {
    /// Loads every file below `dir` (following no symbolic links out of
    /// it), small ones into memory up to `max_in_memory` bytes in all, large
    /// ones kept open (the defaults of [`LoadOptions`] otherwise).
    ///
    /// # Errors
    ///
    /// [`FilesError`] naming the path that failed, or the bound.
    pub fn load(dir: impl AsRef<Path>, max_in_memory: usize) -> Result<Self, FilesError> {
        Self::load_with(
            dir,
            LoadOptions {
                max_in_memory,
                ..LoadOptions::default()
            },
        )
    }

    /// Loads every file below `dir` (following no symbolic links out of
    /// it) as `options` say.
    ///
    /// # Errors
    ///
    /// [`FilesError`] naming the path that failed, or the bound.
    pub fn load_with(dir: impl AsRef<Path>, options: LoadOptions) -> Result<Self, FilesError> {
        let dir = dir.as_ref();
        let max_total = options.max_in_memory;
        let mut files = HashMap::new();
        let mut total = 0usize;
        let mut stack = vec![dir.to_path_buf()];
        let io = |path: &Path| {
            let path = path.to_path_buf();
            move |source| FilesError::Io { path, source }
        };
        while let Some(d) = stack.pop() {
            for entry in std::fs::read_dir(&d).map_err(io(&d))? {
                let entry = entry.map_err(io(&d))?;
                let path = entry.path();
                let kind = entry.file_type().map_err(io(&path))?;
                if kind.is_dir() {
                    stack.push(path);
                } else if kind.is_file() {
                    let (body, hash) =
                        load_file(&path, options.sendfile_from).map_err(io(&path))?;
                    if let Body::Bytes(bytes) = &body {
                        total += bytes.len();
                    }
                    if total > max_total {
                        return Err(FilesError::TooLarge {
                            dir: dir.to_path_buf(),
                            max_total,
                        });
                    }
                    let Some(name) = path
                        .strip_prefix(dir)
                        .ok()
                        .and_then(|p| p.to_str())
                        .map(|p| p.replace(std::path::MAIN_SEPARATOR, "/"))
                    else {
                        continue;
                    };
                    let etag = Bytes::from(format!("\"{}\"", &hash.to_hex()[..20]));
                    files.insert(
                        name.clone(),
                        File {
                            content_type: content_type(&name),
                            body,
                            etag,
                        },
                    );
                }
            }
        }
        Ok(Self { files })
    }

    /// The number of files.
    pub fn len(&self) -> usize {
        self.files.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.files.is_empty()
    }

    /// The response to `request` for file `name` (a path below the
    /// directory; empty or ending in `/` means its `index.html`).
    pub fn serve(&self, request: &Request, name: &str) -> Response {
        if !matches!(request.method, Method::Get | Method::Head) {
            return Response::new(405, "only GET and HEAD\n").header("allow", "GET, HEAD");
        }
        let name = if name.is_empty() || name.ends_with('/') {
            format!("{name}index.html")
        } else {
            name.to_owned()
        };
        let Some(file) = self.files.get(&name) else {
            return Response::new(404, "no such file\n");
        };
        if request
            .header("if-none-match")
            .is_some_and(|tags| etag_matches(tags, &file.etag))
        {
            return Response::new(304, Bytes::new()).header("etag", file.etag.clone());
        }
        let whole = || {
            Response::new(200, file.body.clone())
                .header("content-type", file.content_type)
                .header("etag", file.etag.clone())
                .header("accept-ranges", "bytes")
        };
        let Some(range) = request.header("range") else {
            return whole();
        };
        let len = file.body.len();
        match byte_range(range, len) {
            Range::Ignore => whole(),
            Range::Unsatisfiable => {
                Response::new(416, Bytes::new()).header("content-range", format!("bytes */{len}"))
            }
            Range::Bytes(start, end) => Response::new(206, file.body.slice(start, end + 1))
                .header("content-type", file.content_type)
                .header("etag", file.etag.clone())
                .header("content-range", format!("bytes {start}-{end}/{len}")),
        }
    }
}

/// A file's body (in memory below `sendfile_from` bytes, a region of the
/// open file from there on) and the hash of its content.
fn load_file(path: &Path, sendfile_from: usize) -> std::io::Result<(Body, blake3::Hash)> {
    let mut file = std::fs::File::open(path)?;
    let len = usize::try_from(file.metadata()?.len())
        .map_err(|_| std::io::Error::from(std::io::ErrorKind::FileTooLarge))?;
    if len < sendfile_from {
        let mut body = Vec::with_capacity(len);
        std::io::Read::read_to_end(&mut file, &mut body)?;
        let hash = blake3::hash(&body);
        return Ok((Body::Bytes(body.into()), hash));
    }
    // The hash covers the bytes the region will send: exactly `len`.
    let mut hasher = blake3::Hasher::new();
    let hashed = std::io::copy(&mut std::io::Read::take(&mut file, len as u64), &mut hasher)?;
    if hashed != len as u64 {
        return Err(std::io::ErrorKind::UnexpectedEof.into());
    }
    let region = FileRegion::new(Arc::new(file), 0, len);
    Ok((Body::File(region), hasher.finalize()))
}

fn etag_matches(tags: &[u8], etag: &[u8]) -> bool {
    tags.split(|&b| b == b',').any(|t| {
        let t = crate::decoder::trim(t);
        let t = t.strip_prefix(b"W/").unwrap_or(t);
        t == b"*" || t == etag
    })
}

enum Range {
    /// Not a single byte range this server takes: serve the whole file.
    Ignore,
    /// Outside the file: 416.
    Unsatisfiable,
    /// Bytes `start..=end`.
    Bytes(usize, usize),
}

/// A `Range` value as one byte range of a `len`-byte file (RFC 9110,
/// 14.1.2); several ranges are answered with the whole file, which RFC
/// 9110 allows.
fn byte_range(value: &[u8], len: usize) -> Range {
    let Ok(value) = std::str::from_utf8(value) else {
        return Range::Ignore;
    };
    let Some(spec) = value.trim().strip_prefix("bytes=") else {
        return Range::Ignore;
    };
    if spec.contains(',') {
        return Range::Ignore;
    }
    let Some((first, last)) = spec.trim().split_once('-') else {
        return Range::Ignore;
    };
    let num = |s: &str| -> Option<usize> {
        (!s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()))
            .then(|| s.parse().ok())
            .flatten()
    };
    match (first.trim(), last.trim()) {
        ("", suffix) => match num(suffix) {
            Some(0) | None if suffix.is_empty() => Range::Ignore,
            Some(0) => Range::Unsatisfiable,
            Some(n) if len > 0 => Range::Bytes(len.saturating_sub(n), len - 1),
            Some(_) => Range::Unsatisfiable,
            None => Range::Ignore,
        },
        (start, end) => {
            let Some(start) = num(start) else {
                return Range::Ignore;
            };
            let last = if end.is_empty() {
                None
            } else {
                match num(end) {
                    // RFC 9110, 14.1.1: a range whose last position is
                    // before its first is invalid; 14.2: an invalid range
                    // is ignored (the whole file), unlike an unsatisfiable
                    // one (416).
                    Some(e) if e < start => return Range::Ignore,
                    Some(e) => Some(e),
                    None => return Range::Ignore,
                }
            };
            if start >= len {
                return Range::Unsatisfiable;
            }
            Range::Bytes(start, last.map_or(len - 1, |e| e.min(len - 1)))
        }
    }
}

fn content_type(name: &str) -> &'static str {
    match name.rsplit('.').next().unwrap_or("") {
        "html" | "htm" => "text/html; charset=utf-8",
        "css" => "text/css; charset=utf-8",
        "js" | "mjs" => "text/javascript; charset=utf-8",
        "json" => "application/json",
        "txt" => "text/plain; charset=utf-8",
        "svg" => "image/svg+xml",
        "png" => "image/png",
        "jpg" | "jpeg" => "image/jpeg",
        "gif" => "image/gif",
        "ico" => "image/x-icon",
        "wasm" => "application/wasm",
        "pdf" => "application/pdf",
        _ => "application/octet-stream",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::message::Version;

    fn get(headers: &[(&str, &str)]) -> Request {
        Request {
            method: Method::Get,
            target: "/".into(),
            version: Version::Http11,
            headers: headers
                .iter()
                .map(|(n, v)| ((*n).to_owned(), Bytes::copy_from_slice(v.as_bytes())))
                .collect(),
            body: Bytes::new(),
            keep_alive: true,
        }
    }

    fn files() -> StaticFiles {
        let mut files = HashMap::new();
        files.insert(
            "a.txt".to_owned(),
            File {
                body: Body::Bytes(Bytes::from_static(b"0123456789")),
                etag: Bytes::from_static(b"\"e1\""),
                content_type: "text/plain; charset=utf-8",
            },
        );
        StaticFiles { files }
    }

    #[test]
    fn etags_ranges_and_misses() {
        let f = files();
        let r = f.serve(&get(&[]), "a.txt");
        assert_eq!(
            (r.status, r.body.as_bytes().map(|b| &b[..])),
            (200, Some(&b"0123456789"[..]))
        );
        assert_eq!(
            f.serve(&get(&[("If-None-Match", "\"x\", \"e1\"")]), "a.txt")
                .status,
            304
        );
        assert_eq!(
            f.serve(&get(&[("If-None-Match", "W/\"e1\"")]), "a.txt")
                .status,
            304
        );
        let cases = [
            ("bytes=2-4", 206, &b"234"[..]),
            ("bytes=7-", 206, b"789"),
            ("bytes=-3", 206, b"789"),
            ("bytes=8-100", 206, b"89"),
            ("bytes=10-", 416, b""),
            // RFC 9110, 14.2: invalid (last before first): ignored.
            ("bytes=5-2", 200, b"0123456789"),
            ("bytes=12-11", 200, b"0123456789"),
            ("bytes=10-12", 416, b""),
            ("bytes=9-9", 206, b"9"),
            ("bytes=-0", 416, b""),
            ("bytes=1-2,4-5", 200, b"0123456789"),
            ("items=1-2", 200, b"0123456789"),
            ("bytes=x-2", 200, b"0123456789"),
        ];
        for (range, status, body) in cases {
            let r = f.serve(&get(&[("Range", range)]), "a.txt");
            assert_eq!(
                (r.status, r.body.as_bytes().map(|b| &b[..])),
                (status, Some(body)),
                "{range}"
            );
        }
        assert_eq!(f.serve(&get(&[]), "missing").status, 404);
        let mut post = get(&[]);
        post.method = Method::Post;
        assert_eq!(f.serve(&post, "a.txt").status, 405);
    }
}
