//! One subscriber of `spool-bench idle`: its connection from a loopback source address
//! of its own, the request it writes, and the reads that look for two byte patterns
//! and drop everything else (see the module above for why the client is this lean).

use super::args::Transport;
use anyhow::{Context, Result, bail};
use memchr::memmem;
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::os::fd::AsRawFd;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};
use tokio::sync::mpsc;

/// The first frame of a stream (a snapshot has an SSE id), inside an HTTP chunk or a
/// WebSocket message (`"<id>\nid: …"`).
const FIRST_FRAME: &[u8] = b"\nid: ";
/// A frame of the hot session's answer.
const DELTA: &[u8] = b"text_delta";
/// The answer's end.
const SETTLED: &[u8] = b"agent_settled";

/// Subscriber `i`'s loopback source address: 127.1.0.1, 127.1.0.2, …, `per_source`
/// connections each; 250 per third octet, never a .0 host.
pub(crate) fn source_address(i: usize, per_source: u64) -> Ipv4Addr {
    let k = i / per_source as usize;
    Ipv4Addr::new(127, 1 + (k / 62_500) as u8, ((k / 250) % 250) as u8, (k % 250) as u8 + 1)
}
pub(super) fn route(transport: Transport) -> &'static str {
    match transport {
        Transport::Sse => "GET /api/sessions/:id/events",
        Transport::Ws => "GET /api/streams, one session stream per socket",
    }
}

/// The bytes a subscriber sends: the request, and for a WebSocket its `open` message
/// right behind the handshake (the server keeps what it read past the request for the
/// upgraded socket).
pub(super) fn request(transport: Transport, server: SocketAddr, session: &str) -> Vec<u8> {
    match transport {
        Transport::Sse => format!(
            "GET /api/sessions/{session}/events HTTP/1.1\r\nHost: {server}\r\nAccept: text/event-stream\r\n\r\n"
        )
        .into_bytes(),
        Transport::Ws => {
            let mut out = format!(
                "GET /api/streams HTTP/1.1\r\nHost: {server}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
                 Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"
            )
            .into_bytes();
            let open = serde_json::json!({"op": "open", "id": "s", "session": session}).to_string();
            out.extend(masked_text_frame(open.as_bytes()));
            out
        }
    }
}

/// One client-to-server WebSocket text frame (RFC 6455 §5.2: FIN, opcode 1, masked, as
/// a client must send). The mask is fixed: it guards proxies, not this benchmark.
fn masked_text_frame(payload: &[u8]) -> Vec<u8> {
    const MASK: [u8; 4] = [0x37, 0xfa, 0x21, 0x3d];
    let mut frame = vec![0x81];
    match payload.len() {
        len @ 0..=125 => frame.push(0x80 | len as u8),
        len => {
            frame.push(0x80 | 126);
            frame.extend((len as u16).to_be_bytes());
        }
    }
    frame.extend(MASK);
    frame.extend(payload.iter().enumerate().map(|(i, b)| b ^ MASK[i % 4]));
    frame
}

/// One subscriber's task.
pub(super) struct Sub {
    pub(super) server: SocketAddr,
    pub(super) source: Ipv4Addr,
    pub(super) request: Arc<[u8]>,
    /// Told once: the first frame arrived, or why not.
    pub(super) ready: mpsc::UnboundedSender<Result<(), String>>,
    pub(super) role: Role,
    /// A place among the connections being opened, given back with the first frame.
    pub(super) permit: tokio::sync::OwnedSemaphorePermit,
}

/// What a subscriber does once its stream is open.
pub(super) enum Role {
    /// Reads heartbeats and drops them.
    Idle,
    /// On the hot session: counts the answer's deltas, noting every `every`th one's
    /// receive instant, and reports at `agent_settled`. One of them (the witness) also
    /// counts the bytes it has read.
    Hot { report: mpsc::UnboundedSender<HotReport>, every: u64, witness: Option<Arc<AtomicU64>> },
    /// On the hot session: reads nothing until told to drain, then reads to the end of
    /// the stream (or 2 s of silence) and reports how many bytes there were.
    Stuck { drain: tokio::sync::oneshot::Receiver<()>, report: tokio::sync::oneshot::Sender<StuckReport> },
}

