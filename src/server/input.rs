//! How a connection's bytes become events, on the I/O thread: [`ProtocolInput`], one
//! implementation per protocol (`server/native/input.rs`, `server/amqp/input.rs`), each
//! owning its protocol header check, frame check and decoding, behind [`Input`], which
//! reads the header once, then frames. The I/O thread only keeps the unparsed tail of what
//! it read and hands every read to the connection's [`Input`].
//!
//! Every input follows the same rules (docs/architecture.md §3): a whole frame is known
//! to be buffered before anything is allocated for it; each decoded event goes through the
//! connection's [`PublishGate`] before its mailbox, and parsing stops behind a publish the
//! gate holds; a protocol violation posts [`ConnEvent::ProtocolError`] and refuses the rest
//! of the input.

use crate::error::ReplyCode;
use crate::limits::Limits;
use crate::server::amqp::input::AmqpInput;
use crate::server::conn::{Conn, Protocol};
use crate::server::event::ConnEvent;
use crate::server::native::input::NativeInput;
use crate::server::publish_gate::PublishGate;
use std::sync::Arc;

/// The input was refused: the connection is being closed (a protocol error was posted,
/// or our protocol header is on its way) and nothing more of it is parsed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Refused;

/// What a parse of a connection's input came to: the bytes it consumed, or [`Refused`].
pub type Consumed = Result<usize, Refused>;

/// One protocol's parser of a connection's input.
pub trait ProtocolInput: Send {
    /// Checks the protocol header at the start of `data`, the connection's first bytes:
    /// `Ok(None)` while too few are buffered to tell, `Ok(Some(n))` with the header's
    /// length once it is right (the handshake may start).
    ///
    /// # Errors
    /// [`Refused`] when the header is wrong: our header is written and the connection
    /// closed after it (AMQP 0-9-1 §4.2.2; the native protocol does the same).
    fn header(&mut self, conn: &Arc<Conn>, data: &[u8]) -> Result<Option<usize>, Refused>;

    /// Cuts and decodes every whole frame at the start of `data` (input after the
    /// header), handing each event to `gate` and, when admitted, to `conn`'s mailbox.
    /// Returns the bytes consumed; the rest (an incomplete frame, or what follows a
    /// publish the gate holds) is given again, with more, at the next call.
    ///
    /// # Errors
    /// [`Refused`] when a frame breaks the protocol: a [`ConnEvent::ProtocolError`] was
    /// posted (after the events decoded before it) and the rest of the input is discarded.
    fn frames(&mut self, conn: &Arc<Conn>, gate: &mut PublishGate, data: &[u8]) -> Consumed;
}

/// A connection's input: its protocol's parser, and whether the header was read.
pub struct Input {
    /// The protocol header was read and was right: what follows is frames.
    header_done: bool,
    parser: Box<dyn ProtocolInput>,
}

impl Input {
    /// The input of a new connection speaking `protocol`, under the limits in force at
    /// accept.
    pub fn new(protocol: Protocol, limits: &Limits) -> Input {
        let parser: Box<dyn ProtocolInput> = match protocol {
            Protocol::Native => Box::new(NativeInput::new(limits.message_bytes_max)),
            Protocol::Amqp => Box::new(AmqpInput::new(limits.message_bytes_max)),
        };
        Input {
            header_done: false,
            parser,
        }
    }

    /// Parses `data`, the connection's unparsed input: the protocol header first, then
    /// frames ([`ProtocolInput::frames`]). Returns the bytes consumed; the rest is given
    /// again, with more, at the next call.
    ///
    /// # Errors
    /// [`Refused`] for a wrong header or a protocol violation: the connection is being
    /// closed and the rest of its input is discarded.
    pub fn parse(&mut self, conn: &Arc<Conn>, gate: &mut PublishGate, data: &[u8]) -> Consumed {
        let mut at = 0;
        if !self.header_done {
            match self.parser.header(conn, data)? {
                Some(n) => at = n,
                None => return Ok(0),
            }
            self.header_done = true;
        }
        Ok(at + self.parser.frames(conn, gate, &data[at..])?)
    }
}

/// Posts a protocol violation to `conn` (its handler closes the connection with `code`)
/// and refuses the rest of the input.
pub fn violation(conn: &Arc<Conn>, code: ReplyCode, text: String) -> Refused {
    conn.push_conn(ConnEvent::ProtocolError { code, text });
    Refused
}

/// Answers a wrong protocol header with `ours` and closes the connection once it is
/// written (AMQP 0-9-1 §4.2.2; the native protocol does the same, docs/protocol.md).
pub fn refuse_header(conn: &Conn, ours: &[u8]) -> Refused {
    conn.outbound.write_with(|b| b.extend_from_slice(ours));
    conn.outbound.close_after_flush();
    Refused
}

/// A hint for a log line when a plain listener's first bytes are a TLS handshake record
/// (content type 22, version 3.x: a ClientHello, RFC 8446 §5.1).
pub fn tls_hint(got: &[u8]) -> &'static str {
    if got.starts_with(&[0x16, 0x03]) {
        " (a TLS ClientHello: this port is plain TCP; TLS is served on --tls-listen / --amqp-tls-listen)"
    } else {
        ""
    }
}
