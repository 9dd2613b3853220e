//! Durable keys on disk, in [redb](https://docs.rs/redb): an embedded,
//! pure-Rust, crash-safe key-value store (copy-on-write B-trees, each commit
//! fsynced before it returns), chosen over sled (unmaintained, its own
//! format in flux) and RocksDB (a C++ build for a few thousand small
//! records) because a commit that returned is on disk and a torn write
//! leaves the previous commit intact: exactly the guarantee a durable key
//! needs.
//!
//! ```text
//!  Replicator::poll_store ──StoreBatch──▶ DurableStore::write (one commit)
//!  Replicator::recover    ◀──records──── DurableStore::load
//!                                         │ open: verify every page first
//!                                         ▼
//!                                   redb file (keys, meta)
//! ```
//!
//! The file holds two tables: `keys` (key name → record, see
//! [`encode_record`](crate::replicator::encode_record)) and `meta` (the
//! format version). [`DurableStore::write`] writes one
//! [`StoreBatch`] per transaction, so a crash leaves every batch either
//! whole or absent; the replicator acknowledges nothing of a batch before
//! it is written.
//!
//! # Opening: existing unless creation is asked for
//!
//! [`DurableStore::open`] with [`OpenMode::Existing`] opens a store that
//! is there: a missing or empty (0-byte) file is refused
//! ([`OpenError::Missing`], [`OpenError::Empty`]), so a member whose file
//! was lost, or emptied, does not start with none of its durable keys as if
//! it were new. [`OpenMode::CreateIfMissing`] makes a new store of a missing
//! or empty file; an existing store is opened as it is, never replaced.
//!
//! # A damaged file is an error, never a panic
//!
//! The file is input this process did not write, as far as a reader can
//! know: a disk, a backup tool or an operator may have changed it since.
//! redb trusts a file it closed cleanly, and its `Database::open` says it
//! may panic on one damaged since: redb 4.6 (the newest) panics with
//! `entered unreachable code`, `Invalid page type byte`, or an `unwrap` of
//! a `Utf8Error` when one page of a valid store holds garbage or zeros. So
//! the store
//!
//! 1. **opens with redb's integrity check**
//!    (`Builder::set_check_integrity_on_open`): the checksum of every page
//!    of the committed trees is verified before any page is decoded, which
//!    redb documents as reporting damage as `StorageError::Corrupted`
//!    rather than panicking. It costs one read of every live page at open,
//!    the same order as [`DurableStore::load`], which reads them all anyway.
//! 2. **commits in two phases** (`WriteTransaction::set_two_phase_commit`):
//!    the new commit slot is flushed before it becomes the primary. After a
//!    one-phase commit, recovery has to take a primary whose pages fail
//!    their checksums for a torn write and fall back to the commit before;
//!    it would serve a damaged store as its previous commit and lose the
//!    last batch without a word. With two phases the primary is known whole
//!    when it was made primary, so damage to it is refused
//!    ([`OpenError::Damaged`]). It costs a second fsync per batch.
//! 3. **contains a panic of the engine at its boundary**: opening and
//!    loading run inside `catch_unwind`. redb's promise in 1. is fuzzed here
//!    (`fuzz/fuzz_targets/store_open.rs`, where any panic counts, caught or
//!    not) but it is not ours to prove, and redb's debug builds still
//!    assert on some damage. A file must not take the node down with it: a
//!    panic caught there is [`OpenError::Damaged`] (or
//!    [`LoadError::Damaged`]) with the panic's message, the database handle
//!    is dropped, and the process goes on (the panic hook has printed the
//!    panic on stderr). Nothing of redb is used after it panicked.
//!
//! What no check can see: the one header byte that says which of redb's two
//! commit slots is the newer has no checksum. Flipped, the store opens at
//! its previous commit, which is also what a crash between the two phases
//! of a commit leaves. The batch lost so was written to the stores of the
//! members that acknowledged it (a majority, for a `Majority` write), and
//! comes back from them.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};

use redb::{
    Database, DatabaseError, ReadableDatabase, ReadableTable, StorageError, TableDefinition,
    TableError, TableHandle,
};

use crate::replicator::StoreBatch;

const KEYS: TableDefinition<&str, &[u8]> = TableDefinition::new("keys");
const META: TableDefinition<&str, u64> = TableDefinition::new("meta");
const FORMAT: &str = "format";

