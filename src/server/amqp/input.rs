//! Turning an AMQP 0-9-1 connection's bytes into [`AmqpEvent`]s on the I/O thread: the
//! protocol header (§4.2.2), then frames, each checked whole before anything is allocated
//! ([`crate::amqp::check`]: type, size, frame end); methods are decoded, and a
//! content-carrying method (`basic.publish`) is held until its content header and body
//! frames have arrived (AMQP 0-9-1 §4.2.6). The events of one parse pass go to the
//! mailbox together (one lock, one wake-up): an AMQP publish is an event per message.
//!
//! The frames of one content follow their method on the same channel with nothing else
//! on that channel in between; other channels may interleave (§4.2.6). A body larger than
//! the configured maximum is not buffered: its frames are counted and dropped, and the
//! channel is closed with 406 as RabbitMQ does.

use crate::amqp::{
    self, parse_content_header, AmqpMethod, FrameType, RawFrameHeader, BASIC_CLASS_ID,
    PROTOCOL_HEADER,
};
use crate::broker::channel::hasher::BuildChannelHasher;
use crate::error::ReplyCode;
use crate::server::amqp::event::{AmqpEvent, Content};
use crate::server::conn::Conn;
use crate::server::event::{mailbox_cost, Event};
use crate::server::input::{refuse_header, tls_hint, violation, Consumed, ProtocolInput, Refused};
use crate::server::publish_gate::PublishGate;
use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// A protocol violation: the connection is closed with this code and text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    /// Reply code (501, 502, 503, 504, 505, 540).
    pub code: ReplyCode,
    /// Reason, for `connection.close` and the log.
    pub text: String,
    /// Class and method ids of the offending method, 0 when none.
    pub class_method: (u16, u16),
}

impl Violation {
    fn new(code: ReplyCode, text: impl Into<String>) -> Violation {
        Violation {
            code,
            text: text.into(),
            class_method: (0, 0),
        }
    }
}

/// A content being received on one channel.
#[derive(Debug)]
enum Pending {
    /// The method arrived; its content header is next.
    AwaitHeader(AmqpMethod),
    /// Header arrived; body frames until `size` bytes.
    Body {
        method: AmqpMethod,
        content: Box<Content>,
        size: u64,
    },
    /// Too large: body frames are counted and dropped.
    Discard { left: u64 },
}

/// Per-connection AMQP input state.
#[derive(Debug)]
pub struct AmqpInput {
    /// Events of the parse pass under way, pushed together (kept empty between passes;
    /// its capacity reused up to [`STAGED_EVENTS_KEEP`]).
    staged: Vec<(Event, usize)>,
    pending: HashMap<u16, Pending, BuildChannelHasher>,
    /// Largest body accepted, in bytes (`--max-message-bytes`).
    body_bytes_max: usize,
    /// Body bytes held for contents still arriving, over every channel.
    buffered: usize,
}

/// Capacity, in events, of a connection's staging vector kept between parse passes.
const STAGED_EVENTS_KEEP: usize = 1024;

/// Body bytes a connection may hold for contents still arriving on all its channels
/// together, in bytes, at least (one largest message plus [`BODY_RESERVE_BYTES_MAX`] is
/// always allowed). Interleaving partial bodies on many channels cannot grow past it.
pub const CONTENT_IN_PROGRESS_BYTES_MAX: usize = 64 * 1024 * 1024;

/// Body bytes reserved when a content's first body frame arrives, in bytes at most: a
/// larger body gets its full allocation only once this much of it has arrived, so a
/// client cannot reserve memory it does not send.
pub const BODY_RESERVE_BYTES_MAX: usize = 1024 * 1024;

impl AmqpInput {
    /// Input state for a connection accepting bodies up to `body_bytes_max` bytes.
    pub fn new(body_bytes_max: usize) -> AmqpInput {
        AmqpInput {
            staged: Vec::new(),
            pending: HashMap::default(),
            body_bytes_max,
            buffered: 0,
        }
    }

