//! A TCP proxy a test puts between one process and a service it depends on
//! (PostgreSQL, Redis), to play a network partition from outside: [`Proxy::cut`] closes
//! every connection through it and refuses new ones, [`Proxy::stall`] keeps them open
//! but lets nothing through either way (a partition that drops packets: what was sent
//! meanwhile arrives once it heals, late), [`Proxy::delay`] holds every chunk for a
//! while, and [`Proxy::heal`] lets everything through again.
//!
//! Plain tokio sockets and one `watch` channel for the mode, which every connection's
//! two pumps follow: a pump reads a chunk, waits while the mode says so, and writes
//! it on, so a chunk read before a stall is delivered after the heal, in order. The
//! proxy runs on a thread and runtime of its own: a test that blocks its own runtime
//! (waiting for a `spool serve` it started to print its address) must not stall the
//! proxy that process connects through.

use std::net::SocketAddr;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

/// What the proxy does with the connections through it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// Everything goes through.
    Open,
    /// Every chunk is held this long first.
    Delay(Duration),
    /// Connections stay open; nothing goes through until the mode changes.
    Stall,
    /// Every connection is closed, and new ones are closed as they come.
    Cut,
}

/// A proxy on a loopback port of its own, forwarding to `upstream`; it stops when dropped.
pub struct Proxy {
    addr: SocketAddr,
    mode: watch::Sender<Mode>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
}

impl Proxy {
    /// Starts a proxy to `upstream`, open.
    pub fn start(upstream: SocketAddr) -> Proxy {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind the proxy");
        listener.set_nonblocking(true).expect("a non-blocking listener");
        let addr = listener.local_addr().expect("the proxy's address");
        let (mode, _) = watch::channel(Mode::Open);
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let follow = mode.clone();
        std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
            runtime.block_on(async move {
                let listener = TcpListener::from_std(listener).expect("a tokio listener");
                let accepting = async {
                    while let Ok((client, _)) = listener.accept().await {
                        if *follow.borrow() == Mode::Cut {
                            continue;
                        }
                        tokio::spawn(connect(client, upstream, follow.subscribe()));
                    }
                };
                // Until dropped; the runtime's end then ends every connection.
                tokio::select! {
                    () = accepting => {}
                    _ = stopped => {}
                }
            });
        });
        Proxy { addr, mode, stop: Some(stop) }
    }

    /// The proxy's address: give it to the process in place of the service's.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Closes every connection and every new one until [`heal`](Self::heal).
    pub fn cut(&self) {
        self.mode.send_replace(Mode::Cut);
    }

    /// Lets nothing through, either way, until the mode changes; what was sent
    /// meanwhile goes on then.
    pub fn stall(&self) {
        self.mode.send_replace(Mode::Stall);
    }

    /// Holds every chunk `by` before passing it on.
    pub fn delay(&self, by: Duration) {
        self.mode.send_replace(Mode::Delay(by));
    }

    /// Lets everything through again.
    pub fn heal(&self) {
        self.mode.send_replace(Mode::Open);
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.mode.send_replace(Mode::Cut);
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

/// One connection: to the upstream, then a pump each way until either side ends or the
/// proxy cuts it; dropping both sockets then closes both ends.
async fn connect(client: TcpStream, upstream: SocketAddr, mode: watch::Receiver<Mode>) {
    let Ok(server) = TcpStream::connect(upstream).await else { return };
    let (client_read, client_write) = client.into_split();
    let (server_read, server_write) = server.into_split();
    tokio::select! {
        () = pump(client_read, server_write, mode.clone()) => {}
        () = pump(server_read, client_write, mode) => {}
    }
}

/// Copies chunks from `from` to `to` as the mode allows.
async fn pump(mut from: OwnedReadHalf, mut to: OwnedWriteHalf, mut mode: watch::Receiver<Mode>) {
    let mut buf = vec![0u8; 16 * 1024];
    let mut cut = mode.clone();
    loop {
        let n = tokio::select! {
            read = from.read(&mut buf) => match read {
                Ok(0) | Err(_) => return,
                Ok(n) => n,
            },
            _ = cut.wait_for(|m| *m == Mode::Cut) => return,
        };
        loop {
            let now = *mode.borrow_and_update();
            match now {
                Mode::Open => break,
                Mode::Cut => return,
                Mode::Delay(by) => {
                    tokio::select! {
                        () = tokio::time::sleep(by) => break,
                        _ = cut.wait_for(|m| *m == Mode::Cut) => return,
                    }
                }
                Mode::Stall => {
                    if mode.changed().await.is_err() {
                        return;
                    }
                }
            }
        }
        if to.write_all(&buf[..n]).await.is_err() {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An echo server on a loopback port.
    async fn echo() -> SocketAddr {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        tokio::spawn(async move {
            while let Ok((mut socket, _)) = listener.accept().await {
                tokio::spawn(async move {
                    let (mut read, mut write) = socket.split();
                    let _ = tokio::io::copy(&mut read, &mut write).await;
                });
            }
        });
        addr
    }

    async fn round_trip(socket: &mut TcpStream, text: &[u8]) -> Vec<u8> {
        socket.write_all(text).await.expect("write");
        let mut back = vec![0u8; text.len()];
        socket.read_exact(&mut back).await.expect("read");
        back
    }

    #[tokio::test]
    async fn a_stall_holds_bytes_until_the_heal_and_a_cut_closes_connections() {
        let proxy = Proxy::start(echo().await);
        let mut socket = TcpStream::connect(proxy.addr()).await.expect("connect");
        assert_eq!(round_trip(&mut socket, b"open").await, b"open");

        proxy.stall();
        socket.write_all(b"held").await.expect("write");
        let mut back = [0u8; 4];
        let early = tokio::time::timeout(Duration::from_millis(200), socket.read_exact(&mut back)).await;
        assert!(early.is_err(), "nothing passes a stall");
        proxy.heal();
        socket.read_exact(&mut back).await.expect("read after the heal");
        assert_eq!(&back, b"held", "what was sent during the stall arrives after it");

        proxy.delay(Duration::from_millis(20));
        assert_eq!(round_trip(&mut socket, b"slow").await, b"slow");

        proxy.cut();
        let mut rest = Vec::new();
        let closed = tokio::time::timeout(Duration::from_secs(5), socket.read_to_end(&mut rest)).await;
        assert!(matches!(closed, Ok(Ok(0)) | Ok(Err(_))), "a cut closes the connection: {closed:?}");
        let mut again = TcpStream::connect(proxy.addr()).await.expect("the port still accepts");
        let refused = tokio::time::timeout(Duration::from_secs(5), again.read(&mut back)).await;
        assert!(matches!(refused, Ok(Ok(0)) | Ok(Err(_))), "and closes what comes while cut: {refused:?}");

        proxy.heal();
        let mut healed = TcpStream::connect(proxy.addr()).await.expect("connect");
        assert_eq!(round_trip(&mut healed, b"back").await, b"back");
    }
}
