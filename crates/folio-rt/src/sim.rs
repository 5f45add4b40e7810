//! The simulation context and the simulated network.
//!
//! A thread enters a [`Simulation`] with [`enter`]; from then on, on that thread, the
//! seams of this crate are simulated: [`crate::blocking`] runs its work inline (after a
//! seeded number of yields, so the order of ready tasks varies with the seed), the
//! connections of `net` go through the simulation's [`SimNet`], and [`crate::with_rng`]
//! draws from the simulation's seeded generator. The simulator (`folio-sim`) runs a tokio
//! current-thread runtime with its clock paused, so timers are simulated time too.
//!
//! The network behaves as TCP: per direction, bytes arrive in order, each write after a
//! seeded delay (`NetConfig`), at most [`WINDOW_BYTES`] in flight or unread before the
//! writer waits; a close is end of stream, a reset an error on both ends. Faults, per pair
//! of addresses ([`Link`]): `Held` stops bytes and new connections until healed (a
//! partition; connections stay open, so requests time out), `Down` resets every
//! connection between the two and refuses new ones. [`SimNet::reset_ip`] resets a node's
//! connections (its crash).

use std::cell::RefCell;
use std::collections::{BTreeMap, VecDeque};
use std::io;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::{Notify, mpsc};
use tokio::time::{Instant, Sleep};

/// Bytes a direction of a connection holds in flight plus unread before writes wait.
pub const WINDOW_BYTES: usize = 4 * 1024 * 1024;
/// How long a connect waits on a held link before it fails with `TimedOut`.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(30);
/// The source address of connections made without one.
pub const DEFAULT_SOURCE: IpAddr = IpAddr::V4(Ipv4Addr::new(10, 255, 255, 254));

thread_local! {
    static CURRENT: RefCell<Option<Arc<Simulation>>> = const { RefCell::new(None) };
}

/// A simulation: its network and its seeded randomness.
#[derive(Debug)]
pub struct Simulation {
    net: SimNet,
    rng: Mutex<SmallRng>,
    /// How often (out of 256) a seam yields before it goes on.
    pub(crate) yield_per_256: u32,
}

impl Simulation {
    /// A simulation whose every random choice follows from `seed`.
    pub fn new(seed: u64, net: NetConfig) -> Arc<Simulation> {
        Arc::new(Simulation {
            net: SimNet::new(seed ^ 0x6e65_7477_6f72_6b00, net),
            rng: Mutex::new(SmallRng::seed_from_u64(seed)),
            yield_per_256: 64,
        })
    }

    /// The simulated network.
    pub fn net(&self) -> &SimNet {
        &self.net
    }

    /// Runs `f` with the simulation's generator.
    pub fn with_rng<R>(&self, f: impl FnOnce(&mut dyn rand::RngCore) -> R) -> R {
        f(&mut *self.rng.lock().unwrap_or_else(std::sync::PoisonError::into_inner))
    }
}

/// Leaves the simulation when dropped (see [`enter`]).
#[derive(Debug)]
pub struct EnterGuard(Option<Arc<Simulation>>);

impl Drop for EnterGuard {
    fn drop(&mut self) {
        let previous = self.0.take();
        CURRENT.with(|c| *c.borrow_mut() = previous);
    }
}

/// Makes this thread simulated by `sim` until the guard drops.
pub fn enter(sim: Arc<Simulation>) -> EnterGuard {
    EnterGuard(CURRENT.with(|c| c.borrow_mut().replace(sim)))
}

/// The simulation this thread is in, if any.
pub fn current() -> Option<Arc<Simulation>> {
    CURRENT.with(|c| c.borrow().clone())
}

/// Whether this thread is simulated.
pub fn active() -> bool {
    CURRENT.with(|c| c.borrow().is_some())
}

/// Under a simulation, yields a seeded number of times (usually none): the tasks that are
/// ready meanwhile run first, so their order varies with the seed. Elsewhere does nothing.
pub async fn perturb() {
    let Some(sim) = current() else { return };
    let n = sim.with_rng(|r| {
        let mut n = 0;
        while n < 3 && r.random_range(0..256) < sim.yield_per_256 {
            n += 1;
        }
        n
    });
    for _ in 0..n {
        tokio::task::yield_now().await;
    }
}