    /// Handles one whole frame; returns the event it completes, if any.
    ///
    /// # Errors
    /// A [`Violation`] when the frame breaks the protocol (a content frame without its
    /// method, a method in the middle of a content, a heartbeat off channel 0, a method
    /// that does not decode, …): the connection must be closed with its code.
    pub fn frame(
        &mut self,
        header: &RawFrameHeader,
        payload: &[u8],
    ) -> Result<Option<(AmqpEvent, usize)>, Violation> {
        let ch = header.channel;
        match header.frame_type {
            FrameType::Heartbeat => {
                if ch != 0 {
                    return Err(Violation::new(
                        ReplyCode::FrameError,
                        format!("heartbeat frame on channel {ch}"),
                    ));
                }
                Ok(None)
            }
            FrameType::Method => self.method(ch, payload),
            FrameType::Header => self.content_header(ch, payload),
            FrameType::Body => self.body(ch, payload),
        }
    }

    fn method(&mut self, ch: u16, payload: &[u8]) -> Result<Option<(AmqpEvent, usize)>, Violation> {
        let method = AmqpMethod::decode(payload).map_err(|e| Violation {
            code: e.code,
            text: e.text,
            class_method: (e.class_id, e.method_id),
        })?;
        if let Some(p) = self.pending.get(&ch) {
            let expected = match p {
                Pending::AwaitHeader(_) => "content header",
                _ => "content body",
            };
            let (c, m) = method.class_method_id();
            return Err(Violation {
                code: ReplyCode::UnexpectedFrame,
                text: format!(
                    "expected {expected} for class {BASIC_CLASS_ID}, got method frame {} on \
                     channel {ch} instead",
                    method.name()
                ),
                class_method: (c, m),
            });
        }
        if method.has_content() {
            self.pending.insert(ch, Pending::AwaitHeader(method));
            return Ok(None);
        }
        let cost = mailbox_cost(payload.len());
        Ok(Some((
            AmqpEvent::Method {
                channel: ch,
                method,
                content: None,
            },
            cost,
        )))
    }

    fn content_header(
        &mut self,
        ch: u16,
        payload: &[u8],
    ) -> Result<Option<(AmqpEvent, usize)>, Violation> {
        let Some(Pending::AwaitHeader(method)) = self.pending.remove(&ch) else {
            return Err(Violation::new(
                ReplyCode::UnexpectedFrame,
                format!("unexpected content header frame on channel {ch}"),
            ));
        };
        let h = parse_content_header(payload).map_err(|e| Violation::new(e.code, e.text))?;
        let (class_id, _) = method.class_method_id();
        if h.class_id != class_id {
            return Err(Violation::new(
                ReplyCode::UnexpectedFrame,
                format!(
                    "content header for class {} does not match its method's class {class_id}",
                    h.class_id
                ),
            ));
        }
        if h.body_size > self.body_bytes_max as u64 {
            if h.body_size > 0 {
                self.pending
                    .insert(ch, Pending::Discard { left: h.body_size });
            }
            return Ok(Some((
                AmqpEvent::Oversized {
                    channel: ch,
                    size: h.body_size,
                },
                0,
            )));
        }
        let content = Content {
            properties: h.properties.into_boxed(),
            body: Vec::new(),
        };
        if h.body_size == 0 {
            return Ok(Some(complete(ch, method, content)));
        }
        self.pending.insert(
            ch,
            Pending::Body {
                method,
                content: Box::new(content),
                size: h.body_size,
            },
        );
        Ok(None)
    }

