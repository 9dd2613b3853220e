//! [`LayerRegistry`]: layer constructors by name, so that stacks are data.
//!
//! A user layer plugs in without touching the others: implement [`Layer`],
//! give it a config implementing [`LayerConfig`] and call
//! [`LayerRegistry::register_config`] (or register any
//! [`LayerConstructor`] under a name of your choice).
//!
//! ```
//! use std::time::Instant;
//! use plexus_net::{Frame, Interface, Layer, LayerConfig, LayerOptions, LayerRegistry,
//!     LinkContext, OptionError, Output, ReceiveError, StackSendError, StackSpec};
//!
//! /// Counts messages, changes nothing.
//! struct Counter(u64);
//! impl Layer for Counter {
//!     fn name(&self) -> &'static str { "counter" }
//!     fn handle_send(&mut self, _: Instant, f: Frame, out: &mut Output) -> Result<(), StackSendError> {
//!         self.0 += 1;
//!         out.push_down(f);
//!         Ok(())
//!     }
//!     fn handle_receive(&mut self, _: Instant, f: Frame, out: &mut Output) -> Result<(), ReceiveError> {
//!         out.push_up(f);
//!         Ok(())
//!     }
//!     fn handle_timeout(&mut self, _: Instant, _: &mut Output) {}
//!     fn poll_timeout(&self) -> Option<Instant> { None }
//! }
//!
//! #[derive(Clone, Default)]
//! struct CounterConfig;
//! impl LayerConfig for CounterConfig {
//!     const NAME: &'static str = "counter";
//!     const INTERFACE: Interface = Interface::MESSAGE;
//!     fn from_options(options: &LayerOptions) -> Result<Self, OptionError> {
//!         match options.iter().next() {
//!             Some(o) => Err(o.unknown()),
//!             None => Ok(CounterConfig),
//!         }
//!     }
//!     fn build(&self, _: &LinkContext) -> Box<dyn Layer> { Box::new(Counter(0)) }
//! }
//!
//! let mut registry = LayerRegistry::default();
//! registry.register_config::<CounterConfig>();
//! let spec = StackSpec::parse("udp / counter / delivery", &registry).unwrap();
//! let stack = spec.build(Instant::now());
//! assert_eq!(stack.layer_names().collect::<Vec<_>>(), ["counter", "delivery"]);
//! ```

use std::collections::HashMap;
use std::fmt;
use std::marker::PhantomData;
use std::sync::Arc;

use crate::guarantees::GuaranteeEffect;
use crate::layer::{Interface, Layer, LinkContext};
use crate::layers::{
    batching::BatchingConfig, compression::CompressionConfig, delivery::DeliveryConfig,
    encryption::EncryptionConfig, faults::FaultsConfig, framing::FramingConfig,
    heartbeat::HeartbeatConfig, ordering::OrderingConfig, slicing::SlicingConfig,
};
use crate::options::{LayerOptions, OptionError};

/// Builds one layer instance per link from configuration parsed once.
pub type LayerFactory = Arc<dyn Fn(&LinkContext) -> Box<dyn Layer> + Send + Sync>;

/// Makes layers of one kind: declares the interface and turns spec options
/// into a [`LayerFactory`].
pub trait LayerConstructor: Send + Sync + 'static {
    /// What the layer needs below and offers above.
    fn interface(&self) -> Interface;

    /// Parses `options` (once per spec) into a factory of instances.
    ///
    /// # Errors
    ///
    /// An unknown or malformed option.
    fn configure(&self, options: &LayerOptions) -> Result<LayerFactory, OptionError>;

    /// How the layer, configured with `options`, changes the guarantees
    /// of the layers below (see [`guarantees`](crate::guarantees)).
    /// Default: it keeps them. Called only with options
    /// [`configure`](Self::configure) accepted.
    fn guarantees(&self, options: &LayerOptions) -> GuaranteeEffect {
        let _ = options;
        GuaranteeEffect::KEEP
    }
}

