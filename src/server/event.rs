//! What a connection's worker is asked to do. Each protocol has its own events
//! ([`NativeEvent`], [`AmqpEvent`]), each embedding the [`ConnEvent`]s every connection
//! takes whatever it speaks; a mailbox holds [`Event`]s, one protocol's or the other's.
//!
//! Producers: the I/O thread (decoded input, [`ConnEvent::Drained`], [`ConnEvent::Closed`],
//! [`ConnEvent::Shutdown`]), the login checker thread ([`ConnEvent::LoginChecked`]) and the
//! core through a connection's sink ([`ConnEvent::ForceClose`], an AMQP server cancel).

use crate::error::{BrokerError, ReplyCode};
use crate::server::amqp::event::AmqpEvent;
use crate::server::conn::Protocol;
use crate::server::native::event::NativeEvent;

/// An event every connection takes, whatever its protocol.
#[derive(Debug)]
pub enum ConnEvent {
    /// The outcome of a password check run on the login checker thread.
    LoginChecked {
        /// Accepted, or the refusal to close the connection with.
        result: Result<(), BrokerError>,
    },
    /// The peer broke the protocol: close the connection with this code and reason.
    ProtocolError {
        /// Reply code (501 FRAME_ERROR, 502 SYNTAX_ERROR, …).
        code: ReplyCode,
        /// Reason shown to the client and logged.
        text: String,
    },
    /// The core asked to close the connection (e.g. its vhost was deleted).
    ForceClose {
        /// Reply code.
        code: ReplyCode,
        /// Reason.
        text: String,
    },
    /// The server is shutting down: close with 320 CONNECTION_FORCED.
    Shutdown,
    /// The outbound buffer drained below the low-water mark after deliveries were held back.
    Drained,
    /// The socket is gone: clean up.
    Closed {
        /// The peer ended the connection (end of stream, reset) before the server began
        /// closing it; false when the server closed it (handshake or heartbeat timeout,
        /// bad protocol header, TLS failure, its own `close`, shutdown) and logged why
        /// already. Only a peer's close is logged as "closed by the client"
        /// (`server/conn_log.rs`).
        by_peer: bool,
    },
}

/// An event in a connection's mailbox: its protocol's own kind.
#[derive(Debug)]
pub enum Event {
    /// For a native-protocol connection.
    Native(NativeEvent),
    /// For an AMQP 0-9-1 connection.
    Amqp(AmqpEvent),
}

impl Event {
    /// `event` as the mailbox event of a connection speaking `protocol`.
    pub fn conn(protocol: Protocol, event: ConnEvent) -> Event {
        match protocol {
            Protocol::Native => Event::Native(NativeEvent::Conn(event)),
            Protocol::Amqp => Event::Amqp(AmqpEvent::Conn(event)),
        }
    }
}

/// Largest in-memory size of an [`Event`], bytes: every request is moved into and out of
/// a mailbox, so large method fields (properties) are boxed to keep this small.
pub const EVENT_BYTES_MAX: usize = 160;

const _: () = assert!(std::mem::size_of::<Event>() <= EVENT_BYTES_MAX);

/// Mailbox budget a decoded request is charged, bytes: its payload plus the in-memory size
/// of its mailbox slot (a 15-byte ack still takes a whole slot; docs/architecture.md §7).
pub fn mailbox_cost(payload_bytes: usize) -> usize {
    payload_bytes + std::mem::size_of::<(Event, usize)>()
}