/// The store file format this build writes and reads.
pub const STORE_FORMAT: u64 = 1;

/// What [`DurableStore::open`] does when there is no store at the path.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum OpenMode {
    /// The store must exist: a missing or empty (0-byte) file is refused.
    /// The default, for a member restarting on its store.
    #[default]
    Existing,
    /// A missing or empty file becomes a new, empty store; an existing
    /// store is opened as with [`OpenMode::Existing`] (never replaced). For
    /// a member's first start (`plexus data --create-store`).
    CreateIfMissing,
}

/// Why [`DurableStore::open`] refused the file. Each names the file.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum OpenError {
    /// There is no file at the path and creating one was not asked for
    /// ([`OpenMode::Existing`]). Nothing was created.
    #[error("durable store {path}: no such file, and creating a new store was not asked for")]
    Missing {
        /// The file.
        path: PathBuf,
    },
    /// The file is empty (0 bytes) and creating a store in it was not asked
    /// for ([`OpenMode::Existing`]). It is left as it is.
    #[error("durable store {path}: the file is empty (0 bytes), and creating a new store in it was not asked for")]
    Empty {
        /// The file.
        path: PathBuf,
    },
    /// Another process (or another `DurableStore` here) has the store open.
    #[error("durable store {path}: in use by another process")]
    Locked {
        /// The file.
        path: PathBuf,
    },
    /// The file could not be opened or read (permissions, a directory, the
    /// disk).
    #[error("durable store {path}: cannot open: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// What the system said.
        source: std::io::Error,
    },
    /// The file is not a Plexus store: not a redb database, or a redb
    /// database of another program, or one whose creation was interrupted
    /// before its format was recorded.
    #[error("durable store {path}: not a Plexus store: {detail}")]
    NotAStore {
        /// The file.
        path: PathBuf,
        /// What was found instead.
        detail: String,
    },
    /// The file is a store but damaged: a page fails its checksum, the
    /// header or the layout is inconsistent, or the storage engine failed
    /// on it. Nothing was loaded; restore the file, or move it away and
    /// start the member with a new store to have its keys replicated back.
    #[error("durable store {path}: damaged: {detail}")]
    Damaged {
        /// The file.
        path: PathBuf,
        /// What was wrong, as the storage engine said it.
        detail: String,
    },
    /// The file was written by a newer Plexus.
    #[error("durable store {path}: format {found} is newer than this build reads ({STORE_FORMAT}); upgrade Plexus or move the file away")]
    NewerFormat {
        /// The file.
        path: PathBuf,
        /// The format the file has.
        found: u64,
    },
}

/// Why [`DurableStore::load`] could not read the records.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LoadError {
    /// A page read failed verification, or the storage engine failed on it.
    #[error("durable store {path}: damaged: {detail}")]
    Damaged {
        /// The file.
        path: PathBuf,
        /// What was wrong.
        detail: String,
    },
    /// The read failed (the disk).
    #[error("durable store {path}: read failed: {detail}")]
    Io {
        /// The file.
        path: PathBuf,
        /// What the database said.
        detail: String,
    },
}

/// Why [`DurableStore::write`] did not write a batch. Nothing of the batch
/// is written then.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum WriteError {
    /// The transaction failed (the disk, or the store is closed).
    #[error("durable store {path}: {operation} failed: {detail}")]
    Io {
        /// The file.
        path: PathBuf,
        /// What was being done.
        operation: &'static str,
        /// What the database said.
        detail: String,
    },
}

/// A replicator's durable keys in one redb file. See the
/// [module docs](self).
#[derive(Debug)]
pub struct DurableStore {
    db: Database,
    path: PathBuf,
}