    fn body(&mut self, ch: u16, payload: &[u8]) -> Result<Option<(AmqpEvent, usize)>, Violation> {
        let overrun = || {
            Violation::new(
                ReplyCode::FrameError,
                format!("content body on channel {ch} is longer than its header declared"),
            )
        };
        match self.pending.get_mut(&ch) {
            Some(Pending::Discard { left }) => {
                *left = left.checked_sub(payload.len() as u64).ok_or_else(overrun)?;
                if *left == 0 {
                    self.pending.remove(&ch);
                }
                Ok(None)
            }
            Some(Pending::Body { content, size, .. }) => {
                let total = content.body.len() as u64 + payload.len() as u64;
                if total > *size {
                    return Err(overrun());
                }
                let held_max =
                    CONTENT_IN_PROGRESS_BYTES_MAX.max(self.body_bytes_max + BODY_RESERVE_BYTES_MAX);
                if self.buffered + payload.len() > held_max {
                    return Err(Violation::new(
                        ReplyCode::ResourceError,
                        format!(
                            "contents still arriving on this connection's channels hold over \
                             {held_max} bytes"
                        ),
                    ));
                }
                let wanted = content.body.len() + payload.len();
                if wanted > content.body.capacity() {
                    // First a bounded reservation; the whole body (bounded by
                    // body_bytes_max) once that much has arrived: one or two allocations.
                    let target = if content.body.is_empty() {
                        (*size as usize).min(BODY_RESERVE_BYTES_MAX)
                    } else {
                        *size as usize
                    };
                    content
                        .body
                        .reserve_exact(target.max(wanted) - content.body.len());
                }
                content.body.extend_from_slice(payload);
                self.buffered += payload.len();
                if total < *size {
                    return Ok(None);
                }
                match self.pending.remove(&ch) {
                    Some(Pending::Body {
                        method, content, ..
                    }) => {
                        self.buffered -= content.body.len();
                        Ok(Some(complete(ch, method, *content)))
                    }
                    _ => Ok(None),
                }
            }
            _ => Err(Violation::new(
                ReplyCode::UnexpectedFrame,
                format!("unexpected content body frame on channel {ch}"),
            )),
        }
    }
}

impl AmqpInput {
    /// Cuts whole frames from `data`, staging their events; returns the bytes consumed,
    /// or the violation (code and text) that ends the input.
    fn stage_frames(
        &mut self,
        conn: &Conn,
        gate: &mut PublishGate,
        data: &[u8],
        staged: &mut Vec<(Event, usize)>,
    ) -> Result<usize, (ReplyCode, String)> {
        let mut at = 0;
        while !gate.is_blocked() {
            let frame_max = conn.frame_max.load(Ordering::Acquire);
            let (header, n) = match amqp::check(&data[at..], frame_max) {
                Ok(None) => break,
                Ok(Some(whole)) => whole,
                Err(e) => return Err((e.code, e.text)),
            };
            let frame = &data[at..at + n];
            at += n;
            match self.frame(&header, header.payload(frame)) {
                Ok(None) => {}
                Ok(Some((event, cost))) => {
                    if let Some(admitted) = gate.admit(conn, Event::Amqp(event), cost) {
                        staged.push(admitted);
                    }
                }
                Err(v) if v.class_method == (0, 0) => return Err((v.code, v.text)),
                Err(v) => {
                    let (class_id, method_id) = v.class_method;
                    let text = format!("{} (class {class_id}, method {method_id})", v.text);
                    return Err((v.code, text));
                }
            }
        }
        Ok(at)
    }
}

impl ProtocolInput for AmqpInput {
    /// A wrong first byte need not wait for eight; a right header starts the handshake.
    fn header(&mut self, conn: &Arc<Conn>, data: &[u8]) -> Result<Option<usize>, Refused> {
        let n = PROTOCOL_HEADER.len();
        let got = &data[..data.len().min(n)];
        if !PROTOCOL_HEADER.starts_with(got) {
            log::warn!(
                "connection {} ({}): bad AMQP protocol header {got:02x?}{}; answering with AMQP 0-9-1's and closing",
                conn.id,
                conn.peer,
                tls_hint(got),
            );
            return Err(refuse_header(conn, &PROTOCOL_HEADER));
        }
        if got.len() < n {
            return Ok(None);
        }
        conn.push(Event::Amqp(AmqpEvent::Header), 0);
        Ok(Some(n))
    }

    fn frames(&mut self, conn: &Arc<Conn>, gate: &mut PublishGate, data: &[u8]) -> Consumed {
        let mut staged = std::mem::take(&mut self.staged);
        let parsed = self.stage_frames(conn, gate, data, &mut staged);
        // What was decoded before a violation is handled before it.
        conn.push_all(&mut staged);
        if staged.capacity() <= STAGED_EVENTS_KEEP {
            self.staged = staged;
        }
        parsed.map_err(|(code, text)| violation(conn, code, text))
    }
}

