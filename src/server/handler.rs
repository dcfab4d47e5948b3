//! A connection's protocol handler, native or AMQP 0-9-1, chosen by the listener that
//! accepted it; the worker hands it each event of the connection's mailbox.

use crate::broker::Broker;
use crate::server::amqp::handler::AmqpHandler;
use crate::server::conn::{Conn, Protocol};
use crate::server::event::Event;
use crate::server::native::handler::NativeHandler;
use crate::server::outbound::Outbound;
use std::net::SocketAddr;
use std::sync::{Arc, Weak};

/// One connection's protocol state; run by one worker at a time.
pub enum ConnHandler {
    /// RelayMQ's native protocol.
    Native(NativeHandler),
    /// AMQP 0-9-1.
    Amqp(Box<AmqpHandler>),
}

impl ConnHandler {
    /// The handler of a new connection speaking `protocol`, before any byte was read;
    /// `peer` and `local` are the socket's two addresses, `conn` the connection it runs
    /// for (its sink and password checks post events to it).
    pub fn new(
        protocol: Protocol,
        broker: Arc<Broker>,
        conn: Weak<Conn>,
        id: u64,
        (peer, local): (SocketAddr, SocketAddr),
        outbound: Arc<Outbound>,
    ) -> ConnHandler {
        match protocol {
            Protocol::Native => ConnHandler::Native(NativeHandler::new(
                broker,
                conn,
                id,
                (peer, local),
                outbound,
            )),
            Protocol::Amqp => ConnHandler::Amqp(Box::new(AmqpHandler::new(
                broker,
                conn,
                id,
                (peer, local),
                outbound,
            ))),
        }
    }

    /// Executes one event. A connection's events are its own protocol's: its input, sink
    /// and [`Event::conn`] make no other kind, so a mismatch is a bug, logged and dropped.
    pub fn handle(&mut self, event: Event) {
        match (self, event) {
            (ConnHandler::Native(h), Event::Native(e)) => h.handle(e),
            (ConnHandler::Amqp(h), Event::Amqp(e)) => h.handle(e),
            // Not logged with its contents: a method may carry a message body.
            (_, _) => {
                debug_assert!(false, "an event of the other protocol");
                log::error!("a connection handler was given an event of the other protocol");
            }
        }
    }

    /// Closes the connection after an internal error (541), releasing its session.
    pub fn abort(&mut self) {
        match self {
            ConnHandler::Native(h) => h.abort(),
            ConnHandler::Amqp(h) => h.abort(),
        }
    }
}
