//! What the model reads of a command's output: the first [`HEAD_BYTES`] and the last
//! [`TAIL_BYTES`], cut on character boundaries, with a line saying how much was left
//! out between them.

use super::{HEAD_BYTES, TAIL_BYTES};

/// The command's output as kept: the first [`HEAD_BYTES`], the last [`TAIL_BYTES`],
/// and the count of everything.
#[derive(Debug, Default)]
pub(super) struct Output {
    head: Vec<u8>,
    /// The latest bytes after the head, trimmed to `TAIL_BYTES` once it holds twice
    /// that, so trimming costs amortised constant time per byte.
    tail: Vec<u8>,
    total: usize,
}

impl Output {
    pub(super) fn push(&mut self, bytes: &[u8]) {
        self.total += bytes.len();
        let room = HEAD_BYTES.saturating_sub(self.head.len()).min(bytes.len());
        let (head, rest) = bytes.split_at(room);
        self.head.extend_from_slice(head);
        self.tail.extend_from_slice(rest);
        if self.tail.len() > 2 * TAIL_BYTES {
            self.tail.drain(..self.tail.len() - TAIL_BYTES);
        }
    }

    /// The output as text (bytes that are not UTF-8 shown as U+FFFD), with a line in
    /// the middle saying how many bytes were left out, if any were.
    pub(super) fn render(&self) -> String {
        if self.total == 0 {
            return "(no output)".to_owned();
        }
        let tail = &self.tail[self.tail.len().saturating_sub(TAIL_BYTES)..];
        if self.head.len() + tail.len() == self.total {
            return String::from_utf8_lossy(&[self.head.as_slice(), tail].concat()).into_owned();
        }
        // Cut on character boundaries so the cut itself adds no U+FFFD.
        let head = &self.head[..complete_prefix(&self.head)];
        let tail = &tail[tail.iter().take(3).take_while(|&&b| is_continuation(b)).count()..];
        let omitted = self.total - head.len() - tail.len();
        format!(
            "{}\n… {omitted} bytes of output omitted …\n{}",
            String::from_utf8_lossy(head),
            String::from_utf8_lossy(tail)
        )
    }
}

pub(super) fn is_continuation(byte: u8) -> bool {
    byte & 0b1100_0000 == 0b1000_0000
}

/// The length of `bytes` without a UTF-8 character cut off at its end.
pub(super) fn complete_prefix(bytes: &[u8]) -> usize {
    match std::str::from_utf8(bytes) {
        // `error_len` is `None` only when the input ends mid-character.
        Err(err) if err.error_len().is_none() => err.valid_up_to(),
        _ => bytes.len(),
    }
}
