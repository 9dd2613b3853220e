//! Routes: a method and a path pattern to what serves them.
//!
//! A pattern is literal segments, `:name` segments that match any one
//! segment (and name it), and a final `*name` that matches the rest of the
//! path (possibly empty). Routes are tried in the order they were added;
//! the first match serves.

/// A parsed path pattern.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Pattern {
    segments: Vec<Segment>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Segment {
    Literal(String),
    Param(String),
    Rest(String),
}

/// A pattern that does not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("route pattern {pattern:?}: {why}")]
pub struct PatternError {
    /// The pattern given.
    pub pattern: String,
    /// What is wrong.
    pub why: &'static str,
}

impl Pattern {
    pub(crate) fn parse(pattern: &str) -> Result<Self, PatternError> {
        let error = |why| PatternError {
            pattern: pattern.to_owned(),
            why,
        };
        let Some(rest) = pattern.strip_prefix('/') else {
            return Err(error("must start with /"));
        };
        let mut segments = Vec::new();
        let parts: Vec<&str> = if rest.is_empty() {
            Vec::new()
        } else {
            rest.split('/').collect()
        };
        for (i, part) in parts.iter().enumerate() {
            let segment = if let Some(name) = part.strip_prefix(':') {
                Segment::Param(name.to_owned())
            } else if let Some(name) = part.strip_prefix('*') {
                if i + 1 != parts.len() {
                    return Err(error("a *rest segment must be the last"));
                }
                Segment::Rest(name.to_owned())
            } else {
                Segment::Literal((*part).to_owned())
            };
            if matches!(&segment, Segment::Param(n) | Segment::Rest(n) if n.is_empty()) {
                return Err(error("a :param or *rest segment needs a name"));
            }
            segments.push(segment);
        }
        Ok(Self { segments })
    }

    /// The parameters if `path` (percent-decoded, without its query)
    /// matches.
    pub(crate) fn matches(&self, path: &str) -> Option<Vec<(String, String)>> {
        let rest = path.strip_prefix('/')?;
        let parts: Vec<&str> = if rest.is_empty() {
            Vec::new()
        } else {
            rest.split('/').collect()
        };
        let mut params = Vec::new();
        for (i, segment) in self.segments.iter().enumerate() {
            match segment {
                Segment::Literal(l) => {
                    if parts.get(i) != Some(&l.as_str()) {
                        return None;
                    }
                }
                Segment::Param(name) => {
                    let part = parts.get(i).filter(|p| !p.is_empty())?;
                    params.push((name.clone(), (*part).to_owned()));
                }
                Segment::Rest(name) => {
                    params.push((name.clone(), parts.get(i..).unwrap_or(&[]).join("/")));
                    return Some(params);
                }
            }
        }
        (parts.len() == self.segments.len()).then_some(params)
    }
}

/// `path` with `%XX` escapes decoded, if that gives UTF-8 without `..` or
/// `.` segments, NUL or backslashes (a request cannot name a file outside
/// a served directory).
///
/// An encoded separator (`%2F`, `%5C`) is refused, never decoded into one:
/// RFC 3986 (2.2) makes it data inside a segment, so `/static%2fa.txt` is
/// one segment, not `/static/a.txt`. No file name holds a separator and a
/// route's parameters could not tell one from a real one, so the path
/// names nothing this server can serve; it is refused (400) with the other
/// paths that could be read two ways (`%2e%2e`, `\`), rather than 404,
/// which would say the name could exist.
pub(crate) fn decode_path(path: &str) -> Option<String> {
    let bytes = path.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = std::str::from_utf8(bytes.get(i + 1..i + 3)?).ok()?;
            let byte = u8::from_str_radix(hex, 16).ok()?;
            if matches!(byte, b'/' | b'\\') {
                return None;
            }
            out.push(byte);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    let decoded = String::from_utf8(out).ok()?;
    if decoded.contains('\0')
        || decoded
            .split('/')
            .any(|s| s == ".." || s == "." || s.contains('\\'))
    {
        return None;
    }
    Some(decoded)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params(pattern: &str, path: &str) -> Option<Vec<(String, String)>> {
        Pattern::parse(pattern).unwrap().matches(path)
    }

    #[test]
    fn patterns_match_literals_params_and_rests() {
        assert_eq!(params("/", "/"), Some(vec![]));
        assert_eq!(params("/a/b", "/a/b"), Some(vec![]));
        assert_eq!(params("/a/b", "/a/b/c"), None);
        assert_eq!(
            params("/users/:id", "/users/42"),
            Some(vec![("id".into(), "42".into())])
        );
        assert_eq!(params("/users/:id", "/users/"), None);
        assert_eq!(
            params("/static/*file", "/static/css/site.css"),
            Some(vec![("file".into(), "css/site.css".into())])
        );
        assert_eq!(
            params("/static/*file", "/static"),
            Some(vec![("file".into(), String::new())])
        );
        assert!(Pattern::parse("no-slash").is_err());
        assert!(Pattern::parse("/*rest/more").is_err());
        assert!(Pattern::parse("/:").is_err());
    }

    #[test]
    fn paths_decode_and_refuse_traversal() {
        assert_eq!(decode_path("/a%20b/c"), Some("/a b/c".into()));
        assert_eq!(decode_path("/static/../etc/passwd"), None);
        assert_eq!(decode_path("/static/%2e%2e/etc/passwd"), None);
        assert_eq!(decode_path("/x%00"), None);
        assert_eq!(decode_path("/x%zz"), None);
        assert_eq!(decode_path("/x%e2%82"), None, "not UTF-8");
    }

    /// `%2F` and `%5C` are data in a segment (RFC 3986, 2.2), never a
    /// separator: a path that holds one is refused, not read as a nested
    /// path.
    #[test]
    fn encoded_separators_are_refused_not_decoded() {
        for path in [
            "/static%2fa.txt",
            "/static/css%2Fsite.css",
            "/static%5ca.txt",
            "/a%5Cb",
            "/static/%2e%2e%2fsecret",
        ] {
            assert_eq!(decode_path(path), None, "{path}");
        }
        assert_eq!(decode_path("/a%20b/c%41"), Some("/a b/cA".into()));
    }
}
