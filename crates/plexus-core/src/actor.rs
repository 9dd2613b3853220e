//! The [`Actor`] trait, and actors made from closures.

use std::future::Future;
use std::marker::PhantomData;

use crate::{Context, Down, Exit, ExitReason};

/// An actor: private state and an async handler for one message type.
///
/// The runtime calls the methods of one actor one at a time, never
/// concurrently, so the handler has `&mut self` and needs no locks. Each
/// method receives the actor's [`Context`] (its own ref, timers, monitors,
/// links, the system).
///
/// Lifecycle: `started` before the first message; `handle` per message;
/// `on_down` / `on_exit` for monitor and link notifications, which overtake
/// queued messages; `stopped` once at the end (not after a kill). A panic in
/// any of them stops the actor with [`ExitReason::Panicked`] and affects no
/// other actor.
///
/// ```
/// use plexus_core::{Actor, Context, ReplyTo};
///
/// enum Counter { Add(u64), Get(ReplyTo<u64>) }
///
/// #[derive(Default)]
/// struct CounterActor { total: u64 }
///
/// impl Actor for CounterActor {
///     type Msg = Counter;
///     async fn handle(&mut self, msg: Counter, _ctx: &mut Context<Counter>) {
///         match msg {
///             Counter::Add(n) => self.total += n,
///             Counter::Get(reply) => reply.send(self.total),
///         }
///     }
/// }
/// ```
pub trait Actor: Send + 'static {
    /// The messages this actor accepts.
    type Msg: Send + 'static;

    /// Runs before the first message, and again after each restart.
    fn started(&mut self, ctx: &mut Context<Self::Msg>) -> impl Future<Output = ()> + Send {
        let _ = ctx;
        async {}
    }

    /// Handles one message.
    fn handle(
        &mut self,
        msg: Self::Msg,
        ctx: &mut Context<Self::Msg>,
    ) -> impl Future<Output = ()> + Send;

    /// An actor monitored with [`Context::monitor`] stopped.
    fn on_down(
        &mut self,
        down: Down,
        ctx: &mut Context<Self::Msg>,
    ) -> impl Future<Output = ()> + Send {
        let _ = (down, ctx);
        async {}
    }

    /// A linked actor exited. Only called while the actor traps exits
    /// ([`Context::trap_exits`]); otherwise an abnormal exit of a linked
    /// actor stops this one with [`ExitReason::Linked`] and a normal one is
    /// ignored.
    fn on_exit(
        &mut self,
        exit: Exit,
        ctx: &mut Context<Self::Msg>,
    ) -> impl Future<Output = ()> + Send {
        let _ = (exit, ctx);
        async {}
    }

    /// Runs once when the actor stops (gracefully or by failure; not when
    /// killed). Also runs before each restart.
    fn stopped(
        &mut self,
        reason: &ExitReason,
        ctx: &mut Context<Self::Msg>,
    ) -> impl Future<Output = ()> + Send {
        let _ = (reason, ctx);
        async {}
    }
}

/// An actor made from a closure; see
/// [`SystemRef::spawn_fn`](crate::SystemRef::spawn_fn). The closure's
/// captured variables are the actor's state.
pub struct FnActor<M, F> {
    handler: F,
    _msg: PhantomData<fn(M)>,
}

impl<M, F> FnActor<M, F>
where
    M: Send + 'static,
    F: FnMut(M, &mut Context<M>) + Send + 'static,
{
    /// An actor that runs `handler` for each message.
    pub fn new(handler: F) -> Self {
        Self {
            handler,
            _msg: PhantomData,
        }
    }
}

impl<M, F> Actor for FnActor<M, F>
where
    M: Send + 'static,
    F: FnMut(M, &mut Context<M>) + Send + 'static,
{
    type Msg = M;

    async fn handle(&mut self, msg: M, ctx: &mut Context<M>) {
        (self.handler)(msg, ctx);
    }
}