impl DurableStore {
    /// Opens the store at `path`; `mode` says whether a missing or empty
    /// file becomes a new store. Every page of the file is verified before
    /// this returns (see the [module docs](self)).
    ///
    /// # Errors
    ///
    /// [`OpenError`]: the file is missing or empty (with
    /// [`OpenMode::Existing`]), in use, unreadable, not a store, damaged,
    /// or of a newer format. A damaged file never panics.
    pub fn open(path: impl AsRef<Path>, mode: OpenMode) -> Result<Self, OpenError> {
        let path = path.as_ref().to_path_buf();
        let create = mode == OpenMode::CreateIfMissing;
        match std::fs::metadata(&path) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                if !create {
                    return Err(OpenError::Missing { path });
                }
            }
            Err(source) => return Err(OpenError::Io { path, source }),
            Ok(m) if m.is_dir() => {
                return Err(OpenError::NotAStore {
                    path,
                    detail: "a directory".into(),
                })
            }
            Ok(m) if m.len() == 0 && !create => return Err(OpenError::Empty { path }),
            Ok(_) => {}
        }
        let opened = contained(|| {
            let mut builder = Database::builder();
            builder.set_check_integrity_on_open(true);
            if create {
                builder.create(&path)
            } else {
                // Never initialises a file: one that vanished or was
                // emptied since the look above is refused below.
                builder.open(&path)
            }
        });
        let db = match opened {
            Ok(Ok(db)) => db,
            Ok(Err(e)) => return Err(open_error(path, create, e)),
            Err(panic) => {
                return Err(OpenError::Damaged {
                    path,
                    detail: panic,
                })
            }
        };
        let store = Self { db, path };
        match contained(|| store.check_format(create)) {
            Ok(Ok(())) => Ok(store),
            Ok(Err(e)) => Err(e),
            Err(panic) => Err(OpenError::Damaged {
                detail: panic,
                path: store.path,
            }),
        }
    }

    /// Checks that the file is a Plexus store of a format this build reads;
    /// records the format in a database without tables when `create`.
    fn check_format(&self, create: bool) -> Result<(), OpenError> {
        let read = self.db.begin_read().map_err(|e| self.refusal(e))?;
        let tables: Vec<String> = read
            .list_tables()
            .map_err(|e| self.refusal(e))?
            .map(|t| t.name().to_owned())
            .collect();
        if tables.is_empty() {
            drop(read);
            return if create {
                self.initialise()
            } else {
                Err(self.not_a_store(
                    "a database without tables: no format recorded (was its creation interrupted?)",
                ))
            };
        }
        let meta = read.open_table(META).map_err(|e| self.table_error(e))?;
        match meta.get(FORMAT).map_err(|e| self.refusal(e))? {
            None => Err(self.not_a_store("no format recorded")),
            Some(found) if found.value() > STORE_FORMAT => Err(OpenError::NewerFormat {
                path: self.path.clone(),
                found: found.value(),
            }),
            Some(_) => {
                read.open_table(KEYS).map_err(|e| self.table_error(e))?;
                Ok(())
            }
        }
    }

    /// Records the format and creates the tables of a new store.
    fn initialise(&self) -> Result<(), OpenError> {
        let mut tx = self.db.begin_write().map_err(|e| self.refusal(e))?;
        tx.set_two_phase_commit(true);
        {
            let mut meta = tx.open_table(META).map_err(|e| self.refusal(e))?;
            meta.insert(FORMAT, STORE_FORMAT)
                .map_err(|e| self.refusal(e))?;
            tx.open_table(KEYS).map_err(|e| self.refusal(e))?;
        }
        tx.commit().map_err(|e| self.refusal(e))
    }

    /// The [`OpenError`] of a failed read or write of the open database:
    /// damage if redb found the file corrupt, else the I/O that failed.
    fn refusal(&self, e: impl Into<redb::Error>) -> OpenError {
        let path = self.path.clone();
        match e.into() {
            redb::Error::Corrupted(detail) => OpenError::Damaged { path, detail },
            redb::Error::Io(source) => OpenError::Io { path, source },
            other => OpenError::Io {
                path,
                source: std::io::Error::other(other.to_string()),
            },
        }
    }

    fn not_a_store(&self, detail: &str) -> OpenError {
        OpenError::NotAStore {
            path: self.path.clone(),
            detail: detail.to_owned(),
        }
    }

    fn table_error(&self, e: TableError) -> OpenError {
        match e {
            TableError::TableDoesNotExist(name) => self.not_a_store(&format!(
                "no `{name}` table: a redb database of another program"
            )),
            TableError::TableTypeMismatch { .. } | TableError::TableIsMultimap(_) => {
                self.not_a_store(&format!("a redb database of another program: {e}"))
            }
            other => self.refusal(other),
        }
    }

    /// The file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Every record, for [`Replicator::recover`](crate::Replicator::recover).
    ///
    /// # Errors
    ///
    /// [`LoadError`]: a read failed or found damage. Never panics on a
    /// damaged file.
    pub fn load(&self) -> Result<Vec<(String, Vec<u8>)>, LoadError> {
        match contained(|| self.load_records()) {
            Ok(result) => result,
            Err(panic) => Err(LoadError::Damaged {
                path: self.path.clone(),
                detail: panic,
            }),
        }
    }

    fn load_records(&self) -> Result<Vec<(String, Vec<u8>)>, LoadError> {
        let refusal = |e: redb::Error| {
            let path = self.path.clone();
            match e {
                redb::Error::Corrupted(detail) => LoadError::Damaged { path, detail },
                other => LoadError::Io {
                    path,
                    detail: other.to_string(),
                },
            }
        };
        let tx = self.db.begin_read().map_err(|e| refusal(e.into()))?;
        let table = tx.open_table(KEYS).map_err(|e| refusal(e.into()))?;
        let mut out = Vec::new();
        for row in table.iter().map_err(|e| refusal(e.into()))? {
            let (k, v) = row.map_err(|e| refusal(e.into()))?;
            out.push((k.value().to_owned(), v.value().to_vec()));
        }
        Ok(out)
    }

    /// Writes `batch` in one transaction, durable when this returns.
    ///
    /// # Errors
    ///
    /// [`WriteError`]: nothing of the batch is written then.
    pub fn write(&self, batch: &StoreBatch) -> Result<(), WriteError> {
        let io = |operation: &'static str| {
            move |e: &dyn std::fmt::Display| WriteError::Io {
                path: self.path.clone(),
                operation,
                detail: e.to_string(),
            }
        };
        let mut tx = self.db.begin_write().map_err(|e| io("write")(&e))?;
        // See the module docs: a damaged latest commit is refused at the
        // next open rather than replaced by the one before.
        tx.set_two_phase_commit(true);
        {
            let mut table = tx.open_table(KEYS).map_err(|e| io("write")(&e))?;
            for (key, record) in &batch.records {
                table
                    .insert(&**key, &**record)
                    .map_err(|e| io("write")(&e))?;
            }
        }
        tx.commit().map_err(|e| io("commit")(&e))
    }
}