fn complete(ch: u16, method: AmqpMethod, content: Content) -> (AmqpEvent, usize) {
    let cost = mailbox_cost(content.body.len());
    (
        AmqpEvent::Method {
            channel: ch,
            method,
            content: Some(content),
        },
        cost,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::amqp::{check, write_content, write_method};
    use crate::types::BasicProperties;

    const FRAME_MAX: u32 = 4096;

    /// Feeds every frame in `bytes`; returns the events and the first violation.
    fn feed(input: &mut AmqpInput, bytes: &[u8]) -> (Vec<AmqpEvent>, Option<Violation>) {
        let mut at = 0;
        let mut events = Vec::new();
        while let Some((h, n)) = check(&bytes[at..], FRAME_MAX).unwrap() {
            let frame = &bytes[at..at + n];
            match input.frame(&h, h.payload(frame)) {
                Ok(Some((e, _))) => events.push(e),
                Ok(None) => {}
                Err(v) => return (events, Some(v)),
            }
            at += n;
        }
        (events, None)
    }

    fn publish() -> AmqpMethod {
        AmqpMethod::BasicPublish {
            exchange: String::new(),
            routing_key: "q".into(),
            mandatory: false,
            immediate: false,
        }
    }

    #[test]
    fn a_publish_is_complete_once_its_body_arrived_across_frames() {
        let mut input = AmqpInput::new(1 << 20);
        let mut bytes = Vec::new();
        write_method(&mut bytes, 1, &publish());
        let props = BasicProperties {
            content_type: Some("text/plain".into()),
            ..BasicProperties::default()
        };
        let body = vec![7u8; 10_000];
        write_content(&mut bytes, 1, BASIC_CLASS_ID, &props, &body, FRAME_MAX);
        // Another channel's method may come between the content frames of channel 1: put
        // one at the very end here (interleaving is checked per channel).
        write_method(&mut bytes, 2, &AmqpMethod::ChannelOpen {});
        let (events, violation) = feed(&mut input, &bytes);
        assert_eq!(violation, None);
        assert_eq!(events.len(), 2);
        match &events[0] {
            AmqpEvent::Method {
                channel: 1,
                content: Some(c),
                ..
            } => {
                assert_eq!(c.body, body);
                assert_eq!(c.properties.as_deref(), Some(&props));
            }
            other => panic!("{other:?}"),
        }
    }

    /// Method, header and the first `sent` bytes of a `size`-byte body on channel `ch`.
    fn partial_publish(out: &mut Vec<u8>, ch: u16, size: usize, sent: usize) {
        write_method(out, ch, &publish());
        let mut content = Vec::new();
        write_content(
            &mut content,
            ch,
            BASIC_CLASS_ID,
            &BasicProperties::default(),
            &vec![1u8; size],
            FRAME_MAX,
        );
        let mut at = 0;
        let mut body_sent = 0;
        while let Some((h, n)) = check(&content[at..], FRAME_MAX).unwrap() {
            if h.frame_type == FrameType::Body {
                if body_sent >= sent {
                    break;
                }
                body_sent += n - 8;
            }
            out.extend_from_slice(&content[at..at + n]);
            at += n;
        }
    }

    #[test]
    fn a_large_body_reserves_its_memory_only_as_it_arrives() {
        let size = 8 * BODY_RESERVE_BYTES_MAX;
        let mut input = AmqpInput::new(size);
        let mut bytes = Vec::new();
        partial_publish(&mut bytes, 1, size, 1);
        assert_eq!(feed(&mut input, &bytes).1, None);
        match input.pending.get(&1) {
            Some(Pending::Body { content, .. }) => {
                assert!(content.body.capacity() <= BODY_RESERVE_BYTES_MAX);
            }
            other => panic!("{other:?}"),
        }
        let mut input = AmqpInput::new(size);
        let mut bytes = Vec::new();
        write_method(&mut bytes, 1, &publish());
        let body = vec![3u8; size];
        write_content(
            &mut bytes,
            1,
            BASIC_CLASS_ID,
            &BasicProperties::default(),
            &body,
            FRAME_MAX,
        );
        let (events, violation) = feed(&mut input, &bytes);
        assert_eq!(violation, None);
        match &events[..] {
            [AmqpEvent::Method {
                content: Some(c), ..
            }] => {
                assert_eq!(c.body, body);
                assert_eq!(
                    c.body.capacity(),
                    size,
                    "one exact allocation once it arrived"
                );
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(input.buffered, 0);
    }

    #[test]
    fn partial_bodies_on_many_channels_cannot_grow_past_the_connection_bound() {
        let size = 4 * 1024 * 1024;
        let mut input = AmqpInput::new(size);
        let mut bytes = Vec::new();
        // 20 channels × 4 MiB - 1 bytes each: 80 MiB, over the 64 MiB bound.
        for ch in 1..=20 {
            partial_publish(&mut bytes, ch, size, size - FRAME_MAX as usize);
        }
        let (events, violation) = feed(&mut input, &bytes);
        assert!(events.is_empty());
        let v = violation.expect("the bound is enforced");
        assert_eq!(v.code, ReplyCode::ResourceError);
        assert!(input.buffered <= CONTENT_IN_PROGRESS_BYTES_MAX);
    }

    #[test]
    fn an_empty_body_completes_at_the_header() {
        let mut input = AmqpInput::new(1 << 20);
        let mut bytes = Vec::new();
        write_method(&mut bytes, 1, &publish());
        write_content(
            &mut bytes,
            1,
            BASIC_CLASS_ID,
            &BasicProperties::default(),
            &[],
            FRAME_MAX,
        );
        let (events, violation) = feed(&mut input, &bytes);
        assert_eq!(violation, None);
        assert!(
            matches!(&events[..], [AmqpEvent::Method { content: Some(c), .. }] if c.body.is_empty())
        );
    }

    #[test]
    fn content_frames_out_of_place_are_unexpected_frames() {
        // A body without a header (and without a method).
        let mut input = AmqpInput::new(1 << 20);
        let mut bytes = Vec::new();
        write_content(
            &mut bytes,
            1,
            BASIC_CLASS_ID,
            &BasicProperties::default(),
            b"x",
            FRAME_MAX,
        );
        let (_, v) = feed(&mut input, &bytes);
        assert_eq!(v.map(|v| v.code), Some(ReplyCode::UnexpectedFrame));
        // A method where the content header should be.
        let mut input = AmqpInput::new(1 << 20);
        let mut bytes = Vec::new();
        write_method(&mut bytes, 1, &publish());
        write_method(&mut bytes, 1, &AmqpMethod::ChannelCloseOk {});
        let (_, v) = feed(&mut input, &bytes);
        let v = v.expect("violation");
        assert_eq!(v.code, ReplyCode::UnexpectedFrame);
        assert!(v.text.contains("expected content header"), "{}", v.text);
    }

    #[test]
    fn an_oversized_body_is_reported_and_its_frames_dropped() {
        let mut input = AmqpInput::new(100);
        let mut bytes = Vec::new();
        write_method(&mut bytes, 1, &publish());
        write_content(
            &mut bytes,
            1,
            BASIC_CLASS_ID,
            &BasicProperties::default(),
            &[1; 5000],
            FRAME_MAX,
        );
        write_method(&mut bytes, 1, &AmqpMethod::ChannelCloseOk {});
        let (events, v) = feed(&mut input, &bytes);
        assert_eq!(v, None);
        assert!(matches!(
            events[0],
            AmqpEvent::Oversized {
                channel: 1,
                size: 5000
            }
        ));
        // After the dropped body the channel takes methods again.
        assert!(matches!(events[1], AmqpEvent::Method { channel: 1, .. }));
    }

    #[test]
    fn a_heartbeat_off_channel_zero_is_a_frame_error() {
        let mut input = AmqpInput::new(100);
        let h = RawFrameHeader {
            frame_type: FrameType::Heartbeat,
            channel: 3,
            size: 0,
        };
        assert_eq!(
            input.frame(&h, &[]).unwrap_err().code,
            ReplyCode::FrameError
        );
    }
}
