//! One configuration for a Plexus deployment, read from TOML files and the
//! environment, after Akka's `reference.conf`: every key has a default
//! (`plexus config defaults` prints them all with one line of meaning
//! each, the text of `crates/plexus/reference.toml`), and a file names
//! only what it changes.
//!
//! Layers, later ones winning: the defaults, the files in the order given
//! (`plexus member --config base.toml --config site.toml`), then
//! environment variables `PLEXUS_<SECTION>__<KEY>` (`PLEXUS_NODE__COOKIE`,
//! `PLEXUS_CLUSTER__PROBE_INTERVAL=500ms`; the double underscore separates
//! the section from the key, variables without one are not configuration),
//! then the command's flags. A library user loads the same files with
//! [`Config::load`] (figment underneath) and starts the parts it wants from
//! the sections: [`Config::node_config`], `config.cluster`, `config.data`.
//!
//! What a configuration guarantees once [`Config::load`] returned it:
//! every key is known (an unknown one is refused with its path and the
//! nearest known key), every value has its type and is in range (refused
//! with the key and the allowed range), secrets given as files were read,
//! and the default cookie is not used on an address that is not loopback.
//! A malformed file is refused with its line and column. Nothing starts
//! before that.
//!
//! Secrets (the cookie, the management token) come from the environment,
//! a file (`cookie_file`, `token_file`) or a configuration file, never from
//! the command line, where `ps` shows them.

mod error;
mod sections;

use std::path::Path;

use figment::providers::{Env, Format, Serialized, Toml};
use figment::Figment;
use serde::{Deserialize, Serialize};

pub use error::ConfigError;
pub use sections::{
    DiscoverySettings, ManagementSettings, NodeSettings, StoreSettings, TlsSettings, DEFAULT_COOKIE,
};

use plexus_cluster::ClusterConfig;
use plexus_data::ReplicatorConfig;
use plexus_devices::{SessionConfig, TrackerConfig};

/// The reference configuration: every key, its default and its meaning.
pub const REFERENCE: &str = include_str!("../reference.toml");

/// The prefix of configuration environment variables.
pub const ENV_PREFIX: &str = "PLEXUS_";

/// A whole deployment's settings; each role reads the sections it runs.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
#[non_exhaustive]
pub struct Config {
    /// The node: where it listens, its cookie, TLS, schemes of one's own.
    pub node: NodeSettings,
    /// The cluster member: name, seeds, failure detection, gossip,
    /// split-brain resolution.
    pub cluster: ClusterConfig,
    /// Finding seeds through DNS (a Kubernetes headless Service).
    pub discovery: DiscoverySettings,
    /// The replicator of replicated data (`plexus data`).
    pub data: ReplicatorConfig,
    /// The durable store of replicated data.
    pub store: StoreSettings,
    /// The device tracker of a device server.
    pub devices: TrackerConfig,
    /// The session of a device client (`plexus device`).
    pub device: SessionConfig,
    /// The management endpoint: health, members, metrics.
    pub management: ManagementSettings,
}

impl Config {
    /// The defaults, then `files` in order, then `PLEXUS_*` environment
    /// variables; secrets read, every value checked.
    ///
    /// # Errors
    ///
    /// [`ConfigError`] names the file or variable, the key, and the cause.
    pub fn load<P: AsRef<Path>>(files: &[P]) -> Result<Self, ConfigError> {
        Self::load_with_env(files, Env::prefixed(ENV_PREFIX))
    }

    fn load_with_env<P: AsRef<Path>>(files: &[P], env: Env) -> Result<Self, ConfigError> {
        let mut figment = Figment::from(Serialized::defaults(Config::default()));
        for file in files {
            let path = file.as_ref();
            // figment treats a missing file as empty; a file named on the
            // command line that is not there is a mistake.
            std::fs::metadata(path).map_err(|source| ConfigError::Read {
                file: path.to_owned(),
                source,
            })?;
            figment = figment.merge(Toml::file_exact(path));
        }
        // Only `SECTION__KEY` variables: `PLEXUS_SIM_SEED` and friends are
        // not configuration.
        let env = env.filter(|key| key.as_str().contains("__")).split("__");
        let config: Config = figment
            .merge(env)
            .extract()
            .map_err(ConfigError::from_figment)?;
        Ok(config)
    }

    /// Parses one TOML document over the defaults (no environment): what
    /// a test or an embedded configuration uses.
    ///
    /// # Errors
    ///
    /// As [`load`](Config::load).
    pub fn from_toml(text: &str) -> Result<Self, ConfigError> {
        let config: Config = Figment::from(Serialized::defaults(Config::default()))
            .merge(Toml::string(text))
            .extract()
            .map_err(ConfigError::from_figment)?;
        Ok(config)
    }

    /// Reads the secrets given as files (`node.cookie_file`,
    /// `management.token_file`) and checks every value: what a role calls
    /// after applying its flags, before it starts anything.
    ///
    /// # Errors
    ///
    /// [`ConfigError`] names the key and why.
    pub fn finish(mut self) -> Result<Self, ConfigError> {
        // One name: the replicator takes the cluster's.
        self.data.cluster.clone_from(&self.cluster.name);
        self.node.read_secrets()?;
        self.management.read_secrets()?;
        self.validate()?;
        Ok(self)
    }

    /// Checks every section's values, and that the default cookie is used
    /// only on loopback addresses.
    ///
    /// # Errors
    ///
    /// [`ConfigError::Invalid`] with the key and the allowed range, or
    /// [`ConfigError::DefaultCookie`].
    pub fn validate(&self) -> Result<(), ConfigError> {
        self.node.validate()?;
        self.cluster
            .validate()
            .map_err(|e| ConfigError::invalid(format!("cluster.{}", e.setting), e.why))?;
        self.data
            .validate()
            .map_err(|e| ConfigError::invalid(format!("data.{}", e.setting), e.why))?;
        self.discovery.validate()?;
        self.management.validate()?;
        Ok(())
    }

    /// The configuration as TOML (what `plexus config show` prints).
    pub fn to_toml(&self) -> String {
        // Every field serialises (no maps with non-string keys).
        toml::to_string(self).unwrap_or_else(|e| format!("# not representable as TOML: {e}\n"))
    }

    /// The node's settings as a [`NodeConfig`](plexus_remote::NodeConfig):
    /// cookie, schemes and TLS material (read from its files).
    ///
    /// # Errors
    ///
    /// [`ConfigError::Tls`] if the TLS files cannot be loaded.
    pub fn node_config(&self) -> Result<plexus_remote::NodeConfig, ConfigError> {
        self.node.node_config()
    }
}

#[cfg(test)]
mod tests;
