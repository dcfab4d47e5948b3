//! A connection as shared between the I/O thread and the workers: its mailbox of decoded
//! requests, its scheduling flag, its outbound buffer and its protocol handler.
//!
//! At most one worker runs a connection at a time (`scheduled`), so its requests execute
//! in arrival order (ARCHITECTURE.md §2.2).

use crate::amqp::AmqpMethod;
use crate::broker::channel::Channel;
use crate::broker::CancelReason;
use crate::error::ReplyCode;
use crate::native::{Method, PublishBatch};
use crate::server::native::methods::ConnHandler;
use crate::server::outbound::Outbound;
use crate::types::BasicProperties;
use crossbeam_channel::Sender;
use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU16, AtomicU32, Ordering};
use std::sync::{Arc, Mutex};

/// What the I/O thread (or the core) asks a connection's worker to do.
// Methods dominate the mailbox; boxing them would cost an allocation per request.
#[allow(
    clippy::large_enum_variant,
    reason = "boxing methods would cost an allocation per request"
)]
#[derive(Debug)]
pub enum Event {
    /// A decoded method.
    Method {
        /// Channel it arrived on.
        channel: u16,
        /// Its request id.
        request_id: u32,
        /// The method.
        method: Method,
    },
    /// A `basic.publish`, checked and kept as its payload (read in place by the worker).
    Publish {
        /// Channel it arrived on.
        channel: u16,
        /// Its request id.
        request_id: u32,
        /// The messages.
        batch: PublishBatch,
    },
    /// The outcome of a password check run on the login checker thread.
    LoginChecked {
        /// Accepted, or the refusal to close the connection with.
        result: Result<(), crate::error::BrokerError>,
    },
    /// A split payload over the size limit was discarded.
    Oversized {
        /// Channel it arrived on.
        channel: u16,
        /// Method id, if its first frame carried one.
        method_id: u16,
        /// Request id, if its first frame carried one.
        request_id: u32,
        /// Its size in bytes.
        size: u64,
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
    /// An AMQP 0-9-1 client sent a valid protocol header: start the handshake.
    AmqpHeader,
    /// A decoded AMQP 0-9-1 method, with its content for `basic.publish`.
    Amqp {
        /// Channel it arrived on.
        channel: u16,
        /// The method.
        method: AmqpMethod,
        /// Its content (properties and body), for a method that carries one.
        content: Option<Content>,
    },
    /// An AMQP 0-9-1 content too large to accept; its frames are being discarded. The
    /// channel is closed with 406 (RabbitMQ: `PRECONDITION_FAILED - message size … is
    /// larger than configured max size …`).
    AmqpOversized {
        /// Channel it arrived on.
        channel: u16,
        /// Declared body size in bytes.
        size: u64,
    },
    /// The core cancelled a consumer of an AMQP 0-9-1 connection (its queue was deleted,
    /// or it timed out): the handler tells the client as its capabilities allow, after
    /// the method it was running when this was posted.
    ServerCancel {
        /// The consumer's channel (it may have closed, and its number been reused, since).
        channel: Arc<Channel>,
        /// The consumer's tag.
        consumer_tag: String,
        /// Why it was cancelled.
        reason: CancelReason,
    },
    /// The socket is gone: clean up.
    Closed {
        /// The peer ended the connection (end of stream, reset) before the server began
        /// closing it; false when the server closed it (handshake or heartbeat timeout,
        /// bad protocol header, TLS failure, its own `close`, shutdown) and logged why
        /// already. Only a peer's close is logged as "closed by the client" (issue 8
        /// part 3).
        by_peer: bool,
    },
}

/// The content of an AMQP 0-9-1 method (`basic.publish`): properties and body.
#[derive(Debug)]
pub struct Content {
    /// Message properties from the content header, boxed (`None` when none is set).
    pub properties: Option<Box<BasicProperties>>,
    /// Body bytes (every body frame joined).
    pub body: Vec<u8>,
}

/// Largest in-memory size of an [`Event`], bytes: every request is moved into and out of
/// a mailbox, so large method fields (properties) are boxed to keep this small.
pub const EVENT_BYTES_MAX: usize = 160;

const _: () = assert!(std::mem::size_of::<Event>() <= EVENT_BYTES_MAX);

/// Which protocol a connection speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protocol {
    /// RelayMQ's native protocol (docs/protocol.md).
    Native,
    /// AMQP 0-9-1 with RabbitMQ's extensions (docs/amqp.md).
    Amqp,
}

/// Mailbox slots kept allocated once it drains; a larger backlog's memory is released.
const MAILBOX_IDLE_EVENTS: usize = 64;

#[derive(Debug, Default)]
struct Mailbox {
    events: VecDeque<(Event, usize)>,
    bytes: usize,
}