/// How the simulated network delays bytes.
#[derive(Debug, Clone)]
pub struct NetConfig {
    /// One-way delay of a write, drawn uniformly from this range...
    pub latency_min: Duration,
    pub latency_max: Duration,
    /// ...except for this share (out of 1000) of writes, delayed `spike` more.
    pub spikes_per_1000: u32,
    pub spike: Duration,
    /// Trace every write (its ends, size and delay) to the events sink.
    pub trace_writes: bool,
}

impl Default for NetConfig {
    fn default() -> Self {
        NetConfig {
            latency_min: Duration::from_micros(50),
            latency_max: Duration::from_millis(2),
            spikes_per_1000: 5,
            spike: Duration::from_millis(200),
            trace_writes: false,
        }
    }
}

/// The state of the link between two addresses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Link {
    Up,
    /// Bytes and new connections wait until the link is up again (a partition).
    Held,
    /// Connections between the two are reset and new ones refused.
    Down,
}

/// What the network did, for the simulator's report.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NetStats {
    pub connects: u64,
    pub refused: u64,
    pub resets: u64,
    pub writes: u64,
    pub bytes: u64,
}

/// The simulated network (see the module docs). Cloning shares it.
#[derive(Clone)]
pub struct SimNet {
    inner: Arc<Mutex<Net>>,
    changed: Arc<Notify>,
}

impl std::fmt::Debug for SimNet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SimNet").finish_non_exhaustive()
    }
}

type Accepted = (SimStream, SocketAddr);

/// A sink for what the network does (connects refused, resets, link changes).
pub type Events = Arc<dyn Fn(String) + Send + Sync>;

struct Net {
    config: NetConfig,
    rng: SmallRng,
    listeners: BTreeMap<SocketAddr, mpsc::UnboundedSender<Accepted>>,
    links: BTreeMap<(IpAddr, IpAddr), Link>,
    conns: Vec<[Weak<Pipe>; 2]>,
    ports: BTreeMap<IpAddr, u16>,
    stats: NetStats,
    events: Option<Events>,
}

fn pair(a: IpAddr, b: IpAddr) -> (IpAddr, IpAddr) {
    if a <= b { (a, b) } else { (b, a) }
}

impl Net {
    fn link(&self, a: IpAddr, b: IpAddr) -> Link {
        self.links.get(&pair(a, b)).copied().unwrap_or(Link::Up)
    }

    fn delay(&mut self) -> Duration {
        let c = &self.config;
        let (lo, hi) = (c.latency_min.as_nanos() as u64, c.latency_max.as_nanos() as u64);
        let mut d = Duration::from_nanos(self.rng.random_range(lo..=hi.max(lo)));
        if self.rng.random_range(0..1000) < c.spikes_per_1000 {
            d += c.spike;
        }
        d
    }

    fn event(&self, what: impl FnOnce() -> String) {
        if let Some(e) = &self.events {
            e(what());
        }
    }

    /// Resets every live connection `touches` selects; returns how many.
    fn reset_where(&mut self, touches: impl Fn(&Pipe) -> bool) -> usize {
        let mut n = 0;
        self.conns.retain(|c| {
            let (Some(a), Some(b)) = (c[0].upgrade(), c[1].upgrade()) else { return false };
            if touches(&a) {
                a.reset();
                b.reset();
                n += 1;
                return false;
            }
            true
        });
        self.stats.resets += n as u64;
        n
    }
}

