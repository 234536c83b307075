//! The link the several-region suites put between regions (`support/link.rs`):
//! each direction delayed by its one-way delay and jitter with the bytes in order, a cut that
//! holds bytes and new connections until it heals, a reset that closes what it carries, and its
//! counts.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::time::{Duration, Instant};

mod support;

use support::link::{Link, LinkSpec};

/// A line echo server on a free loopback port: each line comes back as it was sent.
fn echo_server() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            std::thread::spawn(move || {
                let mut writer = stream.try_clone().unwrap();
                for line in BufReader::new(stream).lines() {
                    let Ok(line) = line else { break };
                    if writer.write_all(format!("{line}\n").as_bytes()).is_err() {
                        break;
                    }
                }
            });
        }
    });
    addr
}

fn connect(link: &Link) -> (TcpStream, BufReader<TcpStream>) {
    let stream = TcpStream::connect(link.addr()).unwrap();
    stream.set_nodelay(true).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    let reader = BufReader::new(stream.try_clone().unwrap());
    (stream, reader)
}

/// Sends `line` and waits for its echo; how long the round trip took.
fn round_trip(stream: &mut TcpStream, reader: &mut BufReader<TcpStream>, line: &str) -> Duration {
    let started = Instant::now();
    stream.write_all(format!("{line}\n").as_bytes()).unwrap();
    let mut echoed = String::new();
    reader.read_line(&mut echoed).unwrap();
    assert_eq!(echoed.trim_end(), line);
    started.elapsed()
}

const SPEC: LinkSpec = LinkSpec {
    delay: Duration::from_millis(40),
    jitter: Duration::from_millis(10),
};

#[test]
fn each_way_is_delayed_by_its_delay_and_jitter_and_bytes_stay_in_order() {
    let link = Link::start(echo_server(), SPEC);
    let (mut stream, mut reader) = connect(&link);
    let mut trips: Vec<Duration> = (0..10)
        .map(|i| round_trip(&mut stream, &mut reader, &format!("ping {i}")))
        .collect();
    trips.sort();
    println!("round trips over a 40 ms + up to 10 ms link: {trips:?}");
    assert!(trips[0] >= Duration::from_millis(80), "{trips:?}");
    assert!(trips[9] <= Duration::from_millis(100 + 50), "{trips:?}");
    // Many small writes at once, each its own chunk with its own jitter: they arrive in order.
    let lines: Vec<String> = (0..200).map(|i| format!("line {i:03}")).collect();
    for line in &lines {
        stream.write_all(format!("{line}\n").as_bytes()).unwrap();
    }
    for line in &lines {
        let mut echoed = String::new();
        reader.read_line(&mut echoed).unwrap();
        assert_eq!(echoed.trim_end(), line);
    }
    assert_eq!(link.connections(), 1);
    let carried =
        2 * (lines.len() * 9 + (0..10).map(|i| format!("ping {i}\n").len()).sum::<usize>());
    // The count moves just after a chunk is written: give the last one a moment.
    let counted = Instant::now();
    while link.bytes() != carried as u64 && counted.elapsed() < Duration::from_secs(1) {
        std::thread::sleep(Duration::from_millis(5));
    }
    assert_eq!(link.bytes(), carried as u64, "both directions counted");
    assert_eq!(link.open(), 1);
    drop((stream, reader));
    let closed = Instant::now();
    while link.open() > 0 && closed.elapsed() < Duration::from_secs(2) {
        std::thread::sleep(Duration::from_millis(10));
    }
    assert_eq!(
        link.open(),
        0,
        "a connection closed by its client leaves the link"
    );
}

#[test]
fn a_cut_holds_bytes_and_new_connections_until_it_heals() {
    let link = Link::start(echo_server(), SPEC);
    let (mut stream, mut reader) = connect(&link);
    round_trip(&mut stream, &mut reader, "before");
    link.cut();
    stream.write_all(b"during\n").unwrap();
    reader
        .get_ref()
        .set_read_timeout(Some(Duration::from_millis(400)))
        .unwrap();
    let mut echoed = String::new();
    assert!(
        reader.read_line(&mut echoed).is_err(),
        "an answer crossed a cut link: {echoed:?}"
    );
    // A connection opened during the cut reaches nothing yet.
    let (mut late, mut late_reader) = connect(&link);
    late.write_all(b"late\n").unwrap();
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(link.connections(), 1, "a new connection crossed a cut link");
    let healed = Instant::now();
    link.heal();
    reader
        .get_ref()
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    echoed.clear();
    reader.read_line(&mut echoed).unwrap();
    assert_eq!(echoed, "during\n", "what was held arrives after the heal");
    let mut late_echo = String::new();
    late_reader.read_line(&mut late_echo).unwrap();
    assert_eq!(late_echo, "late\n");
    assert!(
        healed.elapsed() < Duration::from_secs(2),
        "{:?}",
        healed.elapsed()
    );
    assert_eq!(link.connections(), 2);
}

#[test]
fn a_reset_closes_what_the_link_carries_and_new_connections_go_on() {
    let link = Link::start(echo_server(), SPEC);
    let (mut stream, mut reader) = connect(&link);
    round_trip(&mut stream, &mut reader, "before");
    link.reset();
    let mut rest = Vec::new();
    // The connection ends: end of stream or an error, within the read timeout.
    let ended = reader.read_to_end(&mut rest);
    assert!(
        matches!(ended, Ok(0) | Err(_)),
        "the connection outlived the reset: {ended:?}"
    );
    let (mut again, mut again_reader) = connect(&link);
    round_trip(&mut again, &mut again_reader, "after");
}
