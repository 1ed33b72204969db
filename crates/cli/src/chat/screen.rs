//! The terminal side of `spool chat`: where output goes and how typed lines come in.
//!
//! At a terminal the chat edits the line being typed itself. The terminal's echo and
//! line buffering are turned off (Ctrl-C stays a signal, so stopping a run works as
//! before), keys arrive as bytes, and while a line is being typed it is drawn on the
//! row below the output. Output is written above it: the input row is erased, the
//! cursor goes back to where the output stopped (one row up, at its column, while the
//! output's last line is open), the text is written, and the input row is drawn again
//! below. So a key typed while an answer streams never lands inside the answer, and
//! the answer never splits what is being typed. With nothing typed there is no input
//! row, and output is written as it comes. The moves are relative (one row up), so
//! scrolling does not upset them; the column is counted in terminal cells (a wide
//! character takes two), and text from outside loses its control characters, so
//! nothing the model writes can move the cursor.
//!
//! Elsewhere (a pipe, a file, `--json`) output is written as it comes, without
//! styles, and lines are read whole.

use nix::sys::termios::{self, LocalFlags, SetArg, SpecialCharacterIndices, Termios};
use std::io::{IsTerminal, Write};
use std::os::fd::AsRawFd;
use tokio::sync::mpsc;
use unicode_width::UnicodeWidthChar;

/// What the line being typed starts with.
const PROMPT: &str = "› ";

/// How a piece of output looks at a terminal.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Style {
    Plain,
    /// A command's output under its card.
    Dim,
    /// A diff's lines.
    Added,
    Removed,
    Hunk,
}

impl Style {
    /// The SGR sequence that starts the style (`None` for plain text).
    fn start(self) -> Option<&'static str> {
        match self {
            Style::Plain => None,
            Style::Dim => Some("\x1b[2m"),
            Style::Added => Some("\x1b[32m"),
            Style::Removed => Some("\x1b[31m"),
            Style::Hunk => Some("\x1b[36m"),
        }
    }
}

/// What the reading thread hands the chat.
pub enum Typed {
    /// A whole line (standard input is not a terminal).
    Line(String),
    /// Bytes typed at the terminal, for the editor.
    Keys(Vec<u8>),
}

/// What keys typed at the terminal amount to.
pub enum Entered {
    Line(String),
    /// Ctrl-D on an empty line: the end of input.
    End,
}

/// Standard output, and at a terminal the line editor below it.
pub struct Screen {
    editor: Option<(Line, RawMode)>,
}

/// The terminal's settings before the chat changed them, given back on drop.
struct RawMode(Termios);

/// The line being typed, and where the output stopped.
#[derive(Default)]
struct Line {
    input: String,
    /// Cells written on the output's last row (the terminal's width when it is full
    /// and the next character wraps).
    column: usize,
    /// The input row is on the screen.
    shown: bool,
    /// The output's last row was full when the input row was drawn: the next output
    /// starts on the input row, where a newline first would add an empty row.
    wrapped: bool,
    /// The start of a key the last read cut (UTF-8 or an escape sequence).
    pending: Vec<u8>,
}

impl Screen {
    /// The line editor when standard input and output are a terminal and `plain` is
    /// false; otherwise plain output and whole lines.
    pub fn new(plain: bool) -> (Screen, mpsc::UnboundedReceiver<Typed>) {
        let terminal = !plain && std::io::stdin().is_terminal() && std::io::stdout().is_terminal();
        let editor = terminal.then(RawMode::start).flatten().map(|raw| (Line::default(), raw));
        let keys = editor.is_some();
        (Screen { editor }, read_input(keys))
    }

    /// Writes `text` above the input line.
    pub fn write(&mut self, text: &str, style: Style) {
        match &mut self.editor {
            Some((line, _)) => put(&line.output(text, style, columns())),
            None => put(text),
        }
    }

