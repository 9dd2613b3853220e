//! The actor system: spawning, the set of live actors, graceful shutdown,
//! the registry and the dead-letter office.
//!
//! [`ActorSystem`] is the owning handle: when the last clone of it is dropped
//! every actor still running is killed, so no task outlives the system.
//! [`SystemRef`] (what actors see through
//! [`Context::system`](crate::Context::system)) has the same API but does not
//! keep actors alive, so an actor that stores it creates no cycle.

use std::collections::VecDeque;
use std::ops::Deref;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use rustc_hash::FxHashMap;
use tokio::runtime::Handle;
use tokio::sync::{broadcast, Notify};

use crate::dead_letters::DeadLetterOffice;
use crate::mailbox::{Control, Mailbox, Signal};
use crate::registry::Registry;
use crate::run::{run_actor, ActorCell, Restarter};
use crate::{
    Actor, ActorId, ActorRef, DeadLetter, ExitReason, FnActor, LookupError, NodeId, RegistryError,
    SpawnError, Supervision, SystemError,
};

/// Live-actor shards; spreads the lock taken on every spawn and stop.
const LIVE_SHARDS: usize = 64;

type LiveShard = Mutex<FxHashMap<u64, Arc<dyn Control>>>;

pub(crate) struct SystemShared {
    node: NodeId,
    next_serial: AtomicU64,
    live: Box<[LiveShard]>,
    live_count: AtomicUsize,
    all_stopped: Notify,
    shutting_down: AtomicBool,
    owners: AtomicUsize,
    runtime: Handle,
    pub(crate) registry: Registry,
    pub(crate) dead_letters: Arc<DeadLetterOffice>,
}

impl SystemShared {
    fn shard(&self, serial: u64) -> MutexGuard<'_, FxHashMap<u64, Arc<dyn Control>>> {
        // No user code runs under this lock; see `Mailbox::lock`.
        self.live[serial as usize % LIVE_SHARDS]
            .lock()
            .unwrap_or_else(|e| e.into_inner())
    }

    fn insert_live(&self, id: ActorId, control: Arc<dyn Control>) {
        self.live_count.fetch_add(1, Ordering::AcqRel);
        self.shard(id.serial()).insert(id.serial(), control);
    }

    pub(crate) fn remove_live(&self, id: ActorId) {
        let removed = self.shard(id.serial()).remove(&id.serial());
        if removed.is_some() && self.live_count.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.all_stopped.notify_waiters();
        }
    }

    pub(crate) fn runtime(&self) -> &Handle {
        &self.runtime
    }

    fn live_controls(&self) -> Vec<Arc<dyn Control>> {
        let mut all = Vec::with_capacity(self.live_count.load(Ordering::Acquire));
        for i in 0..LIVE_SHARDS {
            all.extend(self.shard(i as u64).values().cloned());
        }
        all
    }

    /// The `k` actors with the most messages waiting, deepest first, and
    /// the messages waiting in all. A shard's lock is held only to clone
    /// its handles, so spawns and stops never wait for the mailboxes to be
    /// read.
    pub(crate) fn deepest_mailboxes(&self, k: usize) -> (Vec<(ActorId, usize)>, usize) {
        let mut top: Vec<(ActorId, usize)> = Vec::with_capacity(k + 1);
        let mut total = 0usize;
        let mut controls = Vec::new();
        for i in 0..LIVE_SHARDS {
            controls.clear();
            controls.extend(self.shard(i as u64).values().cloned());
            for c in &controls {
                let depth = c.waiting();
                total += depth;
                if depth == 0 || k == 0 {
                    continue;
                }
                if top.len() == k && top[k - 1].1 >= depth {
                    continue;
                }
                let at = top.partition_point(|&(_, d)| d >= depth);
                top.insert(at, (c.id(), depth));
                top.truncate(k);
            }
        }
        (top, total)
    }

    fn kill_all(&self) {
        for c in self.live_controls() {
            c.kill();
        }
    }
}

/// A handle to an actor system that does not keep it alive; see the module
/// docs. Obtained from [`ActorSystem`] (by deref) or
/// [`Context::system`](crate::Context::system).
#[derive(Clone)]
pub struct SystemRef {
    shared: Arc<SystemShared>,
}

impl SystemRef {
    /// The id of this node.
    pub fn node_id(&self) -> NodeId {
        self.shared.node
    }

