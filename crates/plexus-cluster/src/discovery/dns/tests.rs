//! DNS discovery against a small DNS server on 127.0.0.1 (UDP, and TCP
//! for answers too large for a datagram) that answers from a zone built
//! with hickory-proto's message types. Nothing is sent anywhere else: the
//! addresses in the zone are data only.

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, TcpListener, UdpSocket};
use std::str::FromStr;
use std::time::Duration;

use hickory_resolver::proto::op::{Message, MessageType, ResponseCode};
use hickory_resolver::proto::rr::rdata::{A, AAAA, SRV};
use hickory_resolver::proto::rr::{Name, RData, Record, RecordType};

use super::*;

/// Guards a lookup against a hang; the answer itself is asserted.
const GUARD: Duration = Duration::from_secs(30);

/// A zone: the records of each (name, type), which names exist, the SRV
/// additional records sent along, and names that make the server fail.
#[derive(Default, Clone)]
struct Zone {
    records: HashMap<(Name, RecordType), Vec<Record>>,
    additionals: HashMap<Name, Vec<Record>>,
    servfail: Vec<Name>,
}

fn name(s: &str) -> Name {
    Name::from_str(s).expect("a valid name in the test")
}

impl Zone {
    fn add(&mut self, owner: &str, rdata: RData) {
        let owner = name(owner);
        let key = (owner.clone(), rdata.record_type());
        self.records
            .entry(key)
            .or_default()
            .push(Record::from_rdata(owner, 30, rdata));
    }

    fn srv(&mut self, owner: &str, port: u16, target: &str) {
        self.add(owner, RData::SRV(SRV::new(0, 10, port, name(target))));
    }

    fn a(&mut self, owner: &str, ip: [u8; 4]) {
        self.add(owner, RData::A(A(Ipv4Addr::from(ip))));
    }

    fn exists(&self, n: &Name) -> bool {
        self.records.keys().any(|(owner, _)| owner == n)
    }

    fn answer(&self, query: &Message) -> Message {
        let mut reply = Message::new();
        reply
            .set_id(query.id())
            .set_message_type(MessageType::Response)
            .set_op_code(query.op_code())
            .set_recursion_desired(query.recursion_desired())
            .set_recursion_available(true)
            .add_queries(query.queries().to_vec());
        let Some(q) = query.queries().first() else {
            reply.set_response_code(ResponseCode::FormErr);
            return reply;
        };
        if self.servfail.contains(q.name()) {
            reply.set_response_code(ResponseCode::ServFail);
        } else if let Some(records) = self.records.get(&(q.name().clone(), q.query_type())) {
            reply.add_answers(records.iter().cloned());
            if let Some(extra) = self.additionals.get(q.name()) {
                reply.add_additionals(extra.iter().cloned());
            }
        } else if !self.exists(q.name()) {
            reply.set_response_code(ResponseCode::NXDomain);
        }
        reply
    }
}