    /// Applies typed keys to the input line; what they entered, in order.
    pub fn keys(&mut self, bytes: &[u8]) -> Vec<Entered> {
        let Some((line, _)) = &mut self.editor else { return Vec::new() };
        let entered = line.keys(bytes);
        let mut out = String::new();
        if line.input.is_empty() {
            line.hide(&mut out, columns());
        } else {
            line.show(&mut out, columns());
        }
        put(&out);
        entered
    }

    /// Clears the input line and gives the terminal its settings back.
    pub fn close(&mut self) {
        if self.editor.take().is_some() {
            put("\r\x1b[K");
        }
    }
}

impl Drop for Screen {
    fn drop(&mut self) {
        self.close();
    }
}

impl RawMode {
    /// Turns off the terminal's echo and line buffering; `None` when it cannot.
    fn start() -> Option<RawMode> {
        let stdin = std::io::stdin();
        let saved = termios::tcgetattr(&stdin).ok()?;
        let mut raw = saved.clone();
        raw.local_flags.remove(LocalFlags::ICANON | LocalFlags::ECHO);
        raw.control_chars[SpecialCharacterIndices::VMIN as usize] = 1;
        raw.control_chars[SpecialCharacterIndices::VTIME as usize] = 0;
        termios::tcsetattr(&stdin, SetArg::TCSANOW, &raw).ok()?;
        Some(RawMode(saved))
    }
}

impl Drop for RawMode {
    fn drop(&mut self) {
        // Nothing more to do if the terminal is gone.
        let _ = termios::tcsetattr(std::io::stdin(), SetArg::TCSANOW, &self.0);
    }
}

impl Line {
    /// The bytes that put `text` above the input row and draw the row again.
    fn output(&mut self, text: &str, style: Style, columns: usize) -> String {
        let mut out = String::new();
        self.hide(&mut out, columns);
        if let Some(start) = style.start() {
            out.push_str(start);
        }
        for c in text.chars() {
            let wrapped = std::mem::take(&mut self.wrapped);
            match c {
                '\n' if wrapped => {}
                '\n' => {
                    out.push('\n');
                    self.column = 0;
                }
                '\t' => {
                    for _ in 0..8 - self.column % 8 {
                        self.cell(&mut out, ' ', 1, columns);
                    }
                }
                c if c.is_control() => {}
                c => match c.width() {
                    Some(width) if width > 0 => self.cell(&mut out, c, width, columns),
                    // A combining mark joins the cell before it.
                    _ => out.push(c),
                },
            }
        }
        if style.start().is_some() {
            out.push_str("\x1b[0m");
        }
        self.show(&mut out, columns);
        out
    }

    /// Erases the input row and puts the cursor back where the output stopped.
    fn hide(&mut self, out: &mut String, columns: usize) {
        if !std::mem::take(&mut self.shown) {
            return;
        }
        out.push_str("\r\x1b[K");
        if self.column >= columns {
            // The cursor is already where the output goes on: the input row's start.
            self.column = 0;
            self.wrapped = true;
        } else if self.column > 0 {
            out.push_str(&format!("\x1b[A\x1b[{}G", self.column + 1));
        }
    }

    /// Draws the input row below the output, when something is typed.
    fn show(&mut self, out: &mut String, columns: usize) {
        if self.input.is_empty() {
            return;
        }
        if !self.shown && self.column > 0 {
            out.push('\n');
        }
        self.shown = true;
        out.push_str(&self.input_row(columns));
    }

    fn cell(&mut self, out: &mut String, c: char, width: usize, columns: usize) {
        if self.column + width > columns {
            // The terminal wraps before it: a wide character never straddles the edge.
            self.column = 0;
        }
        out.push(c);
        self.column += width;
    }