impl SimNet {
    fn new(seed: u64, config: NetConfig) -> SimNet {
        SimNet {
            inner: Arc::new(Mutex::new(Net {
                config,
                rng: SmallRng::seed_from_u64(seed),
                listeners: BTreeMap::new(),
                links: BTreeMap::new(),
                conns: Vec::new(),
                ports: BTreeMap::new(),
                stats: NetStats::default(),
                events: None,
            })),
            changed: Arc::new(Notify::new()),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Net> {
        self.inner.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Sends what the network does to `events`.
    pub fn set_events(&self, events: Events) {
        self.lock().events = Some(events);
    }

    /// What the network did so far.
    pub fn stats(&self) -> NetStats {
        self.lock().stats.clone()
    }

    /// Sets the link between `a` and `b` (both directions).
    pub fn set_link(&self, a: IpAddr, b: IpAddr, link: Link) {
        let mut net = self.lock();
        let key = pair(a, b);
        if link == Link::Up {
            net.links.remove(&key);
        } else {
            net.links.insert(key, link);
        }
        net.event(|| format!("net: link {a} - {b} {link:?}"));
        if link == Link::Down {
            let n = net.reset_where(|p| pair(p.from.ip(), p.to.ip()) == key);
            net.event(|| format!("net: {n} connections {a} - {b} reset"));
        }
        // Readers waiting on a held link look again.
        for c in &net.conns {
            for p in c.iter().filter_map(Weak::upgrade) {
                p.wake_both();
            }
        }
        drop(net);
        self.changed.notify_waiters();
    }

    /// Resets every connection to or from `ip` (its node crashed); returns how many.
    pub fn reset_ip(&self, ip: IpAddr) -> usize {
        let mut net = self.lock();
        let n = net.reset_where(|p| p.from.ip() == ip || p.to.ip() == ip);
        net.event(|| format!("net: {n} connections of {ip} reset"));
        n
    }

    /// Resets one live connection chosen by the seed, if there is one.
    pub fn reset_one(&self) -> Option<(SocketAddr, SocketAddr)> {
        let mut net = self.lock();
        net.conns.retain(|c| c[0].strong_count() > 0 && c[1].strong_count() > 0);
        if net.conns.is_empty() {
            return None;
        }
        let n = net.conns.len();
        let i = net.rng.random_range(0..n);
        let a = net.conns[i][0].upgrade()?;
        let ends = (a.from, a.to);
        net.reset_where(|p| (p.from, p.to) == ends || (p.to, p.from) == ends);
        net.event(|| format!("net: connection {} - {} reset", ends.0, ends.1));
        Some(ends)
    }

    /// Listens on `addr` (port 0: the next free port of its address).
    pub fn bind(&self, mut addr: SocketAddr) -> io::Result<SimListener> {
        let mut net = self.lock();
        if addr.port() == 0 {
            addr.set_port(next_port(&mut net, addr.ip()));
        }
        if net.listeners.get(&addr).is_some_and(|tx| !tx.is_closed()) {
            return Err(io::Error::new(io::ErrorKind::AddrInUse, format!("{addr} in use")));
        }
        let (tx, rx) = mpsc::unbounded_channel();
        net.listeners.insert(addr, tx);
        Ok(SimListener { addr, rx, net: self.clone() })
    }

    /// Connects from `from` (or [`DEFAULT_SOURCE`]) to `to`, as TCP would: one delay for
    /// the handshake, refused without a listener or on a down link, waiting on a held one.
    pub async fn connect(&self, from: Option<IpAddr>, to: SocketAddr) -> io::Result<SimStream> {
        let from_ip = from.unwrap_or(DEFAULT_SOURCE);
        let delay = self.lock().delay();
        tokio::time::sleep(delay).await;
        let deadline = Instant::now() + CONNECT_TIMEOUT;
        loop {
            let changed = self.changed.notified();
            let link = self.lock().link(from_ip, to.ip());
            match link {
                Link::Up => break,
                Link::Down => return Err(self.refused(from_ip, to, "link down")),
                Link::Held => {
                    if tokio::time::timeout_at(deadline, changed).await.is_err() {
                        return Err(io::Error::new(
                            io::ErrorKind::TimedOut,
                            format!("connecting to {to}: timed out (held link)"),
                        ));
                    }
                }
            }
        }
        let mut net = self.lock();
        let Some(tx) = net.listeners.get(&to).cloned() else {
            drop(net);
            return Err(self.refused(from_ip, to, "nothing listens"));
        };
        let local = SocketAddr::new(from_ip, next_port(&mut net, from_ip));
        let (client, server) = SimStream::pair(self, local, to);
        net.conns.push([Arc::downgrade(&client.write.pipe), Arc::downgrade(&server.write.pipe)]);
        net.stats.connects += 1;
        drop(net);
        if tx.send((server, local)).is_err() {
            return Err(self.refused(from_ip, to, "listener closed"));
        }
        Ok(client)
    }

    fn refused(&self, from: IpAddr, to: SocketAddr, why: &str) -> io::Error {
        let mut net = self.lock();
        net.stats.refused += 1;
        net.event(|| format!("net: {from} -> {to} refused ({why})"));
        io::Error::new(io::ErrorKind::ConnectionRefused, format!("connecting to {to}: {why}"))
    }
}

fn next_port(net: &mut Net, ip: IpAddr) -> u16 {
    let p = net.ports.entry(ip).or_insert(40_000);
    *p = if *p == u16::MAX { 40_000 } else { *p + 1 };
    *p
}

/// A listener of the simulated network; dropping it refuses new connections.
#[derive(Debug)]
pub struct SimListener {
    addr: SocketAddr,
    rx: mpsc::UnboundedReceiver<Accepted>,
    net: SimNet,
}

impl SimListener {
    /// The next connection and its peer's address.
    pub async fn accept(&mut self) -> io::Result<Accepted> {
        self.rx.recv().await.ok_or_else(|| io::Error::other("listener closed"))
    }

    /// The address it listens on.
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }
}

impl Drop for SimListener {
    fn drop(&mut self) {
        // Closing our receiver closes the sender the network holds for this address; a
        // listener bound there since (after ours closed) keeps its open one.
        self.rx.close();
        let mut net = self.net.lock();
        if net.listeners.get(&self.addr).is_some_and(mpsc::UnboundedSender::is_closed) {
            net.listeners.remove(&self.addr);
        }
    }
}

struct Segment {
    at: Instant,
    data: Bytes,
    fin: bool,
}

/// One direction of a connection.
struct Pipe {
    from: SocketAddr,
    to: SocketAddr,
    state: Mutex<PipeState>,
}

#[derive(Default)]
struct PipeState {
    in_flight: VecDeque<Segment>,
    in_flight_bytes: usize,
    readable: BytesMut,
    last_at: Option<Instant>,
    fin_sent: bool,
    eof: bool,
    reset: bool,
    reader_gone: bool,
    reader: Option<Waker>,
    writer: Option<Waker>,
}

impl Pipe {
    fn lock(&self) -> MutexGuard<'_, PipeState> {
        self.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn reset(&self) {
        let mut st = self.lock();
        st.reset = true;
        wake(&mut st.reader);
        wake(&mut st.writer);
    }

    fn wake_both(&self) {
        let mut st = self.lock();
        wake(&mut st.reader);
        wake(&mut st.writer);
    }
}

fn wake(w: &mut Option<Waker>) {
    if let Some(w) = w.take() {
        w.wake();
    }
}

fn reset_error() -> io::Error {
    io::Error::new(io::ErrorKind::ConnectionReset, "connection reset (simulated)")
}

/// A connection of the simulated network.
#[derive(Debug)]
pub struct SimStream {
    read: SimRead,
    write: SimWrite,
}

impl std::fmt::Debug for Pipe {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Pipe({} -> {})", self.from, self.to)
    }
}

impl SimStream {
    /// Both ends of a new connection from `a` to `b`: (a's end, b's end).
    fn pair(net: &SimNet, a: SocketAddr, b: SocketAddr) -> (SimStream, SimStream) {
        let ab = Arc::new(Pipe { from: a, to: b, state: Mutex::default() });
        let ba = Arc::new(Pipe { from: b, to: a, state: Mutex::default() });
        let end = |rx: &Arc<Pipe>, tx: &Arc<Pipe>| SimStream {
            read: SimRead { pipe: rx.clone(), net: net.clone(), sleep: None },
            write: SimWrite { pipe: tx.clone(), net: net.clone() },
        };
        (end(&ba, &ab), end(&ab, &ba))
    }