    pub(crate) fn runtime(&self) -> &Handle {
        &self.shared.runtime
    }

    /// Spawns an actor on the system's tokio runtime.
    ///
    /// If the system is shutting down, the actor is not started and the
    /// returned ref is already stopped (its monitors see
    /// [`ExitReason::Shutdown`]); use [`build`](Self::build) to get a
    /// [`SpawnError`] instead.
    pub fn spawn<A: Actor>(&self, actor: A) -> ActorRef<A::Msg> {
        let mut instance = Some(actor);
        let options = SpawnOptions::default();
        match self.spawn_with(&mut instance, None::<fn() -> A>, options) {
            Ok(r) => r,
            Err(_) => self.stopped_ref(ExitReason::Shutdown),
        }
    }

    /// Spawns an actor made from a closure, which is called for each
    /// message. Its captured variables are the actor's state.
    ///
    /// ```
    /// # use plexus_core::ActorSystem;
    /// # #[tokio::main] async fn main() {
    /// # let system = ActorSystem::new();
    /// let mut seen = 0;
    /// let counter = system.spawn_fn(move |n: u32, _ctx| seen += n);
    /// counter.tell(3);
    /// # }
    /// ```
    pub fn spawn_fn<M, F>(&self, handler: F) -> ActorRef<M>
    where
        M: Send + 'static,
        F: FnMut(M, &mut crate::Context<M>) + Send + 'static,
    {
        self.spawn(FnActor::new(handler))
    }

    /// Starts configuring an actor made by `factory`: supervision, a bounded
    /// mailbox, a name, its own thread. The factory is called once now and
    /// again for every restart.
    pub fn build<A, F>(&self, factory: F) -> SpawnBuilder<'_, A, F>
    where
        A: Actor,
        F: FnMut() -> A + Send + 'static,
    {
        SpawnBuilder {
            system: self,
            factory,
            options: SpawnOptions::default(),
            _actor: std::marker::PhantomData,
        }
    }

    fn spawn_with<A, F>(
        &self,
        instance: &mut Option<A>,
        factory: Option<F>,
        options: SpawnOptions,
    ) -> Result<ActorRef<A::Msg>, SpawnError>
    where
        A: Actor,
        F: FnMut() -> A + Send + 'static,
    {
        let shared = &self.shared;
        if shared.shutting_down.load(Ordering::Acquire) {
            return Err(SpawnError::ShuttingDown);
        }
        if options.capacity == Some(0) {
            return Err(SpawnError::ZeroCapacity);
        }
        let id = ActorId::new(
            shared.node,
            shared.next_serial.fetch_add(1, Ordering::Relaxed),
        );
        let mailbox = Arc::new(Mailbox::new(id, shared.clone(), options.capacity));
        let actor_ref = ActorRef::local(mailbox.clone());
        if let Some(name) = &options.name {
            shared.registry.register(name, &actor_ref)?;
        }
        let mut restarter = factory.map(|f| Restarter::new(f, options.supervision));
        let actor = match (instance.take(), restarter.as_mut()) {
            (Some(a), _) => a,
            (None, Some(r)) => r.make(),
            (None, None) => unreachable!("spawn_with is called with an instance or a factory"),
        };
        shared.insert_live(id, mailbox.clone());
        let task = crate::turn::Turns::new(run_actor(ActorCell::new(
            actor,
            restarter,
            mailbox.clone(),
            self.clone(),
        )));
        if options.detached {
            let started = std::thread::Builder::new()
                .name(format!("plexus-actor-{}", id.serial()))
                .spawn(move || match tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                {
                    Ok(rt) => rt.block_on(task),
                    // Dropping the unstarted task tears the actor down.
                    Err(e) => tracing::error!(target: "plexus::core", actor = %id, "cannot start a detached actor's runtime: {e}"),
                });
            if let Err(e) = started {
                // The closure, and with it the task and its teardown, is
                // gone already; the actor is down.
                return Err(SpawnError::Thread(e.to_string()));
            }
        } else {
            let handle = shared.runtime.spawn(task);
            mailbox.set_abort(handle.abort_handle());
        }
        // A shutdown that began while we were starting may have missed us.
        if shared.shutting_down.load(Ordering::Acquire) {
            mailbox.signal(Signal::Stop(ExitReason::Shutdown));
        }
        Ok(actor_ref)
    }