/// Runs `f`, turning a panic into `Err` with its message: the boundary
/// where a panic of the storage engine on a damaged file is contained (see
/// the [module docs](self)). Whatever `f` built is dropped while unwinding
/// and nothing it touched is used afterwards, hence `AssertUnwindSafe`.
fn contained<T>(f: impl FnOnce() -> T) -> Result<T, String> {
    catch_unwind(AssertUnwindSafe(f)).map_err(|payload| {
        let message = payload
            .downcast_ref::<&str>()
            .map(|s| (*s).to_owned())
            .or_else(|| payload.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "a panic without a message".into());
        format!("the storage engine panicked reading it: {message}")
    })
}

/// The [`OpenError`] of redb's refusal to open `path`.
fn open_error(path: PathBuf, create: bool, e: DatabaseError) -> OpenError {
    match e {
        DatabaseError::DatabaseAlreadyOpen | DatabaseError::LockProtocolMismatch => {
            OpenError::Locked { path }
        }
        DatabaseError::Storage(StorageError::Io(source)) => match source.kind() {
            // redb's "Not a redb database: magic number mismatch" and the
            // like.
            std::io::ErrorKind::InvalidData => OpenError::NotAStore {
                path,
                detail: source.to_string(),
            },
            std::io::ErrorKind::NotFound if !create => OpenError::Missing { path },
            _ => OpenError::Io { path, source },
        },
        DatabaseError::Storage(StorageError::Corrupted(detail)) => {
            OpenError::Damaged { path, detail }
        }
        // A file format redb no longer reads: no store ever had it, so its
        // version byte is damaged. A repair that could not finish is one
        // too.
        e @ (DatabaseError::UpgradeRequired(_) | DatabaseError::RepairAborted) => {
            OpenError::Damaged {
                path,
                detail: e.to_string(),
            }
        }
        other => OpenError::Io {
            path,
            source: std::io::Error::other(other.to_string()),
        },
    }
}

#[cfg(test)]
mod tests;
