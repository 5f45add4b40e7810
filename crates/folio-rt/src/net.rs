//! TCP connections and listeners, real or simulated.
//!
//! [`connect`] and [`Listener::bind`] give tokio's TCP types on a normal thread and the
//! simulated network's on a simulated one ([`crate::sim`]); both behave as TCP does: bytes
//! in order per direction, a close seen as end of stream, a reset as an error. The real
//! variants cost one match per call over tokio's own types (no lock, no copy).

use std::io;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};

use crate::sim::{self, SimListener, SimRead, SimStream, SimWrite};

/// A connected byte stream.
#[derive(Debug)]
pub enum Stream {
    /// A real TCP connection.
    Tcp(TcpStream),
    /// A connection of the simulated network.
    Sim(SimStream),
}

/// The reading half of a [`Stream`].
#[derive(Debug)]
pub enum ReadHalf {
    /// Of a real TCP connection.
    Tcp(OwnedReadHalf),
    /// Of a simulated connection.
    Sim(SimRead),
}

/// The writing half of a [`Stream`]; dropping it closes the direction (end of stream for
/// the peer).
#[derive(Debug)]
pub enum WriteHalf {
    /// Of a real TCP connection.
    Tcp(OwnedWriteHalf),
    /// Of a simulated connection.
    Sim(SimWrite),
}

/// Connects to `addr`.
pub async fn connect(addr: SocketAddr) -> io::Result<Stream> {
    connect_from(None, addr).await
}

/// Connects to `addr` from the local address `from` (a simulated node's address; on a real
/// network the source is left to the kernel when `from` is `None`, else bound to it).
pub async fn connect_from(from: Option<IpAddr>, addr: SocketAddr) -> io::Result<Stream> {
    if let Some(s) = sim::current() {
        return s.net().connect(from, addr).await.map(Stream::Sim);
    }
    let stream = match from {
        None => TcpStream::connect(addr).await?,
        Some(ip) => {
            let socket = match addr {
                SocketAddr::V4(_) => tokio::net::TcpSocket::new_v4()?,
                SocketAddr::V6(_) => tokio::net::TcpSocket::new_v6()?,
            };
            socket.bind(SocketAddr::new(ip, 0))?;
            socket.connect(addr).await?
        }
    };
    Ok(Stream::Tcp(stream))
}

impl Stream {
    /// Sends small writes at once (real TCP: `TCP_NODELAY`; simulated: always so).
    pub fn set_nodelay(&self, on: bool) -> io::Result<()> {
        match self {
            Stream::Tcp(s) => s.set_nodelay(on),
            Stream::Sim(_) => Ok(()),
        }
    }

    /// The peer's address.
    pub fn peer_addr(&self) -> io::Result<SocketAddr> {
        match self {
            Stream::Tcp(s) => s.peer_addr(),
            Stream::Sim(s) => Ok(s.peer_addr()),
        }
    }

    /// This end's address.
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        match self {
            Stream::Tcp(s) => s.local_addr(),
            Stream::Sim(s) => Ok(s.local_addr()),
        }
    }

    /// Splits the stream into halves that can be used from two tasks.
    pub fn into_split(self) -> (ReadHalf, WriteHalf) {
        match self {
            Stream::Tcp(s) => {
                let (r, w) = s.into_split();
                (ReadHalf::Tcp(r), WriteHalf::Tcp(w))
            }
            Stream::Sim(s) => {
                let (r, w) = s.into_split();
                (ReadHalf::Sim(r), WriteHalf::Sim(w))
            }
        }
    }
}

/// Forwards `AsyncRead` to whichever variant `$self` is.
macro_rules! read_of {
    ($t:ty) => {
        impl AsyncRead for $t {
            fn poll_read(
                self: Pin<&mut Self>,
                cx: &mut Context<'_>,
                buf: &mut ReadBuf<'_>,
            ) -> Poll<io::Result<()>> {
                match self.get_mut() {
                    Self::Tcp(s) => Pin::new(s).poll_read(cx, buf),
                    Self::Sim(s) => Pin::new(s).poll_read(cx, buf),
                }
            }
        }
    };
}

