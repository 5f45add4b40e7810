//! The simulated network behaves as TCP (order, end of stream, resets, refusals, a bounded
//! window) and obeys its link faults; the seams are simulated only on a thread that
//! entered a simulation, and then follow its seed.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::Duration;

use folio_rt::net::{Listener, Stream, connect_from};
use folio_rt::sim::{Link, NetConfig, Simulation, WINDOW_BYTES, enter};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

fn ip(last: u8) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(10, 9, 0, last))
}

/// Runs `f` on a simulated thread: a current-thread runtime with its clock paused.
fn simulated<F: std::future::Future<Output = ()>>(seed: u64, f: impl FnOnce() -> F) {
    let _sim = enter(Simulation::new(seed, NetConfig::default()));
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .unwrap();
    rt.block_on(f());
}

async fn pair(server: SocketAddr) -> (Stream, Stream) {
    let mut l = Listener::bind(server).await.unwrap();
    let c = connect_from(Some(ip(1)), server).await.unwrap();
    let (s, peer) = l.accept().await.unwrap();
    assert_eq!(peer.ip(), ip(1), "the server sees the client's address");
    (c, s)
}

#[test]
fn bytes_arrive_in_order_and_a_close_is_the_end_of_the_stream() {
    simulated(1, || async {
        let (mut c, mut s) = pair(SocketAddr::new(ip(2), 1)).await;
        let mut sent = Vec::new();
        for i in 0..200u32 {
            let chunk = vec![i as u8; (i as usize % 7) + 1];
            c.write_all(&chunk).await.unwrap();
            sent.extend_from_slice(&chunk);
        }
        c.shutdown().await.unwrap();
        let mut got = Vec::new();
        s.read_to_end(&mut got).await.unwrap();
        assert_eq!(got, sent, "every byte, in order, then end of stream");
    });
}

#[test]
fn a_held_link_stops_bytes_until_it_heals() {
    simulated(2, || async {
        let sim = folio_rt::sim::current().unwrap();
        let (mut c, mut s) = pair(SocketAddr::new(ip(3), 1)).await;
        sim.net().set_link(ip(1), ip(3), Link::Held);
        c.write_all(b"held").await.unwrap();
        let mut buf = [0u8; 4];
        let early = tokio::time::timeout(Duration::from_secs(5), s.read_exact(&mut buf)).await;
        assert!(early.is_err(), "nothing crosses a held link");
        sim.net().set_link(ip(1), ip(3), Link::Up);
        s.read_exact(&mut buf).await.unwrap();
        assert_eq!(&buf, b"held", "the bytes come once it heals");
    });
}

#[test]
fn a_down_link_resets_its_connections_and_refuses_new_ones() {
    simulated(3, || async {
        let sim = folio_rt::sim::current().unwrap();
        let server = SocketAddr::new(ip(4), 1);
        let mut l = Listener::bind(server).await.unwrap();
        let mut c = connect_from(Some(ip(1)), server).await.unwrap();
        let (_s, _) = l.accept().await.unwrap();
        sim.net().set_link(ip(1), ip(4), Link::Down);
        let mut buf = [0u8; 1];
        let e = c.read(&mut buf).await.unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::ConnectionReset);
        let e = connect_from(Some(ip(1)), server).await.unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::ConnectionRefused);
        assert_eq!(sim.net().stats().resets, 1);
    });
}

#[test]
fn nothing_listening_refuses_and_a_crashed_node_resets_its_peers() {
    simulated(4, || async {
        let sim = folio_rt::sim::current().unwrap();
        let e = connect_from(None, SocketAddr::new(ip(5), 1)).await.unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::ConnectionRefused);
        let (mut c, _s) = pair(SocketAddr::new(ip(6), 1)).await;
        assert_eq!(sim.net().reset_ip(ip(6)), 1);
        let e = c.write_all(b"x").await.unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::ConnectionReset);
    });
}

#[test]
fn a_writer_waits_once_its_window_is_full_and_goes_on_when_the_reader_reads() {
    simulated(5, || async {
        let (mut c, mut s) = pair(SocketAddr::new(ip(7), 1)).await;
        let big = vec![7u8; WINDOW_BYTES * 2];
        let writer = tokio::spawn(async move {
            c.write_all(&big).await.unwrap();
            c
        });
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert!(!writer.is_finished(), "twice the window does not fit unread");
        let mut got = vec![0u8; WINDOW_BYTES * 2];
        s.read_exact(&mut got).await.unwrap();
        writer.await.unwrap();
        assert!(got.iter().all(|b| *b == 7));
    });
}

#[test]
fn seams_are_simulated_only_inside_a_simulation_and_follow_its_seed() {
    assert!(!folio_rt::sim::active());
    let draw = |seed| {
        let mut out = Vec::new();
        simulated(seed, || async {
            assert!(folio_rt::sim::active());
            let thread = std::thread::current().id();
            let ran_on = folio_rt::blocking(move || std::thread::current().id()).await.unwrap();
            assert_eq!(ran_on, thread, "blocking work runs inline");
        });
        let _sim = enter(Simulation::new(seed, NetConfig::default()));
        out.extend((0..4).map(|_| folio_rt::random::<u64>()));
        out
    };
    assert_eq!(draw(9), draw(9), "the same seed draws the same values");
    assert_ne!(draw(9), draw(10));
    assert!(!folio_rt::sim::active(), "leaving the simulation restores the real seams");
}

/// `after_unlock`: outside a simulation the code runs at once; under one, a seeded share of
/// the calls runs later, after other ready tasks, and every call runs.
#[test]
fn after_unlock_runs_now_outside_a_simulation_and_is_overtaken_by_seed_inside() {
    use std::sync::{Arc, Mutex};
    let order = Arc::new(Mutex::new(Vec::new()));
    let o = order.clone();
    folio_rt::after_unlock(move || o.lock().unwrap().push(0));
    assert_eq!(*order.lock().unwrap(), [0], "outside a simulation: at once");
    let run = |seed| {
        let order = Arc::new(Mutex::new(Vec::new()));
        let o = order.clone();
        simulated(seed, || async move {
            for i in 0..100u32 {
                let o = o.clone();
                folio_rt::after_unlock(move || o.lock().unwrap().push(i));
            }
            while o.lock().unwrap().len() < 100 {
                tokio::task::yield_now().await;
            }
        });
        order.lock().unwrap().to_vec()
    };
    let a = run(7);
    let mut sorted = a.clone();
    sorted.sort_unstable();
    assert_eq!(sorted, (0..100).collect::<Vec<_>>(), "every call ran once");
    assert_ne!(a, sorted, "some calls were overtaken");
    assert_eq!(run(7), a, "the same seed interleaves them the same way");
}