/// One client connection's shared state.
pub struct Conn {
    /// Connection id (also its mio token).
    pub id: u64,
    /// Client address.
    pub peer: SocketAddr,
    /// The protocol it speaks (fixed by the listener that accepted it).
    pub protocol: Protocol,
    /// Encoded bytes waiting for the socket.
    pub outbound: Arc<Outbound>,
    /// Negotiated frame size in bytes (the handshake limit until `open-ok`).
    pub frame_max: AtomicU32,
    /// Negotiated heartbeat interval in seconds (0 = none).
    pub heartbeat_s: AtomicU16,
    /// `open-ok` was sent.
    pub opened: AtomicBool,
    /// The I/O thread stopped reading because the mailbox is over its budget.
    pub read_paused: AtomicBool,
    mailbox: Mutex<Mailbox>,
    scheduled: AtomicBool,
    pool: Sender<Arc<Conn>>,
    /// The protocol state; only the worker that scheduled the connection locks it.
    pub handler: Mutex<ConnHandler>,
}

impl Conn {
    /// A connection with an empty mailbox.
    pub fn new(
        id: u64,
        peer: SocketAddr,
        protocol: Protocol,
        outbound: Arc<Outbound>,
        frame_max: u32,
        pool: Sender<Arc<Conn>>,
        handler: ConnHandler,
    ) -> Conn {
        Conn {
            id,
            peer,
            protocol,
            outbound,
            frame_max: AtomicU32::new(frame_max),
            heartbeat_s: AtomicU16::new(0),
            opened: AtomicBool::new(false),
            read_paused: AtomicBool::new(false),
            mailbox: Mutex::new(Mailbox::default()),
            scheduled: AtomicBool::new(false),
            pool,
            handler: Mutex::new(handler),
        }
    }

    /// Appends an event costing `bytes` of budget and schedules the connection on the
    /// worker pool unless a worker already has it.
    pub fn push(self: &Arc<Self>, event: Event, bytes: usize) {
        {
            let mut mb = self.mailbox.lock().unwrap_or_else(|e| e.into_inner());
            mb.events.push_back((event, bytes));
            mb.bytes += bytes;
        }
        self.schedule();
    }

    /// Appends every event of `events` (draining it) under one mailbox lock, then schedules
    /// the connection once; nothing happens for an empty vector.
    pub fn push_all(self: &Arc<Self>, events: &mut Vec<(Event, usize)>) {
        if events.is_empty() {
            return;
        }
        {
            let mut mb = self.mailbox.lock().unwrap_or_else(|e| e.into_inner());
            for (event, bytes) in events.drain(..) {
                mb.events.push_back((event, bytes));
                mb.bytes += bytes;
            }
        }
        self.schedule();
    }

    /// Puts the connection on the pool's queue unless it is scheduled already.
    pub fn schedule(self: &Arc<Self>) {
        if !self.scheduled.swap(true, Ordering::AcqRel) {
            // The pool's queue holds each connection at most once and is as large as the
            // connection limit, so this never blocks; a send fails only at shutdown.
            let _ = self.pool.send(Arc::clone(self));
        }
    }

    /// Takes up to `max` events and the budget bytes they held (worker only).
    pub fn take_events(&self, max: usize, into: &mut Vec<Event>) -> usize {
        let mut mb = self.mailbox.lock().unwrap_or_else(|e| e.into_inner());
        let n = max.min(mb.events.len());
        let mut bytes = 0;
        for (event, b) in mb.events.drain(..n) {
            bytes += b;
            into.push(event);
        }
        mb.bytes -= bytes;
        if mb.events.is_empty() && mb.events.capacity() > MAILBOX_IDLE_EVENTS {
            mb.events = VecDeque::new();
        }
        bytes
    }

    /// Bytes of decoded requests waiting for a worker.
    pub fn mailbox_bytes(&self) -> usize {
        self.mailbox.lock().unwrap_or_else(|e| e.into_inner()).bytes
    }

    /// Whether no event is waiting.
    pub fn mailbox_is_empty(&self) -> bool {
        self.mailbox
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .events
            .is_empty()
    }

    /// Called by the worker when it is done with the connection for now. Returns true
    /// when events arrived meanwhile and the worker must keep going (it re-took the flag).
    pub fn unschedule(&self) -> bool {
        self.scheduled.store(false, Ordering::Release);
        !self.mailbox_is_empty() && !self.scheduled.swap(true, Ordering::AcqRel)
    }

    /// Puts an already scheduled connection back on the pool's queue (a worker yields it
    /// with events left).
    pub fn requeue_scheduled(self: &Arc<Self>) {
        let _ = self.pool.send(Arc::clone(self));
    }

    /// Whether a worker has (or is about to have) the connection.
    pub fn is_scheduled(&self) -> bool {
        self.scheduled.load(Ordering::Acquire)
    }
}
