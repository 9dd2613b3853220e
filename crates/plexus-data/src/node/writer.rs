//! The durable store's writer thread: one fsynced transaction per batch,
//! the next batch collecting in the replicator meanwhile; each written
//! batch's id (or the failure) goes back to the driver as a command.

use std::sync::Arc;

use plexus_remote::driver::{Input, Inputs};

use super::host::Command;
use crate::replicator::StoreBatch;
use crate::store::DurableStore;

/// The writer thread: batches in, [`Command::Stored`] out.
pub(super) struct Writer {
    batches: std::sync::mpsc::Sender<StoreBatch>,
    thread: std::thread::JoinHandle<()>,
}

impl Writer {
    /// Starts the thread writing to `store`, telling `done` of each batch.
    pub(super) fn spawn(store: DurableStore, done: Inputs<Arc<str>, Command>) -> Self {
        let (batches, rx) = std::sync::mpsc::channel::<StoreBatch>();
        let thread = std::thread::Builder::new()
            .name("plexus-data-store".into())
            .spawn(move || {
                while let Ok(batch) = rx.recv() {
                    let result = store.write(&batch).map(|()| batch.id);
                    if done.send(Input::Command(Command::Stored(result))).is_err() {
                        return;
                    }
                }
            })
            .expect("spawning the store's writer thread");
        Self { batches, thread }
    }

    /// Hands `batch` to the thread; false if it is gone.
    pub(super) fn write(&self, batch: StoreBatch) -> bool {
        self.batches.send(batch).is_ok()
    }

    /// Waits for the batch being written and closes the store.
    pub(super) async fn close(self) {
        drop(self.batches);
        let _ = tokio::task::spawn_blocking(move || self.thread.join()).await;
    }
}
