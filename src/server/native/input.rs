//! Turning a native-protocol connection's bytes into [`NativeEvent`]s on the I/O thread
//! (docs/protocol.md): the protocol header, then frames — checked whole before anything is
//! allocated ([`frame::check`]), split payloads joined ([`FrameAssembler`]), heartbeats
//! dropped — decoded into methods. A `basic.publish` payload is checked once by
//! [`PublishBatch::decode`] and kept whole, so the worker reads its messages in place (the
//! hot path: one copy, no allocation per message, docs/architecture.md §4).

use crate::error::ReplyCode;
use crate::limits::{FRAME_BYTES_HANDSHAKE, PROPERTIES_BYTES_MAX};
use crate::native::frame::{self, FrameHeader, FrameType, Payload, FRAME_HEADER_BYTES};
use crate::native::method::method_name;
use crate::native::publish_batch::PUBLISH_METHOD_ID;
use crate::native::{FrameAssembler, Method, PublishBatch, PROTOCOL_HEADER};
use crate::server::conn::Conn;
use crate::server::event::{mailbox_cost, Event};
use crate::server::input::{refuse_header, tls_hint, violation, Consumed, ProtocolInput, Refused};
use crate::server::native::event::NativeEvent;
use crate::server::publish_gate::PublishGate;
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// Payload bytes beyond the body limit allowed for a method's other fields (properties,
/// names), in bytes.
pub const PAYLOAD_OVERHEAD_BYTES: usize = PROPERTIES_BYTES_MAX + 4096;

/// One native connection's input state.
pub struct NativeInput {
    /// Joins split payloads; bounded by the handshake's frame size until `open-ok`.
    assembler: FrameAssembler,
}

impl NativeInput {
    /// Input state for a new connection accepting bodies up to `body_bytes_max` bytes (a
    /// joined payload may hold [`PAYLOAD_OVERHEAD_BYTES`] more).
    pub fn new(body_bytes_max: usize) -> NativeInput {
        NativeInput {
            assembler: FrameAssembler::before_open(
                FRAME_BYTES_HANDSHAKE as usize,
                body_bytes_max + PAYLOAD_OVERHEAD_BYTES,
            ),
        }
    }

    /// One whole frame: heartbeats are dropped, the rest joined into payloads and decoded.
    fn frame(
        &mut self,
        conn: &Arc<Conn>,
        gate: &mut PublishGate,
        header: &FrameHeader,
        payload: &[u8],
    ) -> Result<(), Refused> {
        if header.frame_type == FrameType::Heartbeat {
            return Ok(());
        }
        if !self.assembler.is_open() && conn.opened.load(Ordering::Acquire) {
            self.assembler.open();
        }
        match self.assembler.push(header, payload) {
            Ok(None) => Ok(()),
            Ok(Some(Payload::Whole(ch, p))) => decode(conn, gate, ch, p),
            Ok(Some(Payload::Joined(ch, p))) => decode(conn, gate, ch, &p),
            Ok(Some(Payload::Oversized {
                channel,
                head,
                size,
            })) => {
                let method_id = if head.len() >= 2 {
                    u16::from_be_bytes([head[0], head[1]])
                } else {
                    0
                };
                let request_id = if head.len() >= 6 {
                    u32::from_be_bytes([head[2], head[3], head[4], head[5]])
                } else {
                    0
                };
                let event = NativeEvent::Oversized {
                    channel,
                    method_id,
                    request_id,
                    size,
                };
                conn.push(Event::Native(event), 0);
                Ok(())
            }
            Err(e) => Err(violation(conn, ReplyCode::FrameError, e.message)),
        }
    }
}

impl ProtocolInput for NativeInput {
    /// The native header is checked once its 8 bytes are buffered.
    fn header(&mut self, conn: &Arc<Conn>, data: &[u8]) -> Result<Option<usize>, Refused> {
        let n = PROTOCOL_HEADER.len();
        if data.len() < n {
            return Ok(None);
        }
        let got = &data[..n];
        if got != PROTOCOL_HEADER {
            let hint = if got.starts_with(b"AMQP") {
                " (an AMQP 0-9-1 client: this port speaks RelayMQ's native protocol; AMQP 0-9-1 is served on the --amqp-listen port, default 5672)"
            } else {
                tls_hint(got)
            };
            log::warn!(
                "connection {} ({}): bad protocol header {got:02x?}{hint}; answering with ours and closing",
                conn.id,
                conn.peer,
            );
            return Err(refuse_header(conn, &PROTOCOL_HEADER));
        }
        Ok(Some(n))
    }

    fn frames(&mut self, conn: &Arc<Conn>, gate: &mut PublishGate, data: &[u8]) -> Consumed {
        let mut at = 0;
        while !gate.is_blocked() {
            let frame_max = conn.frame_max.load(Ordering::Acquire);
            match frame::check(&data[at..], frame_max) {
                Ok(None) => break,
                Ok(Some((header, n))) => {
                    let payload = &data[at + FRAME_HEADER_BYTES..at + n];
                    at += n;
                    self.frame(conn, gate, &header, payload)?;
                }
                Err(e) => return Err(violation(conn, ReplyCode::FrameError, e.message)),
            }
        }
        Ok(at)
    }
}

/// Decodes one whole payload into an event for the mailbox (through the publish gate).
fn decode(
    conn: &Arc<Conn>,
    gate: &mut PublishGate,
    channel: u16,
    payload: &[u8],
) -> Result<(), Refused> {
    let cost = mailbox_cost(payload.len());
    if payload.starts_with(&PUBLISH_METHOD_ID.to_be_bytes()) {
        // The hot path: one copy of the payload, no per-message allocation. A payload it
        // refuses falls through to `Method::decode`, which names the fault.
        if let Ok((request_id, batch)) = PublishBatch::decode(payload) {
            let event = NativeEvent::Publish {
                channel,
                request_id,
                batch,
            };
            push_admitted(conn, gate, event, cost);
            return Ok(());
        }
    }
    match Method::decode(payload) {
        Ok((request_id, method)) => {
            let event = NativeEvent::Method {
                channel,
                request_id,
                method,
            };
            push_admitted(conn, gate, event, cost);
            Ok(())
        }
        Err(e) => {
            let id = if payload.len() >= 2 {
                u16::from_be_bytes([payload[0], payload[1]])
            } else {
                0
            };
            let text = format!("malformed {} frame: {}", method_name(id), e.message);
            Err(violation(conn, ReplyCode::SyntaxError, text))
        }
    }
}

/// Hands a decoded event to the mailbox unless the publish gate holds it (a publish
/// during a resource alarm).
fn push_admitted(conn: &Arc<Conn>, gate: &mut PublishGate, event: NativeEvent, cost: usize) {
    if let Some((event, cost)) = gate.admit(conn, Event::Native(event), cost) {
        conn.push(event, cost);
    }
}
