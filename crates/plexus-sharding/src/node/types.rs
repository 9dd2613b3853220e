//! The entity types used on a node, each with its message type, and how an
//! [`EntityRef`] travels inside messages: as its type and id, turned back
//! into a live ref on the node that decodes it (through the node's
//! extension, [`plexus_remote::Node::set_extension`]).

use std::any::TypeId;
use std::collections::HashMap;
use std::marker::PhantomData;
use std::sync::{Arc, Mutex};

use plexus_core::remote::{context_extension, RemoteMessage};
use plexus_remote::driver::Input;
use serde::de::Error as _;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use super::host::Command;
use super::kind::TypeOf;
use super::{EntityRef, EntityTypeError, Inputs, MAX_TYPE_LEN};
use crate::shard::EntityId;

#[derive(Debug, Clone, Copy)]
struct TypeUse {
    message: TypeId,
    name: &'static str,
    registered: bool,
}

/// The types used here; the driver hears of each new one.
pub(crate) struct TypeTable {
    pub(crate) inputs: Inputs,
    types: Mutex<HashMap<Arc<str>, TypeUse>>,
}

impl TypeTable {
    pub(crate) fn new(inputs: Inputs) -> Self {
        Self {
            inputs,
            types: Mutex::new(HashMap::new()),
        }
    }

    /// Checks `entity_type`'s name and message type, and tells the driver
    /// of a type new here; says whether it was registered here before.
    pub(crate) fn use_type<M: RemoteMessage>(
        &self,
        entity_type: &str,
        register: bool,
    ) -> Result<(Arc<str>, bool), EntityTypeError> {
        check_type_name(entity_type)?;
        let name: Arc<str> = entity_type.into();
        let mut types = self
            .types
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let asked = TypeUse {
            message: TypeId::of::<M>(),
            name: std::any::type_name::<M>(),
            registered: register,
        };
        match types.get_mut(&name) {
            Some(known) if known.message != asked.message => Err(EntityTypeError::MessageType {
                entity_type: entity_type.into(),
                registered: known.name,
                asked: asked.name,
            }),
            Some(known) => {
                let before = known.registered;
                known.registered |= register;
                Ok((name, before))
            }
            None => {
                types.insert(name.clone(), asked);
                if !register {
                    let _ = self.inputs.send(Input::Command(Command::Kind {
                        entity_type: name.clone(),
                        kind: Box::new(TypeOf::<M>::proxy(name.clone())),
                        remember: None,
                        singleton: None,
                    }));
                }
                Ok((name, false))
            }
        }
    }

    pub(crate) fn forget(&self, entity_type: &str) {
        let mut types = self
            .types
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        types.remove(entity_type);
    }
}

pub(crate) fn check_type_name(name: &str) -> Result<(), EntityTypeError> {
    let ok = !name.is_empty()
        && name.len() <= MAX_TYPE_LEN
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'));
    if ok {
        Ok(())
    } else {
        Err(EntityTypeError::BadName(name.into()))
    }
}

impl<M> Serialize for EntityRef<M> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        (&*self.entity_type, self.id.as_str()).serialize(s)
    }
}

impl<'de, M: RemoteMessage> Deserialize<'de> for EntityRef<M> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let (entity_type, id) = <(String, String)>::deserialize(d)?;
        let id = EntityId::new(&id).map_err(D::Error::custom)?;
        let table = context_extension::<TypeTable>().ok_or_else(|| {
            D::Error::custom("entity refs can only be decoded on a node running sharding")
        })?;
        let (entity_type, _) = table
            .use_type::<M>(&entity_type, false)
            .map_err(D::Error::custom)?;
        Ok(EntityRef {
            entity_type,
            id,
            inputs: table.inputs.clone(),
            _message: PhantomData,
        })
    }
}