    /// The input row, drawn from its start: the prompt and as much of the end of the
    /// line as fits (never the last cell, so the row never wraps).
    fn input_row(&self, columns: usize) -> String {
        let room = columns.saturating_sub(PROMPT.chars().count() + 1).max(2);
        let width: usize = self.input.chars().map(|c| c.width().unwrap_or(0)).sum();
        let shown = if width <= room {
            self.input.clone()
        } else {
            let mut used = 1;
            let mut tail: Vec<char> = Vec::new();
            for c in self.input.chars().rev() {
                used += c.width().unwrap_or(0);
                if used > room {
                    break;
                }
                tail.push(c);
            }
            std::iter::once('…').chain(tail.into_iter().rev()).collect()
        };
        format!("\r\x1b[K{PROMPT}{shown}")
    }

    fn keys(&mut self, keys: &[u8]) -> Vec<Entered> {
        let mut entered = Vec::new();
        let mut bytes: Vec<u8> = std::mem::take(&mut self.pending);
        bytes.extend_from_slice(keys);
        let mut at = 0;
        while at < bytes.len() {
            let used = match bytes[at] {
                b'\r' | b'\n' => {
                    entered.push(Entered::Line(std::mem::take(&mut self.input)));
                    1
                }
                0x7f | 0x08 => {
                    self.input.pop();
                    1
                }
                // Ctrl-U clears the line, Ctrl-W the word before the cursor.
                0x15 => {
                    self.input.clear();
                    1
                }
                0x17 => {
                    let kept = self.input.trim_end().rfind(' ').map_or(0, |i| i + 1);
                    self.input.truncate(kept);
                    1
                }
                0x04 if self.input.is_empty() => {
                    entered.push(Entered::End);
                    1
                }
                b'\t' => {
                    self.input.push(' ');
                    1
                }
                0x1b => match escape_len(&bytes[at..]) {
                    Some(len) => len,
                    None => break,
                },
                b if b < 0x20 => 1,
                b => {
                    let len = utf8_len(b);
                    let Some(raw) = bytes.get(at..at + len) else { break };
                    if let Ok(text) = std::str::from_utf8(raw) {
                        self.input.push_str(text);
                    }
                    len
                }
            };
            at += used;
        }
        self.pending = bytes.split_off(at);
        entered
    }
}

/// The length of the escape sequence `bytes` starts with (a key such as an arrow,
/// which the editor ignores), or `None` when the read cut it. A lone Esc is one byte.
fn escape_len(bytes: &[u8]) -> Option<usize> {
    match bytes.get(1) {
        None => Some(1),
        Some(b'[') => bytes.iter().skip(2).position(|b| (0x40..=0x7e).contains(b)).map(|i| i + 3),
        Some(b'O') => bytes.get(2).map(|_| 3),
        Some(_) => Some(2),
    }
}

/// The length of the UTF-8 sequence that starts with `first` (1 for a stray byte).
fn utf8_len(first: u8) -> usize {
    match first {
        0xc0..=0xdf => 2,
        0xe0..=0xef => 3,
        0xf0..=0xf7 => 4,
        _ => 1,
    }
}

/// The terminal's width in cells (80 when it does not say).
fn columns() -> usize {
    nix::ioctl_read_bad!(window_size, nix::libc::TIOCGWINSZ, nix::libc::winsize);
    let mut size = nix::libc::winsize { ws_row: 0, ws_col: 0, ws_xpixel: 0, ws_ypixel: 0 };
    // SAFETY: TIOCGWINSZ writes one `winsize` into the struct it is given, which
    // outlives the call; a descriptor that is not a terminal is an error, not a write.
    let asked = unsafe { window_size(std::io::stdout().as_raw_fd(), &mut size) };
    match asked {
        Ok(_) if size.ws_col > 0 => usize::from(size.ws_col),
        _ => 80,
    }
}

fn put(text: &str) {
    if text.is_empty() {
        return;
    }
    let mut out = std::io::stdout().lock();
    // A closed terminal ends the chat at the next read; nothing to do here.
    let _ = out.write_all(text.as_bytes()).and_then(|()| out.flush());
}

