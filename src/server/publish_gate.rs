//! Blocking publishers while a resource alarm is set (RabbitMQ's alarms.html and
//! connection-blocked.html), on the I/O thread.
//!
//! Each connection's [`PublishGate`] sees every decoded event before it goes to the
//! mailbox. A publish (`basic.publish` on either listener) that arrives while an alarm is
//! set is *held*: it is not handed to a worker, parsing stops behind it and the I/O thread
//! stops reading the socket, so TCP pushes back on the client — RabbitMQ's "blocked"
//! state. Everything read before it is processed as usual (its confirms go out), and
//! connections that only consume and ack are never held. When every alarm clears the
//! held publish goes to the mailbox, the buffered input behind it is parsed and reading
//! resumes: nothing the client sent is lost.
//!
//! Notifications: `connection.blocked` (reason `low on memory` / `low on disk`) goes to a
//! connection that has published, when an alarm sets or when its publish is held,
//! whichever comes first, once per blocked period; `connection.unblocked` follows when
//! every alarm has cleared. Over AMQP 0-9-1 only to clients whose `client-properties`
//! announce the `connection.blocked` capability; over the native protocol always
//! (`ConnectionBlocked` 0x0006 / `ConnectionUnblocked` 0x0007, docs/protocol.md).

use crate::alarm::{blocked_reason, ResourceAlarms};
use crate::amqp::{self, AmqpMethod};
use crate::native::frame;
use crate::native::Method;
use crate::server::amqp::event::AmqpEvent;
use crate::server::conn::{Conn, Protocol};
use crate::server::event::Event;
use crate::server::native::event::NativeEvent;
use crate::types::{FieldTable, FieldValue};
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// Key of the AMQP client capability asking for `connection.blocked` notifications.
pub const BLOCKED_CAPABILITY: &str = "connection.blocked";

/// Whether AMQP `client-properties` announce the `connection.blocked` capability
/// (`capabilities` table, key `connection.blocked`, value `true`).
pub fn announces_blocked_capability(client_properties: &FieldTable) -> bool {
    match client_properties.get("capabilities") {
        Some(FieldValue::Table(caps)) => {
            matches!(caps.get(BLOCKED_CAPABILITY), Some(FieldValue::Bool(true)))
        }
        _ => false,
    }
}

/// Whether an event is a publish (native batch, native method, or AMQP `basic.publish`).
fn is_publish(event: &Event) -> bool {
    match event {
        Event::Native(NativeEvent::Publish { .. }) => true,
        Event::Native(NativeEvent::Method { method, .. }) => {
            matches!(method, Method::Publish { .. })
        }
        Event::Amqp(AmqpEvent::Method { method, .. }) => {
            matches!(method, AmqpMethod::BasicPublish { .. })
        }
        _ => false,
    }
}

/// One connection's publish gate (owned by the I/O thread's connection state).
pub struct PublishGate {
    alarms: Arc<ResourceAlarms>,
    protocol: Protocol,
    /// The connection has published at least once: it is told when an alarm sets.
    published: bool,
    /// The client takes the notifications (native: always; AMQP: the capability).
    wants_notice: bool,
    /// The publish read while an alarm was set, with its mailbox cost. While it is here
    /// the connection is blocked: nothing more is parsed or read.
    held: Option<(Event, usize)>,
    /// `connection.blocked` was sent; `connection.unblocked` is owed.
    notified: bool,
}

impl PublishGate {
    /// A gate for a new connection speaking `protocol`.
    pub fn new(alarms: Arc<ResourceAlarms>, protocol: Protocol) -> PublishGate {
        PublishGate {
            alarms,
            protocol,
            published: false,
            wants_notice: protocol == Protocol::Native,
            held: None,
            notified: false,
        }
    }

