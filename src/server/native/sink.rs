//! The native protocol's [`ClientSink`]: encodes the core's pushes as native frames into
//! a connection's outbound buffer.

use crate::broker::channel::Channel;
use crate::broker::{CancelReason, ClientSink, Message};
use crate::error::ReplyCode;
use crate::native::frame::write_method;
use crate::native::method::encode_delivery;
use crate::native::Method;
use crate::server::conn::{self, Conn};
use crate::server::event::ConnEvent;
use crate::server::outbound::Outbound;
use crate::types::codec::put_u32;
use std::sync::{Arc, Weak};

/// The head of a `basic.deliver` payload: method id 0x0056 and request id 0 (see
/// `native::method`); the batch count follows.
const DELIVER_HEAD: [u8; 6] = [0x00, 0x56, 0, 0, 0, 0];

/// Pushes for one native-protocol connection.
pub struct NativeSink {
    outbound: Arc<Outbound>,
    frame_max: u32,
    conn: Weak<Conn>,
}

impl NativeSink {
    /// A sink writing frames of at most `frame_max` bytes into `outbound`; force-closes go
    /// to `conn`'s mailbox.
    pub fn new(outbound: Arc<Outbound>, frame_max: u32, conn: Weak<Conn>) -> NativeSink {
        NativeSink {
            outbound,
            frame_max,
            conn,
        }
    }

    fn push(&self, channel: u16, method: &Method) {
        let frame_max = self.frame_max;
        self.outbound
            .write_with(|buf| write_method(buf, channel, frame_max, |b| method.encode(0, b)));
    }
}

impl ClientSink for NativeSink {
    fn deliver(
        &self,
        channel: u16,
        consumer_tag: &str,
        delivery_tag: u64,
        redelivered: bool,
        message: &Message,
    ) {
        // Consecutive deliveries on a channel share one `basic.deliver` batch frame
        // (docs/protocol.md): the client decodes and routes them together.
        self.outbound
            .write_batch_item(channel, self.frame_max, &DELIVER_HEAD, |b| {
                encode_delivery(
                    b,
                    consumer_tag,
                    delivery_tag,
                    redelivered,
                    message.exchange(),
                    message.routing_key(),
                    message.properties(),
                    &message.body,
                );
            });
    }

    fn deliver_reply(
        &self,
        channel: u16,
        consumer_tag: &str,
        delivery_tag: u64,
        message: &Message,
    ) -> bool {
        // A batch of one, in a frame of its own: a refused reply is taken back whole.
        let frame_max = self.frame_max;
        self.outbound.write_reply_with(|buf| {
            write_method(buf, channel, frame_max, |b| {
                b.extend_from_slice(&DELIVER_HEAD);
                put_u32(b, 1);
                encode_delivery(
                    b,
                    consumer_tag,
                    delivery_tag,
                    false,
                    message.exchange(),
                    message.routing_key(),
                    message.properties(),
                    &message.body,
                );
            });
        })
    }

    fn cancel(&self, channel: &Arc<Channel>, consumer_tag: &str, _reason: CancelReason) {
        // Every native client handles the server's cancel (docs/protocol.md); it is
        // written at once, whatever the reason.
        self.push(
            channel.number,
            &Method::BasicCancel {
                consumer_tag: consumer_tag.to_string(),
            },
        );
    }

    fn basic_return(
        &self,
        channel: u16,
        reply_code: ReplyCode,
        reply_text: &str,
        message: &Message,
    ) {
        self.push(
            channel,
            &Method::Return {
                reply_code: reply_code.as_u16(),
                reply_text: reply_text.to_string(),
                exchange: message.exchange().to_string(),
                routing_key: message.routing_key().to_string(),
                properties: Box::new(message.properties().clone()),
                body: message.body.to_vec(),
            },
        );
    }

    fn confirm(&self, channel: u16, seq: u64, multiple: bool, ack: bool) {
        let m = if ack {
            Method::Ack {
                delivery_tag: seq,
                multiple,
            }
        } else {
            Method::Nack {
                delivery_tag: seq,
                multiple,
                requeue: false,
            }
        };
        self.push(channel, &m);
    }

    fn is_saturated(&self) -> bool {
        self.outbound.is_saturated()
    }

    fn force_close(&self, code: ReplyCode, text: &str) {
        let text = text.to_string();
        conn::post(&self.conn, ConnEvent::ForceClose { code, text });
    }
}
