//! A connection as shared between the I/O thread and the workers: its mailbox of decoded
//! requests, its scheduling flag, its outbound buffer and its protocol handler.
//!
//! At most one worker runs a connection at a time (`scheduled`), so its requests execute
//! in arrival order (docs/architecture.md §3).

use crate::server::event::{ConnEvent, Event};
use crate::server::handler::ConnHandler;
use crate::server::outbound::Outbound;
use crossbeam_channel::Sender;
use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU16, AtomicU32, Ordering};
use std::sync::{Arc, Mutex, Weak};

/// Which protocol a connection speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protocol {
    /// RelayMQ's native protocol (docs/protocol.md).
    Native,
    /// AMQP 0-9-1 with RabbitMQ's extensions (docs/amqp.md).
    Amqp,
}

impl Protocol {
    /// Appends one heartbeat frame in this protocol to `out` (the I/O thread's timer
    /// sends one when nothing was written for a heartbeat interval).
    pub fn write_heartbeat(self, out: &mut Vec<u8>) {
        match self {
            Protocol::Native => crate::native::frame::write_heartbeat(out),
            Protocol::Amqp => crate::amqp::write_heartbeat(out),
        }
    }
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
    /// Bytes in and out, counted by the I/O thread (the management API's `recv_oct`…).
    pub traffic: Arc<crate::broker::node::ConnTraffic>,
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
            traffic: Arc::default(),
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

    /// Appends an event every protocol takes ([`ConnEvent`]), costing no budget, and
    /// schedules the connection.
    pub fn push_conn(self: &Arc<Self>, event: ConnEvent) {
        self.push(Event::conn(self.protocol, event), 0);
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

/// Posts `event` to the connection behind `conn` if it still exists (a sink's force-close,
/// a password check's answer): nothing happens for a connection already gone.
pub fn post(conn: &Weak<Conn>, event: ConnEvent) {
    if let Some(conn) = conn.upgrade() {
        conn.push_conn(event);
    }
}