/// A layer's configuration, parsed from spec options, that builds instances.
/// Implementing it is the short way to write a [`LayerConstructor`].
pub trait LayerConfig: Clone + Send + Sync + 'static {
    /// The name the layer is registered under.
    const NAME: &'static str;
    /// What the layer needs below and offers above.
    const INTERFACE: Interface;

    /// Parses spec options over the documented defaults.
    ///
    /// # Errors
    ///
    /// An unknown or malformed option.
    fn from_options(options: &LayerOptions) -> Result<Self, OptionError>;

    /// Builds one instance for one link.
    fn build(&self, link: &LinkContext) -> Box<dyn Layer>;

    /// How the layer changes the guarantees of the layers below (see
    /// [`guarantees`](crate::guarantees)). Default: it keeps them.
    fn guarantees(&self) -> GuaranteeEffect {
        GuaranteeEffect::KEEP
    }
}

/// The [`LayerConstructor`] of a [`LayerConfig`].
pub struct ConfigConstructor<C>(PhantomData<fn() -> C>);

impl<C> Default for ConfigConstructor<C> {
    fn default() -> Self {
        Self(PhantomData)
    }
}

impl<C: LayerConfig> LayerConstructor for ConfigConstructor<C> {
    fn interface(&self) -> Interface {
        C::INTERFACE
    }

    fn configure(&self, options: &LayerOptions) -> Result<LayerFactory, OptionError> {
        let config = C::from_options(options)?;
        Ok(Arc::new(move |link| config.build(link)))
    }

    fn guarantees(&self, options: &LayerOptions) -> GuaranteeEffect {
        C::from_options(options).map_or(GuaranteeEffect::KEEP, |c| c.guarantees())
    }
}

/// Layer constructors by name. [`LayerRegistry::default`] holds the built-in
/// layers: `framing`, `slicing`, `delivery`, `ordering`, `compression`,
/// `heartbeat`, `faults`, `encryption`, `batching`.
#[derive(Clone)]
pub struct LayerRegistry {
    constructors: HashMap<String, Arc<dyn LayerConstructor>>,
}

impl Default for LayerRegistry {
    fn default() -> Self {
        let mut registry = Self::empty();
        registry.register_config::<FramingConfig>();
        registry.register_config::<SlicingConfig>();
        registry.register_config::<DeliveryConfig>();
        registry.register_config::<OrderingConfig>();
        registry.register_config::<CompressionConfig>();
        registry.register_config::<HeartbeatConfig>();
        registry.register_config::<FaultsConfig>();
        registry.register_config::<EncryptionConfig>();
        registry.register_config::<BatchingConfig>();
        registry
    }
}

impl fmt::Debug for LayerRegistry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut names: Vec<_> = self.constructors.keys().collect();
        names.sort();
        f.debug_struct("LayerRegistry")
            .field("layers", &names)
            .finish()
    }
}

impl LayerRegistry {
    /// A registry without any layer.
    pub fn empty() -> Self {
        Self {
            constructors: HashMap::new(),
        }
    }

    /// Registers `constructor` under `name`, replacing (and returning) a
    /// previous one of that name.
    pub fn register(
        &mut self,
        name: impl Into<String>,
        constructor: impl LayerConstructor,
    ) -> Option<Arc<dyn LayerConstructor>> {
        self.constructors.insert(name.into(), Arc::new(constructor))
    }

    /// Registers the layer configured by `C` under `C::NAME`.
    pub fn register_config<C: LayerConfig>(&mut self) -> Option<Arc<dyn LayerConstructor>> {
        self.register(C::NAME, ConfigConstructor::<C>::default())
    }

    /// The constructor registered under `name`.
    pub fn get(&self, name: &str) -> Option<&Arc<dyn LayerConstructor>> {
        self.constructors.get(name)
    }

    /// Registered names, sorted.
    pub fn names(&self) -> Vec<&str> {
        let mut names: Vec<_> = self.constructors.keys().map(String::as_str).collect();
        names.sort_unstable();
        names
    }
}