    fn stopped_ref<M: Send + 'static>(&self, reason: ExitReason) -> ActorRef<M> {
        let shared = &self.shared;
        let id = ActorId::new(
            shared.node,
            shared.next_serial.fetch_add(1, Ordering::Relaxed),
        );
        let mailbox = Arc::new(Mailbox::new(id, shared.clone(), None));
        mailbox.finish(&reason, VecDeque::new());
        ActorRef::local(mailbox)
    }

    /// Registers `actor_ref` under `name` until the actor stops or the name
    /// is unregistered.
    ///
    /// # Errors
    ///
    /// [`RegistryError::NameTaken`] if a live actor holds the name,
    /// [`RegistryError::ActorStopped`] if the actor has stopped,
    /// [`RegistryError::EmptyName`] for `""`.
    pub fn register<M: Send + 'static>(
        &self,
        name: &str,
        actor_ref: &ActorRef<M>,
    ) -> Result<(), RegistryError> {
        self.shared.registry.register(name, actor_ref)
    }

    /// Looks up the actor registered under `name`.
    ///
    /// # Errors
    ///
    /// [`LookupError::NotFound`], or [`LookupError::WrongType`] if the actor
    /// registered there takes another message type than `M`.
    pub fn lookup<M: Send + 'static>(&self, name: &str) -> Result<ActorRef<M>, LookupError> {
        self.shared.registry.lookup(name)
    }

    /// Removes a name; returns the id of the actor that held it.
    pub fn unregister(&self, name: &str) -> Option<ActorId> {
        self.shared.registry.unregister(name)
    }

    /// Number of registered names.
    pub fn registered(&self) -> usize {
        self.shared.registry.len()
    }

    /// The dead-letter office: count and subscription.
    pub fn dead_letters(&self) -> DeadLetters<'_> {
        DeadLetters {
            office: &self.shared.dead_letters,
        }
    }

    /// Number of actors that have not finished stopping.
    pub fn live_actors(&self) -> usize {
        self.shared.live_count.load(Ordering::Acquire)
    }

    /// The `k` actors with the most messages waiting, deepest first
    /// (actors with none left out). Reads every live actor's queue length.
    pub fn deepest_mailboxes(&self, k: usize) -> Vec<(ActorId, usize)> {
        self.shared.deepest_mailboxes(k).0
    }

    /// [`deepest_mailboxes`](Self::deepest_mailboxes) and the messages
    /// waiting in all mailboxes, in one walk.
    pub(crate) fn deepest_mailboxes_and_total(&self, k: usize) -> (Vec<(ActorId, usize)>, usize) {
        self.shared.deepest_mailboxes(k)
    }

    /// Whether [`shutdown`](Self::shutdown) has begun.
    pub fn is_shutting_down(&self) -> bool {
        self.shared.shutting_down.load(Ordering::Acquire)
    }

    /// Stops every actor gracefully and returns once all have stopped.
    ///
    /// Each actor finishes the message it is handling, runs its `stopped`
    /// hook (reason [`ExitReason::Shutdown`]) and is not restarted; queued
    /// messages become dead letters. New spawns fail from now on. An actor
    /// stuck in a handler delays the return; see
    /// [`shutdown_timeout`](Self::shutdown_timeout).
    pub async fn shutdown(&self) {
        self.begin_shutdown();
        self.wait_all_stopped().await;
    }

    /// Like [`shutdown`](Self::shutdown), but kills whatever still runs after
    /// `grace`. Returns `true` if every actor stopped within the grace
    /// period.
    pub async fn shutdown_timeout(&self, grace: Duration) -> bool {
        self.begin_shutdown();
        if tokio::time::timeout(grace, self.wait_all_stopped())
            .await
            .is_ok()
        {
            return true;
        }
        self.shared.kill_all();
        self.wait_all_stopped().await;
        false
    }

    fn begin_shutdown(&self) {
        self.shared.shutting_down.store(true, Ordering::Release);
        for c in self.shared.live_controls() {
            c.signal(Signal::Stop(ExitReason::Shutdown));
        }
    }

    async fn wait_all_stopped(&self) {
        loop {
            let notified = self.shared.all_stopped.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if self.shared.live_count.load(Ordering::Acquire) == 0 {
                return;
            }
            notified.await;
        }
    }
}

impl std::fmt::Debug for SystemRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SystemRef")
            .field("node", &self.shared.node)
            .field("live_actors", &self.live_actors())
            .finish()
    }
}

