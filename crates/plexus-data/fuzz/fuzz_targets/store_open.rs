//! Damaged store files: a valid store, built once (as a clean close leaves
//! it, and as a SIGKILL after its last commit leaves it), damaged page by
//! page as the input says, then opened with `DurableStore::open` and
//! loaded with `DurableStore::load`, as a member does at start. Neither may
//! panic (libFuzzer counts every panic, also one the store would contain at
//! its boundary), and what loads must be what the store held: the records
//! of its last commit or, when the header's unchecksummed primary-slot bit
//! was flipped, of the commit before (see the store's module docs).
//!
//! The input: byte 0 picks the image (bit 0: crashed), then up to 8
//! damages `[op, page, more...]` with `page` taken modulo the pages of the
//! file:
//! - op % 7 == 0: the page overwritten with garbage (xorshift seeded by the
//!   next byte);
//! - 1: the page zeroed;
//! - 2: the byte at `[off_lo, off_hi]` of the page set to the next byte;
//! - 3: the bit `[bit]` of the byte at `[off_lo, off_hi]` flipped;
//! - 4: `[off_lo, off_hi, len, bytes...]` copied from the input at that
//!   offset (up to the page's end);
//! - 5: the file truncated at the page's start plus `[off_lo, off_hi]`;
//! - 6: `[off_lo, off_hi, len]` zeroed from that offset.
//!
//! Built with debug assertions (cargo fuzz's default, and CI's short run),
//! the region geometry in redb's header (bytes 16..24: header pages and
//! data pages per region) is left intact: changed in a crashed store, it
//! makes redb 4.6 fail a `debug_assert!` (`regional_start < region_size`,
//! `page_store/base.rs`) in its integrity check. Without debug assertions
//! (`cargo fuzz run -O`, as the node is built) that is a typed error, and
//! in a debug build the store contains the panic; the campaign runs `-O`
//! with the geometry damaged too.
#![no_main]

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::OnceLock;

use bytes::Bytes;
use libfuzzer_sys::fuzz_target;
use plexus_data::replicator::StoreBatch;
use plexus_data::store::{DurableStore, OpenError, OpenMode};

/// redb's page size.
const PAGE: usize = 4096;

/// The region geometry in redb's header (see the module docs).
const GEOMETRY: std::ops::Range<usize> = 16..24;

type Records = Vec<(String, Vec<u8>)>;

/// A built store: its bytes and the records after its last two commits.
struct Image {
    bytes: Vec<u8>,
    last: Records,
    previous: Records,
}

struct Fixture {
    /// Closed cleanly, and crashed after its last commit.
    images: [Image; 2],
    /// Where a damaged copy is written (tmpfs when there is one).
    file: PathBuf,
}

fn scratch_dir() -> PathBuf {
    let base = match std::fs::metadata("/dev/shm") {
        Ok(m) if m.is_dir() => PathBuf::from("/dev/shm"),
        _ => std::env::temp_dir(),
    };
    let dir = base.join(format!("plexus-store-fuzz-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("a scratch directory");
    dir
}

/// 300 keys written in 25 batches of 20 (keys rewritten, so there are
/// branch pages and freed pages): 20 to 30 pages.
fn build(path: &PathBuf, crashed: bool) -> Image {
    let _ = std::fs::remove_file(path);
    let store = DurableStore::open(path, OpenMode::CreateIfMissing).expect("a new store");
    let mut held = BTreeMap::new();
    let mut previous = Records::new();
    for id in 0..25u64 {
        previous = held.clone().into_iter().collect();
        let records: Vec<(String, Vec<u8>)> = (0..20u64)
            .map(|i| {
                let key = format!("d/{}", (id * 20 + i) % 300);
                (key, vec![id as u8; 30 + (i as usize % 5) * 20])
            })
            .collect();
        let batch = StoreBatch {
            id,
            records: records
                .iter()
                .map(|(k, v)| (k.as_str().into(), Bytes::copy_from_slice(v)))
                .collect(),
        };
        store.write(&batch).expect("a batch written");
        held.extend(records);
    }
    if !crashed {
        drop(store);
    }
    // Read while a crashed store is still open: what a SIGKILL leaves.
    let bytes = std::fs::read(path).expect("the store's bytes");
    Image {
        bytes,
        last: held.into_iter().collect(),
        previous,
    }
}

fn fixture() -> &'static Fixture {
    static FIXTURE: OnceLock<Fixture> = OnceLock::new();
    FIXTURE.get_or_init(|| {
        let dir = scratch_dir();
        Fixture {
            images: [
                build(&dir.join("closed.redb"), false),
                build(&dir.join("crashed.redb"), true),
            ],
            file: dir.join("damaged.redb"),
        }
    })
}

/// The input, read a byte at a time (zeros once it is used up).
struct Input<'a>(&'a [u8]);

impl Input<'_> {
    fn byte(&mut self) -> u8 {
        match self.0.split_first() {
            Some((&b, rest)) => {
                self.0 = rest;
                b
            }
            None => 0,
        }
    }

    fn offset(&mut self) -> usize {
        usize::from(u16::from_le_bytes([self.byte(), self.byte()])) % PAGE
    }

    fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

fn garbage(seed: u8, out: &mut [u8]) {
    let mut x = 0x9e37_79b9_7f4a_7c15u64 ^ u64::from(seed);
    for b in out {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        *b = x as u8;
    }
}

/// `bytes` damaged as `input` says.
fn damage(mut bytes: Vec<u8>, input: &mut Input<'_>) -> Vec<u8> {
    for _ in 0..8 {
        if input.is_empty() || bytes.is_empty() {
            break;
        }
        let op = input.byte() % 7;
        let pages = bytes.len().div_ceil(PAGE);
        let start = usize::from(input.byte()) % pages * PAGE;
        let end = (start + PAGE).min(bytes.len());
        match op {
            0 => garbage(input.byte(), &mut bytes[start..end]),
            1 => bytes[start..end].fill(0),
            2 | 3 => {
                let at = (start + input.offset()).min(end - 1);
                bytes[at] = match op {
                    2 => input.byte(),
                    _ => bytes[at] ^ (1 << (input.byte() % 8)),
                };
            }
            4 => {
                let at = (start + input.offset()).min(end);
                let len = usize::from(input.byte()).min(end - at);
                for b in &mut bytes[at..at + len] {
                    *b = input.byte();
                }
            }
            5 => {
                let at = (start + input.offset()).min(bytes.len());
                bytes.truncate(at);
            }
            _ => {
                let at = (start + input.offset()).min(end);
                let len = usize::from(input.byte()).min(end - at);
                bytes[at..at + len].fill(0);
            }
        }
    }
    bytes
}

fuzz_target!(|data: &[u8]| {
    let fixture = fixture();
    let mut input = Input(data);
    let image = &fixture.images[usize::from(input.byte() & 1)];
    let mut damaged = damage(image.bytes.clone(), &mut input);
    if cfg!(debug_assertions) && damaged.len() >= GEOMETRY.end {
        damaged[GEOMETRY].copy_from_slice(&image.bytes[GEOMETRY]);
    }
    std::fs::write(&fixture.file, &damaged).expect("the damaged copy written");

    let loaded = match DurableStore::open(&fixture.file, OpenMode::Existing) {
        Ok(store) => store.load(),
        Err(e @ (OpenError::Missing { .. } | OpenError::Locked { .. })) => {
            panic!("the harness's file: {e}")
        }
        Err(_) => return,
    };
    if let Ok(records) = loaded {
        assert!(
            records == image.last || records == image.previous,
            "loaded {} records that the store never held",
            records.len()
        );
    }
});