/// Standard input, read on a thread of its own (the read blocks): whole lines, or at
/// a terminal the bytes of each read. The channel closes at end of input.
fn read_input(keys: bool) -> mpsc::UnboundedReceiver<Typed> {
    let (tx, rx) = mpsc::unbounded_channel();
    std::thread::spawn(move || {
        if keys {
            let mut buffer = [0u8; 4096];
            let mut stdin = std::io::stdin().lock();
            loop {
                match std::io::Read::read(&mut stdin, &mut buffer) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => {
                        if tx.send(Typed::Keys(buffer[..n].to_vec())).is_err() {
                            break;
                        }
                    }
                }
            }
        } else {
            for line in std::io::stdin().lines() {
                let Ok(line) = line else { break };
                if tx.send(Typed::Line(line)).is_err() {
                    break;
                }
            }
        }
    });
    rx
}

#[cfg(test)]
mod tests {
    use super::*;

    fn typed(line: &mut Line, keys: &[u8]) -> Vec<String> {
        line.keys(keys)
            .into_iter()
            .map(|e| match e {
                Entered::Line(text) => text,
                Entered::End => "<end>".to_owned(),
            })
            .collect()
    }

    #[test]
    fn keys_edit_the_line_and_enter_sends_it() {
        let mut line = Line::default();
        assert!(typed(&mut line, b"git statux\x7fs").is_empty());
        assert_eq!(line.input, "git status");
        // An arrow key is ignored, whole, even when a read cuts it.
        assert!(typed(&mut line, b" --sh\x1b[").is_empty());
        assert_eq!(typed(&mut line, b"Dort\r"), ["git status --short"]);
        // A character cut by a read waits for its other bytes.
        let e = "é".as_bytes();
        typed(&mut line, &e[..1]);
        typed(&mut line, &e[1..]);
        assert_eq!(line.input, "é");
        typed(&mut line, b" two words\x17");
        assert_eq!(line.input, "é two ");
        typed(&mut line, b"\x15");
        assert_eq!(typed(&mut line, b"\x04"), ["<end>"], "Ctrl-D on an empty line ends the input");
    }

    #[test]
    fn output_goes_back_to_where_it_stopped_above_the_input_row() {
        let mut line = Line::default();
        assert_eq!(line.output("w0", Style::Plain, 20), "w0", "nothing typed: no input row");
        line.output("\n", Style::Plain, 20);
        line.keys(b"hi");
        let mut shown = String::new();
        line.show(&mut shown, 20);
        assert_eq!(shown, "\r\x1b[K› hi");
        let first = line.output("w1 w2", Style::Plain, 20);
        assert_eq!(first, "\r\x1b[Kw1 w2\n\r\x1b[K› hi");
        // One row up, to the column after `w2`, then the input row again.
        let next = line.output(" w3\n", Style::Plain, 20);
        assert_eq!(next, "\r\x1b[K\x1b[A\x1b[6G w3\n\r\x1b[K› hi");
        // A row filled to the edge continues on the next; a control character from
        // outside is dropped (an escape cannot move the cursor).
        line.output("0123456789012345678\x1b9", Style::Plain, 20);
        assert_eq!(line.column, 20);
        assert_eq!(line.output("\nnext", Style::Plain, 20), "\r\x1b[Knext\n\r\x1b[K› hi");
        // A wide character that does not fit wraps whole.
        line.output("\n0123456789012345678界", Style::Plain, 20);
        assert_eq!(line.column, 2);
        // Once the line is sent, the input row goes and the output goes on after it.
        line.keys(b"\r");
        let mut hidden = String::new();
        line.hide(&mut hidden, 20);
        assert_eq!(hidden, "\r\x1b[K\x1b[A\x1b[3G");
        assert_eq!(line.output(" more", Style::Plain, 20), " more");
    }

    #[test]
    fn a_long_input_line_shows_its_end() {
        let mut line = Line::default();
        line.keys(b"abcdefghijklmnopqrstuvwxyz");
        assert_eq!(line.input_row(12), "\r\x1b[K› …stuvwxyz");
    }
}