    /// The peer's address.
    pub fn peer_addr(&self) -> SocketAddr {
        self.write.pipe.to
    }

    /// This end's address.
    pub fn local_addr(&self) -> SocketAddr {
        self.write.pipe.from
    }

    /// The two halves.
    pub fn into_split(self) -> (SimRead, SimWrite) {
        (self.read, self.write)
    }
}

/// The reading half of a [`SimStream`].
pub struct SimRead {
    pipe: Arc<Pipe>,
    net: SimNet,
    sleep: Option<Pin<Box<Sleep>>>,
}

impl std::fmt::Debug for SimRead {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "SimRead({:?})", self.pipe)
    }
}

/// The writing half of a [`SimStream`]; dropping it closes the direction.
#[derive(Debug)]
pub struct SimWrite {
    pipe: Arc<Pipe>,
    net: SimNet,
}

impl AsyncRead for SimRead {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        loop {
            let held = this.net.lock().link(this.pipe.from.ip(), this.pipe.to.ip()) != Link::Up;
            let mut st = this.pipe.lock();
            if st.reset {
                return Poll::Ready(Err(reset_error()));
            }
            let now = Instant::now();
            while !held && st.in_flight.front().is_some_and(|s| s.at <= now) {
                let s = st.in_flight.pop_front().expect("front exists");
                st.in_flight_bytes -= s.data.len();
                st.readable.extend_from_slice(&s.data);
                st.eof |= s.fin;
            }
            if !st.readable.is_empty() {
                let n = st.readable.len().min(buf.remaining());
                buf.put_slice(&st.readable.split_to(n));
                wake(&mut st.writer);
                return Poll::Ready(Ok(()));
            }
            if st.eof {
                return Poll::Ready(Ok(()));
            }
            st.reader = Some(cx.waker().clone());
            let next = if held { None } else { st.in_flight.front().map(|s| s.at) };
            drop(st);
            let Some(at) = next else {
                this.sleep = None;
                return Poll::Pending;
            };
            let sleep = this.sleep.get_or_insert_with(|| Box::pin(tokio::time::sleep_until(at)));
            if sleep.deadline() != at {
                sleep.as_mut().reset(at);
            }
            if sleep.as_mut().poll(cx).is_pending() {
                return Poll::Pending;
            }
            this.sleep = None;
        }
    }
}

