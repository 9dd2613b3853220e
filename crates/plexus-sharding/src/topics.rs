//! Topics: distributed publish/subscribe on a cluster's members.
//!
//! ```text
//!   Topic<M>: subscribe(local actor) / unsubscribe / publish(M), any member
//!   ─────────────────────────────────────────────────────────────────────
//!   registry: the replicated key `plexus.topic/<name>`, an add-wins set of
//!   the members with a subscriber (plexus-data), watched by every member
//!   that uses the topic
//!   ─────────────────────────────────────────────────────────────────────
//!   each member: the actor `plexus.topic.<name>`, which hands what it gets
//!   to its local subscribers
//! ```
//!
//! A publication goes once to each member the registry lists (through
//! the member's one link to it), and that member's topic actor hands it to
//! each of its subscribers: **each subscriber gets each publication at
//! most once, and a publisher's publications in the order it published
//! them**. A subscription counts once the registry holds the member, at
//! majority when [`Topic::subscribe`] returns; a publisher publishes to
//! the members its replica lists (gossip brings the rest, within a few
//! gossip rounds: [`Topic::members`] shows it). A member that is downed or
//! removed is taken out of every registry by the others; a member whose
//! last subscriber stopped or unsubscribed takes itself out.

use std::any::{Any, TypeId};
use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use plexus_cluster::{Cluster, ClusterUpdate, MemberState};
use plexus_core::remote::RemoteMessage;
use plexus_core::{ActorRef, SystemRef};
use plexus_data::crdt::ORSet;
use plexus_data::node::Replication;
use plexus_data::{Changed, Consistency, Key, UpdateError};
use plexus_remote::{ForgedRefs, Node, PublishError};
use tokio::sync::watch;

/// The prefix of every topic's registry key.
pub const TOPIC_KEY_PREFIX: &str = "plexus.topic/";

/// The longest topic name.
pub const MAX_TOPIC_LEN: usize = 64;

/// How long a registry write waits for a majority.
const WAIT: Duration = Duration::from_secs(5);

/// Why a topic could not be used.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TopicError {
    /// Empty, longer than [`MAX_TOPIC_LEN`], or with a character other than
    /// an ASCII letter, digit, `.`, `_` or `-`.
    #[error("topic {0:?}: a name is 1 to {MAX_TOPIC_LEN} ASCII letters, digits, '.', '_' or '-'")]
    BadName(String),
    /// The topic is used here with another message type.
    #[error("topic {topic:?} carries {used}, not {asked}")]
    MessageType {
        /// The topic.
        topic: String,
        /// The message type it is used with.
        used: &'static str,
        /// The one asked for now.
        asked: &'static str,
    },
    /// Its actor could not be published.
    #[error("topic: {0}")]
    Publish(#[from] PublishError),
    /// The registry did not take this member's subscription (or its end)
    /// at majority; it holds here and spreads by gossip all the same.
    #[error("topic {topic:?}: registry not updated at majority: {source}")]
    Registry {
        /// The topic.
        topic: String,
        /// Why.
        source: UpdateError,
    },
}

/// The topics of a member. Clones share them. See the [module docs](self).
#[derive(Clone)]
pub struct Topics {
    node: Node,
    system: SystemRef,
    data: Replication,
    me: Arc<str>,
    /// Each topic used here: its message type and its shared state.
    used: Arc<Mutex<HashMap<Arc<str>, Used>>>,
}

struct Used {
    message: TypeId,
    name: &'static str,
    shared: Arc<dyn Any + Send + Sync>,
    /// Takes a gone member out of the topic's registry.
    forget: Arc<dyn Fn(Arc<str>) + Send + Sync>,
}

impl std::fmt::Debug for Topics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Topics")
            .field("member", &self.me)
            .finish_non_exhaustive()
    }
}

fn registry(name: &str) -> Key<ORSet<String>> {
    Key::new(format!("{TOPIC_KEY_PREFIX}{name}"))
}

/// Takes `member` out of a topic's registry, here first (gossip spreads
/// it), without waiting.
fn leave_registry(data: &Replication, key: &Key<ORSet<String>>, member: Arc<str>) {
    let (data, key) = (data.clone(), key.clone());
    tokio::spawn(async move {
        let _ = data
            .update(&key, Consistency::Local, WAIT, move |set, _| {
                set.remove(&member.to_string())
            })
            .await;
    });
}