/// What a hot subscriber saw of the answer.
pub(super) struct HotReport {
    pub(super) first: Option<Instant>,
    /// `(n, received)`: the nth delta (from 1) for every multiple of `every`.
    pub(super) marks: Vec<(u64, Instant)>,
    pub(super) deltas: u64,
    pub(super) settled: bool,
}

pub(super) struct StuckReport {
    /// Bytes read after its first frame, all of them read only when told to drain.
    pub(super) bytes: u64,
    /// The server closed the stream (it was cut), rather than the reads going silent.
    pub(super) closed: bool,
}

impl Sub {
    pub(super) async fn run(self) {
        let Sub { server, source, request, ready, role, permit } = self;
        let mut reader = Reader::new();
        let small_buffer = matches!(role, Role::Stuck { .. });
        let opened = async {
            let mut tcp = connect(server, source, small_buffer).await?;
            tcp.write_all(&request).await?;
            if !reader.until(&mut tcp, FIRST_FRAME).await? {
                bail!("the server closed the stream before its first frame");
            }
            Ok(tcp)
        };
        let mut tcp = match opened.await {
            Ok(tcp) => tcp,
            Err(e) => {
                let _ = ready.send(Err(format!("from {source}: {e:#}")));
                return;
            }
        };
        let _ = ready.send(Ok(()));
        drop((ready, permit, request));
        match role {
            Role::Idle => {}
            Role::Hot { report, every, witness } => {
                let hot = reader.answer(&mut tcp, every, witness.as_deref()).await;
                let _ = report.send(hot);
            }
            Role::Stuck { drain, report } => {
                let _ = drain.await;
                let mut stuck = StuckReport { bytes: 0, closed: false };
                loop {
                    match tokio::time::timeout(Duration::from_secs(2), tcp.read(&mut reader.buf)).await {
                        Ok(Ok(0)) | Ok(Err(_)) => {
                            stuck.closed = true;
                            break;
                        }
                        Ok(Ok(read)) => stuck.bytes += read as u64,
                        Err(_) => break,
                    }
                }
                let _ = report.send(stuck);
                return;
            }
        }
        // Idle from here: heartbeats (and the hot session's answer) read and dropped.
        while let Ok(1..) = tcp.read(&mut reader.buf).await {}
    }
}

