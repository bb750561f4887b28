//! Server-sent events: splits a byte stream into events and yields the
//! `data:` payload of each (several `data:` lines join with newlines).
//! Used for both OpenAI and Anthropic upstream streams.

use bytes::{Bytes, BytesMut};

/// One event: its `event:` name (if any) and its data.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SseEvent {
    pub event: Option<String>,
    pub data: Bytes,
}

/// Largest event (bytes up to its blank line) a stream may send.
pub const MAX_EVENT_BYTES: usize = 4 << 20;

/// Incremental parser: push bytes as they arrive, pop complete events.
/// Each byte is scanned once, however the stream is cut into chunks.
#[derive(Debug, Default)]
pub struct SseParser {
    buffer: BytesMut,
    /// Bytes at the front of `buffer` known to hold no blank line.
    scanned: usize,
}

impl SseParser {
    pub fn push(&mut self, bytes: &[u8]) {
        self.buffer.extend_from_slice(bytes);
    }

    /// Whether the event still arriving is already larger than
    /// [`MAX_EVENT_BYTES`] (the caller gives up on the stream).
    pub fn overflowing(&self) -> bool {
        self.buffer.len() > MAX_EVENT_BYTES
    }

    /// The next complete event, if one has fully arrived.
    pub fn next_event(&mut self) -> Option<SseEvent> {
        loop {
            // A separator may straddle the scanned edge: back up by two bytes.
            let from = self.scanned.saturating_sub(2);
            let Some((at, separator)) = find_blank_line(&self.buffer[from..]) else {
                self.scanned = self.buffer.len();
                return None;
            };
            let end = from + at;
            self.scanned = 0;
            let block = self.buffer.split_to(end + separator).freeze();
            let block = &block[..end];
            let mut event = None;
            let mut data: Vec<u8> = Vec::new();
            let mut has_data = false;
            for line in block.split(|&b| b == b'\n') {
                let line = line.strip_suffix(b"\r").unwrap_or(line);
                if let Some(value) = field(line, b"data") {
                    if has_data {
                        data.push(b'\n');
                    }
                    data.extend_from_slice(value);
                    has_data = true;
                } else if let Some(value) = field(line, b"event") {
                    event = Some(String::from_utf8_lossy(value).into_owned());
                }
            }
            if has_data || event.is_some() {
                return Some(SseEvent {
                    event,
                    data: Bytes::from(data),
                });
            }
            // A comment or keep-alive block: skip it.
        }
    }
}

fn field<'a>(line: &'a [u8], name: &[u8]) -> Option<&'a [u8]> {
    let rest = line.strip_prefix(name)?.strip_prefix(b":")?;
    Some(rest.strip_prefix(b" ").unwrap_or(rest))
}

/// Position and length of the first blank line (`\n\n` or `\r\n\r\n`).
fn find_blank_line(buffer: &[u8]) -> Option<(usize, usize)> {
    let mut i = 0;
    while i < buffer.len() {
        if buffer[i] == b'\n' {
            if buffer.get(i + 1) == Some(&b'\n') {
                return Some((i, 2));
            }
            if buffer.get(i + 1) == Some(&b'\r') && buffer.get(i + 2) == Some(&b'\n') {
                return Some((i, 3));
            }
        }
        i += 1;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits_events_across_arbitrary_chunk_boundaries() {
        let stream =
            b": keep-alive\n\nevent: message_start\ndata: {\"a\":1}\n\ndata: x\r\ndata: y\r\n\r\ndata: [DONE]\n\n";
        for cut in 0..stream.len() {
            let mut parser = SseParser::default();
            let mut events = Vec::new();
            for part in [&stream[..cut], &stream[cut..]] {
                parser.push(part);
                while let Some(e) = parser.next_event() {
                    events.push(e);
                }
            }
            assert_eq!(events.len(), 3, "cut at {cut}");
            assert_eq!(events[0].event.as_deref(), Some("message_start"));
            assert_eq!(&events[0].data[..], b"{\"a\":1}");
            assert_eq!(&events[1].data[..], b"x\ny");
            assert_eq!(&events[2].data[..], b"[DONE]");
        }
    }
}