/// Serves `zone` on 127.0.0.1 over UDP and TCP (one port) until the test
/// process ends; returns the address.
fn serve(zone: Zone) -> SocketAddr {
    let (udp, tcp) = loop {
        let udp = UdpSocket::bind("127.0.0.1:0").expect("bind udp on 127.0.0.1");
        let addr = udp.local_addr().expect("bound");
        // The TCP port of the same number may be taken: try another.
        if let Ok(tcp) = TcpListener::bind(addr) {
            break (udp, tcp);
        }
    };
    let addr = udp.local_addr().expect("bound");
    let z = zone.clone();
    std::thread::spawn(move || {
        let mut buf = [0u8; 4096];
        while let Ok((n, from)) = udp.recv_from(&mut buf) {
            let Ok(query) = Message::from_vec(&buf[..n]) else {
                continue;
            };
            let mut reply = z.answer(&query);
            let limit = query
                .extensions()
                .as_ref()
                .map_or(512, |e| usize::from(e.max_payload()).max(512));
            let mut bytes = reply.to_vec().expect("the zone's reply encodes");
            if bytes.len() > limit {
                // Too large for the client's datagram: truncated, as a real
                // server answers; the client asks again over TCP.
                reply.take_answers();
                reply.take_additionals();
                reply.set_truncated(true);
                bytes = reply.to_vec().expect("an empty reply encodes");
            }
            let _ = udp.send_to(&bytes, from);
        }
    });
    std::thread::spawn(move || {
        for stream in tcp.incoming() {
            let Ok(mut stream) = stream else { return };
            let z = zone.clone();
            std::thread::spawn(move || loop {
                let mut len = [0u8; 2];
                if stream.read_exact(&mut len).is_err() {
                    return;
                }
                let mut query = vec![0u8; usize::from(u16::from_be_bytes(len))];
                if stream.read_exact(&mut query).is_err() {
                    return;
                }
                let Ok(query) = Message::from_vec(&query) else {
                    return;
                };
                let bytes = z.answer(&query).to_vec().expect("the zone's reply encodes");
                let len = u16::try_from(bytes.len()).expect("a test reply fits TCP framing");
                if stream.write_all(&len.to_be_bytes()).is_err()
                    || stream.write_all(&bytes).is_err()
                {
                    return;
                }
            });
        }
    });
    addr
}

async fn discover(d: &DnsDiscovery) -> Result<Vec<String>, DiscoveryError> {
    tokio::time::timeout(GUARD, d.discover())
        .await
        .expect("the lookup finished")
}

fn strings(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| s.to_string()).collect()
}

const SRV_NAME: &str = "_plexus._tcp.plexus.test.";

/// Three pods behind a headless Service: SRV records (one duplicated, one
/// "no service" record) and the pods' A records.
fn headless_service() -> Zone {
    let mut z = Zone::default();
    for i in [2u8, 0, 1, 2] {
        z.srv(SRV_NAME, 4000, &format!("plexus-{i}.plexus.test."));
    }
    z.srv(SRV_NAME, 4000, ".");
    for i in 0..3u8 {
        z.a(&format!("plexus-{i}.plexus.test."), [10, 1, 0, 10 + i]);
    }
    z
}

#[tokio::test]
async fn srv_records_become_sorted_addresses_of_their_targets() {
    let server = serve(headless_service());
    let d = DnsDiscovery::srv(SRV_NAME)
        .nameservers([server])
        .build()
        .expect("builds");
    assert_eq!(d.describe(), format!("dns srv {SRV_NAME}"));
    let seeds = discover(&d).await.expect("three seeds");
    assert_eq!(
        seeds,
        strings(&[
            "tcp://10.1.0.10:4000",
            "tcp://10.1.0.11:4000",
            "tcp://10.1.0.12:4000"
        ])
    );
}

#[tokio::test]
async fn srv_targets_sent_as_additional_records_need_no_second_lookup() {
    let mut z = Zone::default();
    z.srv(SRV_NAME, 4100, "pod-a.plexus.test.");
    // No A record of its own in the zone: only the additional one.
    z.additionals.insert(
        name(SRV_NAME),
        vec![Record::from_rdata(
            name("pod-a.plexus.test."),
            30,
            RData::AAAA(AAAA(Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, 7))),
        )],
    );
    let d = DnsDiscovery::srv(SRV_NAME)
        .nameservers([serve(z)])
        .scheme("quic")
        .build()
        .expect("builds");
    assert_eq!(
        discover(&d).await.expect("one seed"),
        strings(&["quic://[fd00::7]:4100"])
    );
}

#[tokio::test]
async fn srv_targets_can_be_kept_as_host_names() {
    let d = DnsDiscovery::srv(SRV_NAME)
        .nameservers([serve(headless_service())])
        .srv_target_names()
        .build()
        .expect("builds");
    assert_eq!(
        discover(&d).await.expect("three seeds"),
        strings(&[
            "tcp://plexus-0.plexus.test:4000",
            "tcp://plexus-1.plexus.test:4000",
            "tcp://plexus-2.plexus.test:4000"
        ])
    );
}

