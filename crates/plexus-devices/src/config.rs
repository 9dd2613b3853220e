//! Settings of the device session and the server tracker.

use std::time::Duration;

use plexus_net::phi::{delay_for_phi, PhiConfig};

/// The failure detector both sides run on the other's heartbeats.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Liveness {
    /// Between heartbeats sent. Default 100 ms.
    #[serde(with = "plexus_net::units::duration")]
    pub heartbeat_interval: Duration,
    /// Added to the mean inter-arrival time (a pause this long is not
    /// suspicious). Default 200 ms.
    #[serde(with = "plexus_net::units::duration")]
    pub acceptable_pause: Duration,
    /// Lower bound of the fitted deviation. Default 50 ms.
    #[serde(with = "plexus_net::units::duration")]
    pub min_std_dev: Duration,
    /// Phi at which the peer counts as failed. Default 8.
    pub threshold: f64,
    /// Inter-arrival samples kept (8 bytes each). Default 100.
    pub window: usize,
}

impl Default for Liveness {
    fn default() -> Self {
        Self {
            heartbeat_interval: Duration::from_millis(100),
            acceptable_pause: Duration::from_millis(200),
            min_std_dev: Duration::from_millis(50),
            threshold: 8.0,
            window: 100,
        }
    }
}

impl Liveness {
    /// The detector's parameters.
    pub fn phi(&self) -> PhiConfig {
        PhiConfig {
            expected_interval: self.heartbeat_interval,
            window: self.window,
            min_std_dev: self.min_std_dev,
            acceptable_pause: self.acceptable_pause,
        }
    }

    /// The silence after the last heartbeat at which a peer whose
    /// heartbeats came steadily every `heartbeat_interval` counts as
    /// failed: `interval + pause + y(threshold) × min_std_dev`. Jittery or
    /// lossy links widen the fitted deviation and so the delay.
    pub fn detection_bound(&self) -> Duration {
        let mu = (self.heartbeat_interval + self.acceptable_pause).as_secs_f64();
        Duration::from_secs_f64(delay_for_phi(
            self.threshold,
            mu,
            self.min_std_dev.as_secs_f64(),
        ))
    }
}

/// Settings of a [`DeviceSession`](crate::DeviceSession).
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SessionConfig {
    /// Heartbeats and the detector watching the server.
    pub liveness: Liveness,
    /// Between registration attempts (to every seed) while unattached.
    /// Default 100 ms.
    #[serde(with = "plexus_net::units::duration")]
    pub register_retry: Duration,
    /// Between attempts after a server refused for load
    /// (`RateLimited`, `TableFull`). Default 1 s.
    #[serde(with = "plexus_net::units::duration")]
    pub refused_backoff: Duration,
}

impl Default for SessionConfig {
    fn default() -> Self {
        Self {
            liveness: Liveness::default(),
            register_retry: Duration::from_millis(100),
            refused_backoff: Duration::from_secs(1),
        }
    }
}

/// Settings of a [`Tracker`](crate::Tracker).
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TrackerConfig {
    /// Heartbeats and the detector watching each device.
    pub liveness: Liveness,
    /// Whether the server asks its devices for reports continuously (a
    /// request, the report, the next request at once). Default true.
    pub poll_reports: bool,
    /// A request unanswered this long is sent again. Default 3 ms.
    #[serde(with = "plexus_net::units::duration")]
    pub request_resend: Duration,
    /// A device silent past its phi threshold is kept (as lost) this long,
    /// then forgotten. Default 30 s.
    #[serde(with = "plexus_net::units::duration")]
    pub forget_after: Duration,
    /// Devices tracked at most (about 400 bytes each); registrations beyond
    /// are refused with `TableFull`. Default 65,536.
    pub max_devices: usize,
    /// Registrations one source (a device process's address) may make in a
    /// burst. Default 1,024.
    pub register_burst: u32,
    /// Registrations per second a source regains. Default 256.
    pub register_rate: u32,
    /// Sources whose rate is tracked at most (about 64 bytes each); beyond,
    /// registrations of new sources are refused until old ones are idle.
    /// Default 4,096.
    pub max_sources: usize,
    /// How often report counts and totals are written to the directory.
    /// Default 1 s.
    #[serde(with = "plexus_net::units::duration")]
    pub record_interval: Duration,
}

impl Default for TrackerConfig {
    fn default() -> Self {
        Self {
            liveness: Liveness::default(),
            poll_reports: true,
            request_resend: Duration::from_millis(3),
            forget_after: Duration::from_secs(30),
            max_devices: 65_536,
            register_burst: 1024,
            register_rate: 256,
            max_sources: 4096,
            record_interval: Duration::from_secs(1),
        }
    }
}