fn actor_name(name: &str) -> String {
    format!("plexus.topic.{name}")
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl Topics {
    /// The topics of `cluster`'s member on `node`, registered in `data`.
    /// Start them on every member (as replicated data): a member's
    /// replicator takes registry updates only once it knows their type.
    pub fn start(node: &Node, system: &SystemRef, cluster: &Cluster, data: &Replication) -> Self {
        data.register::<ORSet<String>>();
        let topics = Self {
            node: node.clone(),
            system: system.clone(),
            data: data.clone(),
            me: Arc::clone(&cluster.local().address),
            used: Arc::default(),
        };
        // Members that are gone leave every registry known here.
        let used = Arc::downgrade(&topics.used);
        let watcher = system.spawn_fn(move |update: ClusterUpdate, ctx| {
            let Some(used) = used.upgrade() else {
                ctx.stop();
                return;
            };
            let gone: Vec<Arc<str>> = update
                .members
                .iter()
                .filter(|m| matches!(m.state, MemberState::Down | MemberState::Removed))
                .map(|m| Arc::clone(&m.address))
                .collect();
            for u in lock(&used).values() {
                for member in &gone {
                    (u.forget)(Arc::clone(member));
                }
            }
        });
        cluster.subscribe(watcher);
        topics
    }

    /// The topic `name`, whose publications are `M`.
    ///
    /// # Errors
    ///
    /// [`TopicError`] for a bad name, another message type than the one the
    /// topic is used with here, or its actor not published.
    pub fn topic<M: RemoteMessage + Clone>(&self, name: &str) -> Result<Topic<M>, TopicError> {
        let ok = !name.is_empty()
            && name.len() <= MAX_TOPIC_LEN
            && name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'));
        if !ok {
            return Err(TopicError::BadName(name.into()));
        }
        let mut used = lock(&self.used);
        if let Some(u) = used.get(name) {
            if u.message != TypeId::of::<M>() {
                return Err(TopicError::MessageType {
                    topic: name.into(),
                    used: u.name,
                    asked: std::any::type_name::<M>(),
                });
            }
            let shared = Arc::clone(&u.shared)
                .downcast::<Shared<M>>()
                .expect("the type checked above");
            return Ok(Topic { shared });
        }
        let shared = self.open::<M>(name.into())?;
        let data = self.data.clone();
        let key = registry(name);
        let forget = Arc::new(move |member: Arc<str>| leave_registry(&data, &key, member));
        used.insert(
            name.into(),
            Used {
                message: TypeId::of::<M>(),
                name: std::any::type_name::<M>(),
                shared: shared.clone(),
                forget,
            },
        );
        Ok(Topic { shared })
    }

    fn open<M: RemoteMessage + Clone>(&self, name: Arc<str>) -> Result<Arc<Shared<M>>, TopicError> {
        let (members, _) = watch::channel(BTreeSet::new());
        let shared = Arc::new(Shared {
            name: name.clone(),
            me: self.me.clone(),
            node: self.node.clone(),
            data: self.data.clone(),
            local: Mutex::new(Vec::new()),
            remotes: Mutex::new(ForgedRefs::default()),
            members,
        });
        let fan_out = Arc::downgrade(&shared);
        let inbox = self
            .system
            .spawn_fn(move |msg: M, ctx| match fan_out.upgrade() {
                Some(shared) => shared.hand_out(msg),
                None => ctx.stop(),
            });
        self.node.publish(&inbox, &actor_name(&name))?;
        let watched = Arc::downgrade(&shared);
        let watcher = self
            .system
            .spawn_fn(move |changed: Changed<ORSet<String>>, ctx| {
                let Some(shared) = watched.upgrade() else {
                    ctx.stop();
                    return;
                };
                let members = changed
                    .value
                    .iter()
                    .map(|m| Arc::from(m.as_str()))
                    .collect();
                shared.members.send_replace(members);
            });
        self.data.subscribe(&registry(&name), watcher);
        Ok(shared)
    }
}

/// A topic on this member: subscribe local actors, publish from here.
/// Cheap to clone. See the [module docs](crate::topics).
pub struct Topic<M> {
    shared: Arc<Shared<M>>,
}

impl<M> Clone for Topic<M> {
    fn clone(&self) -> Self {
        Self {
            shared: Arc::clone(&self.shared),
        }
    }
}

impl<M> std::fmt::Debug for Topic<M> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("Topic").field(&self.shared.name).finish()
    }
}

