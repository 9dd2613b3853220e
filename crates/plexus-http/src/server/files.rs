//! Static files: a directory loaded once into shared buffers and served
//! from them, with `ETag` / `If-None-Match` and single byte `Range`s.
//!
//! Every file is read once, when the server is built, into a `Bytes`; a
//! response's body is that buffer (or a slice of it for a range), handed to
//! the connection as a segment of its own and written with a vectored
//! write: no copy per request in user space. The whole directory is bounded
//! ([`StaticFiles::load`]'s `max_total`).

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use bytes::Bytes;

use crate::message::{Method, Request};
use crate::response::Response;

/// A file ready to serve.
#[derive(Debug, Clone)]
struct File {
    body: Bytes,
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
    /// it), up to `max_total` bytes in all.
    ///
    /// # Errors
    ///
    /// [`FilesError`] naming the path that failed, or the bound.
    pub fn load(dir: impl AsRef<Path>, max_total: usize) -> Result<Self, FilesError> {
        let dir = dir.as_ref();
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
                    let body = std::fs::read(&path).map_err(io(&path))?;
                    total += body.len();
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
                    let hash = blake3::hash(&body);
                    let etag = Bytes::from(format!("\"{}\"", &hash.to_hex()[..20]));
                    files.insert(
                        name.clone(),
                        File {
                            content_type: content_type(&name),
                            body: Bytes::from(body),
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
            Range::Bytes(start, end) => Response::new(206, file.body.slice(start..=end))
                .header("content-type", file.content_type)
                .header("etag", file.etag.clone())
                .header("content-range", format!("bytes {start}-{end}/{len}")),
        }
    }
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
            let end = if end.is_empty() {
                Some(len.saturating_sub(1))
            } else {
                match num(end) {
                    Some(e) => Some(e.min(len.saturating_sub(1))),
                    None => return Range::Ignore,
                }
            };
            match end {
                Some(end) if start < len && start <= end => Range::Bytes(start, end),
                _ => Range::Unsatisfiable,
            }
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
                body: Bytes::from_static(b"0123456789"),
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
        assert_eq!((r.status, &r.body[..]), (200, &b"0123456789"[..]));
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
            ("bytes=5-2", 416, b""),
            ("bytes=-0", 416, b""),
            ("bytes=1-2,4-5", 200, b"0123456789"),
            ("items=1-2", 200, b"0123456789"),
            ("bytes=x-2", 200, b"0123456789"),
        ];
        for (range, status, body) in cases {
            let r = f.serve(&get(&[("Range", range)]), "a.txt");
            assert_eq!((r.status, &r.body[..]), (status, body), "{range}");
        }
        assert_eq!(f.serve(&get(&[]), "missing").status, 404);
        let mut post = get(&[]);
        post.method = Method::Post;
        assert_eq!(f.serve(&post, "a.txt").status, 405);
    }
}
