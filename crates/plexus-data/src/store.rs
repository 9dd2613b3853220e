//! Durable keys on disk, in [redb](https://docs.rs/redb): an embedded,
//! pure-Rust, crash-safe key-value store (copy-on-write B-trees, each commit
//! fsynced before it returns), chosen over sled (unmaintained, its own
//! format in flux) and RocksDB (a C++ build for a few thousand small
//! records) because a commit that returned is on disk and a torn write
//! leaves the previous commit intact: exactly the guarantee a durable key
//! needs.
//!
//! The file holds two tables: `keys` (key name → record, see
//! [`encode_record`](crate::replicator::encode_record)) and `meta` (the
//! format version). [`DurableStore::write`] writes one
//! [`StoreBatch`] per transaction, so a crash leaves every batch either
//! whole or absent; the replicator acknowledges nothing of a batch before
//! it is written.

use std::path::{Path, PathBuf};

use redb::{Database, ReadableDatabase, ReadableTable, TableDefinition};

use crate::replicator::StoreBatch;

const KEYS: TableDefinition<&str, &[u8]> = TableDefinition::new("keys");
const META: TableDefinition<&str, u64> = TableDefinition::new("meta");
const FORMAT: &str = "format";

/// The store file format this build writes and reads.
pub const STORE_FORMAT: u64 = 1;

/// Why the store could not be used.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    /// The file could not be opened or created.
    #[error("durable store {path}: cannot open: {source}")]
    Open {
        /// The file.
        path: PathBuf,
        /// What the database said.
        source: Box<redb::DatabaseError>,
    },
    /// The file is not a store, or is damaged.
    #[error("durable store {path}: corrupt or not a Plexus store: {detail}")]
    Corrupt {
        /// The file.
        path: PathBuf,
        /// What was wrong.
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
    /// A read or write failed.
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
    /// Opens the store at `path`, creating it if it does not exist.
    ///
    /// # Errors
    ///
    /// [`StoreError`]: the file cannot be opened, is not a store, or was
    /// written by a newer version.
    pub fn open(path: impl AsRef<Path>) -> Result<Self, StoreError> {
        let path = path.as_ref().to_path_buf();
        let db = Database::create(&path).map_err(|e| match e {
            redb::DatabaseError::Storage(s) => StoreError::Corrupt {
                path: path.clone(),
                detail: s.to_string(),
            },
            other => StoreError::Open {
                path: path.clone(),
                source: Box::new(other),
            },
        })?;
        let store = Self { db, path };
        store.check_format()?;
        Ok(store)
    }

    fn io(&self, operation: &'static str) -> impl Fn(&dyn std::fmt::Display) -> StoreError + '_ {
        move |e| StoreError::Io {
            path: self.path.clone(),
            operation,
            detail: e.to_string(),
        }
    }

    fn check_format(&self) -> Result<(), StoreError> {
        let tx = self.db.begin_write().map_err(|e| self.io("open")(&e))?;
        {
            let mut meta = tx.open_table(META).map_err(|e| self.corrupt(&e))?;
            let found = meta
                .get(FORMAT)
                .map_err(|e| self.corrupt(&e))?
                .map(|v| v.value());
            match found {
                Some(f) if f > STORE_FORMAT => {
                    return Err(StoreError::NewerFormat {
                        path: self.path.clone(),
                        found: f,
                    })
                }
                Some(_) => {}
                None => {
                    meta.insert(FORMAT, STORE_FORMAT)
                        .map_err(|e| self.io("write")(&e))?;
                }
            }
            tx.open_table(KEYS).map_err(|e| self.corrupt(&e))?;
        }
        tx.commit().map_err(|e| self.io("commit")(&e))
    }

    fn corrupt(&self, e: &dyn std::fmt::Display) -> StoreError {
        StoreError::Corrupt {
            path: self.path.clone(),
            detail: e.to_string(),
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
    /// [`StoreError::Io`] or [`StoreError::Corrupt`].
    pub fn load(&self) -> Result<Vec<(String, Vec<u8>)>, StoreError> {
        let tx = self.db.begin_read().map_err(|e| self.io("read")(&e))?;
        let table = tx.open_table(KEYS).map_err(|e| self.corrupt(&e))?;
        let mut out = Vec::new();
        for row in table.iter().map_err(|e| self.io("read")(&e))? {
            let (k, v) = row.map_err(|e| self.io("read")(&e))?;
            out.push((k.value().to_owned(), v.value().to_vec()));
        }
        Ok(out)
    }

    /// Writes `batch` in one transaction, durable when this returns.
    ///
    /// # Errors
    ///
    /// [`StoreError::Io`]: nothing of the batch is written then.
    pub fn write(&self, batch: &StoreBatch) -> Result<(), StoreError> {
        let tx = self.db.begin_write().map_err(|e| self.io("write")(&e))?;
        {
            let mut table = tx.open_table(KEYS).map_err(|e| self.io("write")(&e))?;
            for (key, record) in &batch.records {
                table
                    .insert(&**key, &**record)
                    .map_err(|e| self.io("write")(&e))?;
            }
        }
        tx.commit().map_err(|e| self.io("commit")(&e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;

    fn dir(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("plexus-store-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn batches_written_are_loaded_after_reopening() {
        let path = dir("reopen").join("data.redb");
        {
            let store = DurableStore::open(&path).unwrap();
            store
                .write(&StoreBatch {
                    id: 1,
                    records: vec![
                        ("a".into(), Bytes::from_static(b"1")),
                        ("b".into(), Bytes::from_static(b"2")),
                    ],
                })
                .unwrap();
            store
                .write(&StoreBatch {
                    id: 2,
                    records: vec![("a".into(), Bytes::from_static(b"3"))],
                })
                .unwrap();
        }
        let store = DurableStore::open(&path).unwrap();
        assert_eq!(
            store.load().unwrap(),
            vec![("a".into(), b"3".to_vec()), ("b".into(), b"2".to_vec())]
        );
    }

    #[test]
    fn a_file_that_is_not_a_store_is_refused() {
        let path = dir("garbage").join("data.redb");
        std::fs::write(&path, vec![0x5a; 4096]).unwrap();
        let err = DurableStore::open(&path).unwrap_err();
        assert!(
            matches!(err, StoreError::Corrupt { .. } | StoreError::Open { .. }),
            "{err}"
        );
    }

    #[test]
    fn a_store_of_a_newer_format_is_refused() {
        let path = dir("newer").join("data.redb");
        {
            let store = DurableStore::open(&path).unwrap();
            let tx = store.db.begin_write().unwrap();
            tx.open_table(META)
                .unwrap()
                .insert(FORMAT, STORE_FORMAT + 1)
                .unwrap();
            tx.commit().unwrap();
        }
        let err = DurableStore::open(&path).unwrap_err();
        assert!(
            matches!(err, StoreError::NewerFormat { found, .. } if found == STORE_FORMAT + 1),
            "{err}"
        );
        assert!(err.to_string().contains("newer than this build reads"));
    }
}