/// Forwards `AsyncWrite` to whichever variant `$self` is.
macro_rules! write_of {
    ($t:ty) => {
        impl AsyncWrite for $t {
            fn poll_write(
                self: Pin<&mut Self>,
                cx: &mut Context<'_>,
                buf: &[u8],
            ) -> Poll<io::Result<usize>> {
                match self.get_mut() {
                    Self::Tcp(s) => Pin::new(s).poll_write(cx, buf),
                    Self::Sim(s) => Pin::new(s).poll_write(cx, buf),
                }
            }

            fn poll_write_vectored(
                self: Pin<&mut Self>,
                cx: &mut Context<'_>,
                bufs: &[io::IoSlice<'_>],
            ) -> Poll<io::Result<usize>> {
                match self.get_mut() {
                    Self::Tcp(s) => Pin::new(s).poll_write_vectored(cx, bufs),
                    Self::Sim(s) => Pin::new(s).poll_write_vectored(cx, bufs),
                }
            }

            fn is_write_vectored(&self) -> bool {
                match self {
                    Self::Tcp(s) => s.is_write_vectored(),
                    Self::Sim(s) => s.is_write_vectored(),
                }
            }

            fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
                match self.get_mut() {
                    Self::Tcp(s) => Pin::new(s).poll_flush(cx),
                    Self::Sim(s) => Pin::new(s).poll_flush(cx),
                }
            }

            fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
                match self.get_mut() {
                    Self::Tcp(s) => Pin::new(s).poll_shutdown(cx),
                    Self::Sim(s) => Pin::new(s).poll_shutdown(cx),
                }
            }
        }
    };
}

read_of!(Stream);
read_of!(ReadHalf);
write_of!(Stream);
write_of!(WriteHalf);

/// A listening socket.
#[derive(Debug)]
pub enum Listener {
    /// A real TCP listener.
    Tcp(TcpListener),
    /// A listener of the simulated network.
    Sim(SimListener),
}

/// How a real listening socket is set up; the simulated network has no such knobs and
/// ignores them.
#[derive(Debug, Clone, Copy)]
pub struct ListenOptions {
    /// Connections the kernel queues before they are accepted.
    pub backlog: u32,
    /// `SO_SNDBUF` of the listener, inherited by every connection it accepts (0: the
    /// kernel's default).
    pub send_buffer_bytes: u32,
}

impl Listener {
    /// Listens on `addr` (port 0: any free port).
    pub async fn bind(addr: SocketAddr) -> io::Result<Listener> {
        if let Some(s) = sim::current() {
            return s.net().bind(addr).map(Listener::Sim);
        }
        TcpListener::bind(addr).await.map(Listener::Tcp)
    }

    /// Listens on `addr` with `options` (`SO_REUSEADDR` set, as servers want).
    pub fn bind_with(addr: SocketAddr, options: ListenOptions) -> io::Result<Listener> {
        if let Some(s) = sim::current() {
            return s.net().bind(addr).map(Listener::Sim);
        }
        let socket = match addr {
            SocketAddr::V4(_) => tokio::net::TcpSocket::new_v4()?,
            SocketAddr::V6(_) => tokio::net::TcpSocket::new_v6()?,
        };
        socket.set_reuseaddr(true)?;
        if options.send_buffer_bytes > 0 {
            socket.set_send_buffer_size(options.send_buffer_bytes)?;
        }
        socket.bind(addr)?;
        socket.listen(options.backlog).map(Listener::Tcp)
    }

    /// The next connection and its peer's address.
    pub async fn accept(&mut self) -> io::Result<(Stream, SocketAddr)> {
        match self {
            Listener::Tcp(l) => l.accept().await.map(|(s, a)| (Stream::Tcp(s), a)),
            Listener::Sim(l) => l.accept().await.map(|(s, a)| (Stream::Sim(s), a)),
        }
    }

    /// The address the listener is bound to.
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        match self {
            Listener::Tcp(l) => l.local_addr(),
            Listener::Sim(l) => Ok(l.local_addr()),
        }
    }
}