/// An actor system: the owning handle.
///
/// Create one inside a tokio runtime (multi-threaded for parallelism). Call
/// [`shutdown`](SystemRef::shutdown) to stop gracefully; dropping the last
/// clone kills every actor that is still running. All other methods come
/// from [`SystemRef`] through `Deref`.
pub struct ActorSystem {
    handle: SystemRef,
}

impl ActorSystem {
    /// Creates a system on the current tokio runtime.
    ///
    /// # Panics
    ///
    /// If called outside a tokio runtime; [`try_new`](Self::try_new) returns
    /// an error instead.
    pub fn new() -> Self {
        match Self::try_new() {
            Ok(s) => s,
            Err(e) => panic!("{e}"),
        }
    }

    /// Creates a system on the current tokio runtime.
    ///
    /// # Errors
    ///
    /// [`SystemError::NoRuntime`] outside a tokio runtime.
    pub fn try_new() -> Result<Self, SystemError> {
        let runtime = Handle::try_current().map_err(|_| SystemError::NoRuntime)?;
        Ok(Self::on(runtime))
    }

    /// Creates a system whose actors run on the given runtime.
    pub fn on(runtime: Handle) -> Self {
        Self::with(runtime, NodeId::random())
    }

    /// Configures a system before creating it: its node id, its runtime.
    ///
    /// ```
    /// use plexus_core::{ActorSystem, NodeId};
    ///
    /// # #[tokio::main] async fn main() -> Result<(), plexus_core::SystemError> {
    /// let system = ActorSystem::builder().node_id(NodeId::from_u64(7)).build()?;
    /// assert_eq!(system.node_id(), NodeId::from_u64(7));
    /// # Ok(()) }
    /// ```
    pub fn builder() -> SystemBuilder {
        SystemBuilder::default()
    }

    fn with(runtime: Handle, node: NodeId) -> Self {
        let shared = SystemShared {
            node,
            next_serial: AtomicU64::new(1),
            live: (0..LIVE_SHARDS).map(|_| Mutex::default()).collect(),
            live_count: AtomicUsize::new(0),
            all_stopped: Notify::new(),
            shutting_down: AtomicBool::new(false),
            owners: AtomicUsize::new(1),
            runtime,
            registry: Registry::default(),
            dead_letters: Arc::new(DeadLetterOffice::new()),
        };
        Self {
            handle: SystemRef {
                shared: Arc::new(shared),
            },
        }
    }
}

/// Configures an [`ActorSystem`] before creating it; see
/// [`ActorSystem::builder`].
#[derive(Debug, Default, Clone)]
pub struct SystemBuilder {
    node: Option<NodeId>,
    runtime: Option<Handle>,
}

impl SystemBuilder {
    /// The system's node id. Default: a fresh random one
    /// ([`NodeId::random`]). A node whose identity is bound to a
    /// certificate (TLS) must be created with the id the certificate
    /// certifies; two live systems must never share an id.
    pub fn node_id(mut self, node: NodeId) -> Self {
        self.node = Some(node);
        self
    }

    /// The runtime the system's actors run on. Default: the current one.
    pub fn runtime(mut self, runtime: Handle) -> Self {
        self.runtime = Some(runtime);
        self
    }

    /// Creates the system.
    ///
    /// # Errors
    ///
    /// [`SystemError::NoRuntime`] if no runtime was given and none is
    /// running on this thread.
    pub fn build(self) -> Result<ActorSystem, SystemError> {
        let runtime = match self.runtime {
            Some(r) => r,
            None => Handle::try_current().map_err(|_| SystemError::NoRuntime)?,
        };
        Ok(ActorSystem::with(
            runtime,
            self.node.unwrap_or_else(NodeId::random),
        ))
    }
}

impl Default for ActorSystem {
    fn default() -> Self {
        Self::new()
    }
}

impl Clone for ActorSystem {
    fn clone(&self) -> Self {
        self.handle.shared.owners.fetch_add(1, Ordering::AcqRel);
        Self {
            handle: self.handle.clone(),
        }
    }
}

impl Drop for ActorSystem {
    fn drop(&mut self) {
        if self.handle.shared.owners.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.handle
                .shared
                .shutting_down
                .store(true, Ordering::Release);
            self.handle.shared.kill_all();
        }
    }
}

impl Deref for ActorSystem {
    type Target = SystemRef;

    fn deref(&self) -> &SystemRef {
        &self.handle
    }
}