#[tokio::test]
async fn a_and_aaaa_records_become_addresses_on_one_port() {
    let mut z = Zone::default();
    z.a("plexus.test.", [10, 1, 0, 2]);
    z.a("plexus.test.", [10, 1, 0, 1]);
    z.add(
        "plexus.test.",
        RData::AAAA(AAAA(Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, 1))),
    );
    let d = DnsDiscovery::hosts("plexus.test.", 4000)
        .nameservers([serve(z)])
        .build()
        .expect("builds");
    assert_eq!(d.describe(), "dns a/aaaa plexus.test.");
    let mut seeds = discover(&d).await.expect("seeds");
    // The resolver asks for A, then AAAA only if no A came (its default
    // strategy); either way the list is sorted.
    let v4 = strings(&["tcp://10.1.0.1:4000", "tcp://10.1.0.2:4000"]);
    if seeds.len() == 3 {
        assert_eq!(seeds.pop().as_deref(), Some("tcp://[fd00::1]:4000"));
    }
    assert_eq!(seeds, v4);
}

#[tokio::test]
async fn a_huge_answer_comes_over_tcp_and_is_cut_to_max_seeds() {
    let mut z = Zone::default();
    for i in 0..1_000u16 {
        z.a("many.plexus.test.", [10, 2, (i >> 8) as u8, i as u8]);
    }
    let d = DnsDiscovery::hosts("many.plexus.test.", 4000)
        .nameservers([serve(z)])
        .max_seeds(16)
        .build()
        .expect("builds");
    let seeds = discover(&d).await.expect("seeds");
    let mut expected: Vec<String> = (0..1_000u16)
        .map(|i| format!("tcp://10.2.{}.{}:4000", i >> 8, i & 255))
        .collect();
    expected.sort();
    expected.truncate(16);
    assert_eq!(seeds, expected);
}

#[tokio::test]
async fn no_records_is_an_empty_error_naming_the_name() {
    let mut z = Zone::default();
    // The Service exists (it has an A record) but no SRV records.
    z.a("_plexus._tcp.empty.test.", [10, 3, 0, 1]);
    let server = serve(z);
    let e = discover(
        &DnsDiscovery::srv("_plexus._tcp.empty.test.")
            .nameservers([server])
            .build()
            .expect("builds"),
    )
    .await
    .expect_err("no records");
    assert!(matches!(e, DiscoveryError::Empty { .. }), "{e:?}");
    assert_eq!(
        e.to_string(),
        "discover seeds: dns srv _plexus._tcp.empty.test.: no records"
    );
    // A name that does not exist at all: the same.
    let e = discover(
        &DnsDiscovery::hosts("nothing.test.", 4000)
            .nameservers([server])
            .build()
            .expect("builds"),
    )
    .await
    .expect_err("no such name");
    assert!(matches!(e, DiscoveryError::Empty { .. }), "{e:?}");
}

#[tokio::test]
async fn srv_records_whose_targets_have_no_address_are_an_empty_answer() {
    let mut z = Zone::default();
    z.srv(SRV_NAME, 4000, "gone.plexus.test.");
    z.srv(SRV_NAME, 0, "plexus-0.plexus.test.");
    z.a("plexus-0.plexus.test.", [10, 1, 0, 10]);
    let e = discover(
        &DnsDiscovery::srv(SRV_NAME)
            .nameservers([serve(z)])
            .build()
            .expect("builds"),
    )
    .await
    .expect_err("no usable target");
    assert!(matches!(e, DiscoveryError::Empty { .. }), "{e:?}");
}

#[tokio::test]
async fn a_failing_server_is_a_failed_error_naming_the_name() {
    let mut z = Zone::default();
    z.servfail.push(name(SRV_NAME));
    let e = discover(
        &DnsDiscovery::srv(SRV_NAME)
            .nameservers([serve(z)])
            .build()
            .expect("builds"),
    )
    .await
    .expect_err("server failure");
    assert!(matches!(e, DiscoveryError::Failed { .. }), "{e:?}");
    assert!(
        e.to_string()
            .starts_with(&format!("discover seeds: dns srv {SRV_NAME}: ")),
        "{e}"
    );
}
