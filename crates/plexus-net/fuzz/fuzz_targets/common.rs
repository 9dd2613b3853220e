// Shared by the fuzz targets: cuts the input into datagrams / chunks.
// Each piece is one length byte followed by that many bytes.

#[allow(dead_code)]
pub fn pieces(mut data: &[u8]) -> impl Iterator<Item = &[u8]> {
    std::iter::from_fn(move || {
        let (&len, rest) = data.split_first()?;
        let n = (len as usize).min(rest.len());
        let (piece, rest) = rest.split_at(n);
        data = rest;
        Some(piece)
    })
}