impl std::fmt::Debug for ActorSystem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.handle.fmt(f)
    }
}

#[derive(Default)]
struct SpawnOptions {
    supervision: Supervision,
    capacity: Option<usize>,
    name: Option<String>,
    detached: bool,
}

/// Configures an actor before spawning it; see [`SystemRef::build`].
///
/// ```
/// use plexus_core::{Actor, ActorSystem, Context, Supervision};
///
/// #[derive(Default)]
/// struct Worker;
/// impl Actor for Worker {
///     type Msg = u32;
///     async fn handle(&mut self, _n: u32, _ctx: &mut Context<u32>) {}
/// }
///
/// # #[tokio::main] async fn main() -> Result<(), plexus_core::SpawnError> {
/// let system = ActorSystem::new();
/// let worker = system
///     .build(Worker::default)
///     .supervise(Supervision::on_failure())
///     .bounded(1_000)
///     .name("worker")
///     .spawn()?;
/// assert_eq!(system.lookup::<u32>("worker").unwrap(), worker);
/// # Ok(()) }
/// ```
pub struct SpawnBuilder<'a, A, F> {
    system: &'a SystemRef,
    factory: F,
    options: SpawnOptions,
    _actor: std::marker::PhantomData<fn() -> A>,
}

impl<A, F> SpawnBuilder<'_, A, F>
where
    A: Actor,
    F: FnMut() -> A + Send + 'static,
{
    /// Restart policy, backoff and intensity limit. Default: never restart.
    pub fn supervise(mut self, supervision: Supervision) -> Self {
        self.options.supervision = supervision;
        self
    }

    /// A bounded mailbox of `capacity` messages (default: unbounded).
    /// [`ActorRef::try_tell`] fails when it is full, [`ActorRef::send`]
    /// waits, [`ActorRef::tell`] turns the message into a dead letter.
    pub fn bounded(mut self, capacity: usize) -> Self {
        self.options.capacity = Some(capacity);
        self
    }

    /// Registers the actor under `name` as it starts.
    pub fn name(mut self, name: impl Into<String>) -> Self {
        self.options.name = Some(name.into());
        self
    }

    /// Runs the actor on an OS thread of its own, so its handlers may block
    /// (file I/O, FFI, heavy computation) without starving the scheduler.
    /// Such an actor cannot be interrupted inside a handler: a kill takes
    /// effect after the current message.
    pub fn detached(mut self) -> Self {
        self.options.detached = true;
        self
    }

    /// Spawns the actor.
    ///
    /// # Errors
    ///
    /// [`SpawnError::ShuttingDown`], [`SpawnError::Name`] if the name is
    /// taken, [`SpawnError::ZeroCapacity`], [`SpawnError::Thread`].
    pub fn spawn(self) -> Result<ActorRef<A::Msg>, SpawnError> {
        if self.options.supervision.policy == crate::RestartPolicy::Never {
            let mut make = self.factory;
            let mut instance = Some(make());
            self.system
                .spawn_with(&mut instance, None::<fn() -> A>, self.options)
        } else {
            self.system
                .spawn_with(&mut None, Some(self.factory), self.options)
        }
    }
}

/// The dead-letter office of a system; see [`SystemRef::dead_letters`].
pub struct DeadLetters<'a> {
    office: &'a Arc<DeadLetterOffice>,
}

impl DeadLetters<'_> {
    /// Dead letters so far.
    pub fn count(&self) -> u64 {
        self.office.count()
    }

    /// Dead letters so far for one reason.
    pub fn count_for(&self, reason: crate::DeadLetterReason) -> u64 {
        self.office.count_for(reason)
    }

    /// Records a dead letter found outside the runtime (e.g. by a node: a
    /// message for an unknown actor): counted, logged, published.
    pub fn record(
        &self,
        target: ActorId,
        message_type: &'static str,
        reason: crate::DeadLetterReason,
    ) {
        self.office.record(target, message_type, reason);
    }

    /// Receives every dead letter from now on. A subscriber more than 1,024
    /// behind loses the oldest (`RecvError::Lagged` says how many).
    pub fn subscribe(&self) -> broadcast::Receiver<DeadLetter> {
        self.office.subscribe()
    }
}
#[cfg(test)]
impl SystemRef {
    pub(crate) fn shared_for_tests(&self) -> Arc<SystemShared> {
        self.shared.clone()
    }
}
