//! Bounds-checked big-endian readers shared by the decoders. They return
//! `None` instead of panicking on short input.

pub(crate) fn u8_at(buf: &[u8], at: usize) -> Option<u8> {
    buf.get(at).copied()
}

pub(crate) fn u32_at(buf: &[u8], at: usize) -> Option<u32> {
    let b = buf.get(at..at.checked_add(4)?)?;
    Some(u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
}

pub(crate) fn u64_at(buf: &[u8], at: usize) -> Option<u64> {
    let b = buf.get(at..at.checked_add(8)?)?;
    let mut a = [0; 8];
    a.copy_from_slice(b);
    Some(u64::from_be_bytes(a))
}