    /// Passes a decoded event on (`Some`), or holds it (`None`) when it is a publish and
    /// an alarm is set: the caller then stops parsing and reading. The publish path pays
    /// one relaxed atomic load. Also notes the AMQP `connection.blocked` capability from
    /// `connection.start-ok`.
    #[inline]
    pub fn admit(&mut self, conn: &Conn, event: Event, cost: usize) -> Option<(Event, usize)> {
        if is_publish(&event) {
            self.published = true;
            if self.alarms.is_alarmed() {
                self.held = Some((event, cost));
                self.alarms.count_blocked(true);
                self.notify(conn);
                return None;
            }
        } else if let Event::Amqp(AmqpEvent::Method {
            method:
                AmqpMethod::ConnectionStartOk {
                    client_properties, ..
                },
            ..
        }) = &event
        {
            self.wants_notice = announces_blocked_capability(client_properties);
        }
        Some((event, cost))
    }

    /// Whether a publish is held: the connection is blocked, its socket is not read.
    pub fn is_blocked(&self) -> bool {
        self.held.is_some()
    }

    /// An alarm set: a connection that has published is told now (RabbitMQ notifies
    /// publishing connections when the alarm sets); it is blocked at its next publish.
    pub fn alarm_set(&mut self, conn: &Conn) {
        if self.published {
            self.notify(conn);
        }
    }

    /// Sends `connection.blocked` to a blocked connection not told yet (one that was held
    /// before its handshake completed); called by the timer tick.
    pub fn retry_notice(&mut self, conn: &Conn) {
        if self.held.is_some() {
            self.notify(conn);
        }
    }

    /// Every alarm cleared: sends `connection.unblocked` if `connection.blocked` was sent,
    /// and gives back the held publish for the mailbox (the caller then parses the input
    /// buffered behind it and resumes reading).
    pub fn release(&mut self, conn: &Conn) -> Option<(Event, usize)> {
        if self.notified {
            self.notified = false;
            self.write(conn, None);
        }
        let held = self.held.take();
        if held.is_some() {
            self.alarms.count_blocked(false);
        }
        held
    }

    /// Sends `connection.blocked` once per blocked period, to an open connection that
    /// takes the notification and is not closing.
    fn notify(&mut self, conn: &Conn) {
        if self.notified
            || !self.wants_notice
            || !conn.opened.load(Ordering::Acquire)
            || conn.outbound.is_closing()
        {
            return;
        }
        self.notified = true;
        let reason = match blocked_reason(self.alarms.bits()) {
            // Cleared meanwhile: the unblocked notice follows at the I/O thread's next turn.
            "" => "low on resources",
            r => r,
        };
        self.write(conn, Some(reason));
    }

    /// Appends `connection.blocked` (with a reason) or `connection.unblocked` (`None`) on
    /// channel 0 in the connection's protocol.
    fn write(&self, conn: &Conn, blocked: Option<&str>) {
        match self.protocol {
            Protocol::Native => {
                let method = match blocked {
                    Some(reason) => Method::ConnectionBlocked {
                        reason: reason.to_string(),
                    },
                    None => Method::ConnectionUnblocked,
                };
                let frame_max = conn.frame_max.load(Ordering::Acquire);
                conn.outbound
                    .write_with(|b| frame::write_method(b, 0, frame_max, |p| method.encode(0, p)));
            }
            Protocol::Amqp => {
                let method = match blocked {
                    Some(reason) => AmqpMethod::ConnectionBlocked {
                        reason: reason.to_string(),
                    },
                    None => AmqpMethod::ConnectionUnblocked {},
                };
                conn.outbound
                    .write_with(|b| amqp::write_method(b, 0, &method));
            }
        }
    }
}

impl Drop for PublishGate {
    fn drop(&mut self) {
        if self.held.is_some() {
            self.alarms.count_blocked(false);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_capability_must_be_announced_true() {
        let mut caps = FieldTable::new();
        caps.insert(BLOCKED_CAPABILITY.into(), FieldValue::Bool(true));
        let mut props = FieldTable::new();
        props.insert("capabilities".into(), FieldValue::Table(caps.clone()));
        assert!(announces_blocked_capability(&props));
        caps.insert(BLOCKED_CAPABILITY.into(), FieldValue::Bool(false));
        props.insert("capabilities".into(), FieldValue::Table(caps));
        assert!(!announces_blocked_capability(&props));
        assert!(!announces_blocked_capability(&FieldTable::new()));
        let mut flat = FieldTable::new();
        flat.insert(BLOCKED_CAPABILITY.into(), FieldValue::Bool(true));
        assert!(!announces_blocked_capability(&flat));
    }
}