impl Drop for SimRead {
    fn drop(&mut self) {
        let mut st = self.pipe.lock();
        st.reader_gone = true;
        wake(&mut st.writer);
    }
}

impl SimWrite {
    fn send(&self, data: Bytes, fin: bool) {
        let delay = self.net.lock().delay();
        if self.net.lock().config.trace_writes {
            let (f, t, n) = (self.pipe.from, self.pipe.to, data.len());
            self.net
                .lock()
                .event(|| format!("net: write {f} -> {t} {n} bytes fin {fin} in {delay:?}"));
        }
        let mut st = self.pipe.lock();
        let at = (Instant::now() + delay).max(st.last_at.unwrap_or_else(Instant::now));
        st.last_at = Some(at);
        st.in_flight_bytes += data.len();
        st.in_flight.push_back(Segment { at, data, fin });
        wake(&mut st.reader);
    }
}

impl AsyncWrite for SimWrite {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let n = {
            let mut st = self.pipe.lock();
            if st.reset {
                return Poll::Ready(Err(reset_error()));
            }
            if st.reader_gone || st.fin_sent {
                return Poll::Ready(Err(io::Error::new(
                    io::ErrorKind::BrokenPipe,
                    "connection closed (simulated)",
                )));
            }
            let used = st.in_flight_bytes + st.readable.len();
            if used >= WINDOW_BYTES {
                st.writer = Some(cx.waker().clone());
                return Poll::Pending;
            }
            buf.len().min(WINDOW_BYTES - used)
        };
        if n > 0 {
            {
                let mut net = self.net.lock();
                net.stats.writes += 1;
                net.stats.bytes += n as u64;
            }
            self.send(Bytes::copy_from_slice(&buf[..n]), false);
        }
        Poll::Ready(Ok(n))
    }

    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        let first = !std::mem::replace(&mut self.pipe.lock().fin_sent, true);
        if first {
            self.send(Bytes::new(), true);
        }
        Poll::Ready(Ok(()))
    }
}

impl Drop for SimWrite {
    fn drop(&mut self) {
        if !std::mem::replace(&mut self.pipe.lock().fin_sent, true) {
            self.send(Bytes::new(), true);
        }
    }
}

impl AsyncRead for SimStream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().read).poll_read(cx, buf)
    }
}

impl AsyncWrite for SimStream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().write).poll_write(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().write).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().write).poll_shutdown(cx)
    }
}