/// A socket bound to `source` and connected to `server`; with `small_buffer`, a 4 KiB
/// receive buffer (set before connecting, so the window never grows past it).
pub(crate) async fn connect(server: SocketAddr, source: Ipv4Addr, small_buffer: bool) -> Result<TcpStream> {
    let socket = TcpSocket::new_v4()?;
    if small_buffer {
        socket.set_recv_buffer_size(4096)?;
    }
    let one: libc::c_int = 1;
    // SAFETY: setsockopt reads `one` (a c_int, its size given) and the socket is ours.
    let set = unsafe {
        libc::setsockopt(
            socket.as_raw_fd(),
            libc::IPPROTO_IP,
            libc::IP_BIND_ADDRESS_NO_PORT,
            (&raw const one).cast(),
            size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if set != 0 {
        bail!("IP_BIND_ADDRESS_NO_PORT: {}", std::io::Error::last_os_error());
    }
    socket.bind(SocketAddr::V4(SocketAddrV4::new(source, 0))).with_context(|| format!("binding {source}"))?;
    socket.connect(server).await.with_context(|| format!("connecting from {source}"))
}

/// Reads a socket looking for a byte pattern; everything else is dropped.
struct Reader {
    buf: [u8; 1024],
    /// Bytes at the front of `buf` kept from the previous read (a pattern's beginning).
    kept: usize,
    /// Whether the response's status line has been checked.
    checked: bool,
}

impl Reader {
    fn new() -> Self {
        Self { buf: [0; 1024], kept: 0, checked: false }
    }

    /// Reads until `pattern` has arrived (true) or the socket closed (false). The first
    /// read must start with a 200 or 101 status line; any other answer is the error.
    async fn until(&mut self, tcp: &mut TcpStream, pattern: &[u8]) -> Result<bool> {
        loop {
            let read = tcp.read(&mut self.buf[self.kept..]).await?;
            if read == 0 {
                return Ok(false);
            }
            let end = self.kept + read;
            if !self.checked {
                self.checked = true;
                let head = &self.buf[..end];
                if !head.starts_with(b"HTTP/1.1 200") && !head.starts_with(b"HTTP/1.1 101") {
                    let line = head.split(|&b| b == b'\r').next().unwrap_or_default();
                    bail!("the server answered {:?}", String::from_utf8_lossy(line));
                }
            }
            if memmem::find(&self.buf[..end], pattern).is_some() {
                self.kept = 0;
                return Ok(true);
            }
            let keep = (pattern.len() - 1).min(end);
            self.buf.copy_within(end - keep..end, 0);
            self.kept = keep;
        }
    }
}

impl Reader {
    /// Reads the hot session's answer until `agent_settled` (or the end of the stream):
    /// counts `text_delta`s and notes when every `every`th arrived. A pattern that ends
    /// in the bytes kept from the previous read was counted there, and is not again.
    async fn answer(&mut self, tcp: &mut TcpStream, every: u64, witness: Option<&AtomicU64>) -> HotReport {
        let mut hot = HotReport { first: None, marks: Vec::new(), deltas: 0, settled: false };
        let keep_len = DELTA.len().max(SETTLED.len()) - 1;
        loop {
            let read = match tcp.read(&mut self.buf[self.kept..]).await {
                Ok(0) | Err(_) => return hot,
                Ok(read) => read,
            };
            let at = Instant::now();
            if let Some(witness) = witness {
                witness.fetch_add(read as u64, Relaxed);
            }
            let (kept, end) = (self.kept, self.kept + read);
            let bytes = &self.buf[..end];
            let settled = memmem::find_iter(bytes, SETTLED).find(|p| p + SETTLED.len() > kept);
            let new = memmem::find_iter(bytes, DELTA)
                .filter(|&p| p + DELTA.len() > kept && settled.is_none_or(|end| p < end))
                .count();
            for _ in 0..new {
                hot.deltas += 1;
                hot.first.get_or_insert(at);
                if hot.deltas.is_multiple_of(every) {
                    hot.marks.push((hot.deltas, at));
                }
            }
            if settled.is_some() {
                hot.settled = true;
                self.kept = 0;
                return hot;
            }
            let keep = keep_len.min(end);
            self.buf.copy_within(end - keep..end, 0);
            self.kept = keep;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_client_frame_is_masked_and_unmasks_to_its_payload() {
        let payload = br#"{"op":"open","id":"s","session":"ses_1"}"#;
        let frame = masked_text_frame(payload);
        assert_eq!(frame[0], 0x81, "FIN and text");
        assert_eq!(frame[1], 0x80 | payload.len() as u8, "masked, short length");
        let mask = &frame[2..6];
        let unmasked: Vec<u8> = frame[6..].iter().enumerate().map(|(i, b)| b ^ mask[i % 4]).collect();
        assert_eq!(unmasked, payload);
        let long = masked_text_frame(&[b'x'; 300]);
        assert_eq!((long[1], u16::from_be_bytes([long[2], long[3]])), (0x80 | 126, 300));
    }

    /// Patterns split across reads are counted once, and the answer ends at
    /// `agent_settled` even when it straddles two reads.
    #[tokio::test]
    async fn a_hot_reader_counts_each_delta_once_across_reads() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let writer = tokio::spawn(async move {
            let (mut socket, _) = listener.accept().await.unwrap();
            socket.set_nodelay(true).unwrap();
            let pieces: [&[u8]; 5] = [
                b"data: {\"type\":\"text_delta\"}\n\ndata: {\"type\":\"text_del",
                b"ta\"}\n\ndata: {\"type\":\"text_delta\"}\n\n",
                b"data: {\"type\":\"text_delta\"}\n\ndata: {\"type\":\"agent_set",
                b"tled\"}\n\n",
                b"data: {\"type\":\"text_delta\"}\n\n",
            ];
            for piece in pieces {
                socket.write_all(piece).await.unwrap();
                // Likely each piece its own read; the counts are the same either way.
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        });
        let mut tcp = TcpStream::connect(addr).await.unwrap();
        let witness = AtomicU64::new(0);
        let hot = Reader::new().answer(&mut tcp, 2, Some(&witness)).await;
        assert!(hot.settled);
        assert_eq!(hot.deltas, 4, "the delta after agent_settled is not the answer's");
        assert_eq!(hot.marks.iter().map(|m| m.0).collect::<Vec<_>>(), [2, 4]);
        assert!(witness.load(Relaxed) > 0);
        writer.await.unwrap();
    }
}