struct Shared<M> {
    name: Arc<str>,
    me: Arc<str>,
    node: Node,
    data: Replication,
    /// This member's subscribers.
    local: Mutex<Vec<ActorRef<M>>>,
    /// The other members' topic actors.
    remotes: Mutex<ForgedRefs<M>>,
    /// The members the registry lists, as this member's replica has it.
    members: watch::Sender<BTreeSet<Arc<str>>>,
}

impl<M: RemoteMessage + Clone> Shared<M> {
    /// Hands `msg` to every live local subscriber, once each; a member
    /// whose last subscriber stopped leaves the registry.
    fn hand_out(&self, msg: M) {
        let emptied = {
            let mut local = lock(&self.local);
            let before = local.len();
            local.retain(ActorRef::is_alive);
            for subscriber in local.iter() {
                subscriber.tell(msg.clone());
            }
            before > 0 && local.is_empty()
        };
        if emptied {
            leave_registry(&self.data, &registry(&self.name), self.me.clone());
        }
    }
}

impl<M: RemoteMessage + Clone> Topic<M> {
    /// The topic's name.
    pub fn name(&self) -> &str {
        &self.shared.name
    }

    /// Subscribes `subscriber` (an actor of this member): it gets every
    /// publication from now on, once. Returns once the registry lists
    /// this member at majority.
    ///
    /// # Errors
    ///
    /// [`TopicError::Registry`] if no majority took it in time (it holds
    /// here and spreads by gossip all the same).
    pub async fn subscribe(&self, subscriber: ActorRef<M>) -> Result<(), TopicError> {
        {
            let mut local = lock(&self.shared.local);
            if !local.iter().any(|s| s.id() == subscriber.id()) {
                local.push(subscriber);
            }
        }
        let me = self.shared.me.to_string();
        self.registry(move |set, replica| set.add(replica, me))
            .await
    }

    /// Ends `subscriber`'s subscription; the member leaves the registry
    /// with its last subscriber.
    ///
    /// # Errors
    ///
    /// [`TopicError::Registry`] as for [`subscribe`](Topic::subscribe).
    pub async fn unsubscribe(&self, subscriber: &ActorRef<M>) -> Result<(), TopicError> {
        let emptied = {
            let mut local = lock(&self.shared.local);
            local.retain(|s| s.id() != subscriber.id() && s.is_alive());
            local.is_empty()
        };
        if !emptied {
            return Ok(());
        }
        let me = self.shared.me.to_string();
        self.registry(move |set, _| set.remove(&me)).await
    }

    async fn registry<F>(&self, change: F) -> Result<(), TopicError>
    where
        F: FnOnce(&mut ORSet<String>, plexus_data::ReplicaId) -> ORSet<String> + Send + 'static,
    {
        self.shared
            .data
            .update(
                &registry(&self.shared.name),
                Consistency::Majority,
                WAIT,
                change,
            )
            .await
            .map_err(|source| TopicError::Registry {
                topic: self.shared.name.to_string(),
                source,
            })
    }

    /// Publishes `msg` to every subscriber, on every member the registry
    /// lists here: once each, in this member's order.
    pub fn publish(&self, msg: M) {
        let members = self.shared.members.borrow().clone();
        let name = actor_name(&self.shared.name);
        let mut remotes = lock(&self.shared.remotes);
        for member in members {
            if member == self.shared.me {
                self.shared.hand_out(msg.clone());
                continue;
            }
            match remotes.get(&self.shared.node, &member, || format!("{member}/{name}")) {
                Ok(topic) => topic.tell(msg.clone()),
                Err(error) => {
                    tracing::debug!(target: "plexus::sharding", topic = %self.shared.name, %member, %error, "a member's topic is unreachable");
                }
            }
        }
    }

    /// The members the registry lists here (those with a subscriber), now
    /// and as it changes.
    pub fn members(&self) -> watch::Receiver<BTreeSet<Arc<str>>> {
        self.shared.members.subscribe()
    }
}
