//! The local registry: actors registered and looked up by name.
//!
//! A name belongs to at most one live actor; registering a taken name fails
//! with [`RegistryError::NameTaken`]. Names are released when their actor
//! stops. Lookups are typed: asking for a ref of the wrong message type fails
//! with [`LookupError::WrongType`] instead of handing out a ref that cannot be
//! used.

use std::any::Any;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use crate::mailbox::Control;

use crate::{ActorId, ActorRef, LookupError, RegistryError};

struct Entry {
    id: ActorId,
    message_type: &'static str,
    actor_ref: Box<dyn Any + Send + Sync>,
    control: Arc<dyn Control>,
}

#[derive(Default)]
pub(crate) struct Registry {
    names: Mutex<HashMap<Box<str>, Entry>>,
}

impl Registry {
    pub(crate) fn register<M: Send + 'static>(
        &self,
        name: &str,
        actor_ref: &ActorRef<M>,
    ) -> Result<(), RegistryError> {
        if name.is_empty() {
            return Err(RegistryError::EmptyName);
        }
        let mut names = self.lock();
        if let Some(e) = names.get(name) {
            return Err(RegistryError::NameTaken {
                name: name.to_owned(),
                holder: e.id,
            });
        }
        // Recording the name on the actor under the registry lock means a
        // concurrent stop either sees the name (and removes it after we
        // release the lock) or we see the actor stopped.
        if !actor_ref.control().add_name(name) {
            return Err(RegistryError::ActorStopped {
                name: name.to_owned(),
                id: actor_ref.id(),
            });
        }
        names.insert(
            name.into(),
            Entry {
                id: actor_ref.id(),
                message_type: std::any::type_name::<M>(),
                actor_ref: Box::new(actor_ref.clone()),
                control: actor_ref.control_arc(),
            },
        );
        Ok(())
    }

    pub(crate) fn lookup<M: Send + 'static>(&self, name: &str) -> Result<ActorRef<M>, LookupError> {
        let names = self.lock();
        let entry = names.get(name).ok_or_else(|| LookupError::NotFound {
            name: name.to_owned(),
        })?;
        entry
            .actor_ref
            .downcast_ref::<ActorRef<M>>()
            .cloned()
            .ok_or_else(|| LookupError::WrongType {
                name: name.to_owned(),
                expected: std::any::type_name::<M>(),
                actual: entry.message_type,
            })
    }

    pub(crate) fn unregister(&self, name: &str) -> Option<ActorId> {
        let entry = self.lock().remove(name)?;
        entry.control.remove_name(name);
        Some(entry.id)
    }

    pub(crate) fn remove_names(&self, id: ActorId, names: &[Box<str>]) {
        let mut map = self.lock();
        for n in names {
            if map.get(&**n).is_some_and(|e| e.id == id) {
                map.remove(&**n);
            }
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.lock().len()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<Box<str>, Entry>> {
        // No user code runs under this lock; see `Mailbox::lock`.
        self.names.lock().unwrap_or_else(|e| e.into_inner())
    }
}
