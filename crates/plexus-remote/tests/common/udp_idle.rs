//! Built-in transports whose UDP peers are dropped after a short silence,
//! for tests of links closed as idle.

use std::time::Duration;

use plexus_transport::builtin::{MemTransport, TcpTransport, UdpTransport, UdsTransport};
use plexus_transport::udp::UdpConfig;
use plexus_transport::TransportRegistry;

/// The built-in transports, UDP peers dropped after `idle` of silence.
pub fn transports_with_udp_idle(idle: Duration) -> TransportRegistry {
    let mut registry = TransportRegistry::empty();
    registry.register(TcpTransport).unwrap();
    registry.register(UdsTransport).unwrap();
    registry.register(MemTransport::default()).unwrap();
    registry
        .register(UdpTransport {
            config: UdpConfig {
                idle_timeout: idle,
                ..UdpConfig::default()
            },
        })
        .unwrap();
    registry
}
