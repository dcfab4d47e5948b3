//! The AMQP 0-9-1 [`ClientSink`]: encodes the core's pushes (deliveries, returns,
//! publisher confirms) as AMQP frames into a connection's outbound buffer; server cancels
//! go to the connection's handler, which decides what the client is told.

use crate::amqp::{write_basic_deliver, write_content, write_method, AmqpMethod, BASIC_CLASS_ID};
use crate::broker::channel::Channel;
use crate::broker::{CancelReason, ClientSink, Message};
use crate::error::ReplyCode;
use crate::server::amqp::event::AmqpEvent;
use crate::server::conn::{self, Conn};
use crate::server::event::{ConnEvent, Event};
use crate::server::outbound::Outbound;
use std::sync::{Arc, Weak};

/// Pushes for one AMQP 0-9-1 connection.
pub struct AmqpSink {
    outbound: Arc<Outbound>,
    frame_max: u32,
    conn: Weak<Conn>,
}

impl AmqpSink {
    /// A sink writing frames of at most `frame_max` bytes (the negotiated size) into
    /// `outbound`; force-closes go to `conn`'s mailbox.
    pub fn new(outbound: Arc<Outbound>, frame_max: u32, conn: Weak<Conn>) -> AmqpSink {
        AmqpSink {
            outbound,
            frame_max,
            conn,
        }
    }

    fn push(&self, channel: u16, method: &AmqpMethod) {
        self.outbound
            .write_with(|buf| write_method(buf, channel, method));
    }

    /// Writes a content-carrying method, its content header and body frames, in one go so
    /// no other frame of the channel comes between them (AMQP 0-9-1 §4.2.6).
    fn push_content(&self, channel: u16, method: &AmqpMethod, message: &Message) {
        self.push_with_content(channel, message, |buf| write_method(buf, channel, method));
    }

    /// As `push_content`, the method frame written by `write_head`.
    fn push_with_content(
        &self,
        channel: u16,
        message: &Message,
        write_head: impl FnOnce(&mut Vec<u8>),
    ) {
        self.outbound
            .write_with(|buf| self.encode_content(buf, channel, message, write_head));
    }

    /// Encodes the method frame written by `write_head`, then the message's content
    /// header and body frames, into `buf`.
    fn encode_content(
        &self,
        buf: &mut Vec<u8>,
        channel: u16,
        message: &Message,
        write_head: impl FnOnce(&mut Vec<u8>),
    ) {
        write_head(buf);
        write_content(
            buf,
            channel,
            BASIC_CLASS_ID,
            message.properties(),
            &message.body,
            self.frame_max,
        );
    }
}

impl ClientSink for AmqpSink {
    fn deliver(
        &self,
        channel: u16,
        consumer_tag: &str,
        delivery_tag: u64,
        redelivered: bool,
        message: &Message,
    ) {
        self.push_with_content(channel, message, |buf| {
            write_basic_deliver(
                buf,
                channel,
                consumer_tag,
                delivery_tag,
                redelivered,
                message.exchange(),
                message.routing_key(),
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
        self.outbound.write_reply_with(|buf| {
            self.encode_content(buf, channel, message, |buf| {
                write_basic_deliver(
                    buf,
                    channel,
                    consumer_tag,
                    delivery_tag,
                    false,
                    message.exchange(),
                    message.routing_key(),
                );
            });
        })
    }

    fn cancel(&self, channel: &Arc<Channel>, consumer_tag: &str, reason: CancelReason) {
        // Not written here: the connection's handler tells the client once the method it
        // is running has been answered (RabbitMQ's channel answers `queue.delete-ok`
        // before the `basic.cancel` its own delete causes), and only as the client's
        // capabilities allow (`AmqpHandler`, consumer_cancel_notify).
        if let Some(conn) = self.conn.upgrade() {
            let event = AmqpEvent::ServerCancel {
                channel: Arc::clone(channel),
                consumer_tag: consumer_tag.to_string(),
                reason,
            };
            conn.push(Event::Amqp(event), 0);
        }
    }

    fn basic_return(
        &self,
        channel: u16,
        reply_code: ReplyCode,
        reply_text: &str,
        message: &Message,
    ) {
        let m = AmqpMethod::BasicReturn {
            reply_code: reply_code.as_u16(),
            reply_text: reply_text.to_string(),
            exchange: message.exchange().to_string(),
            routing_key: message.routing_key().to_string(),
        };
        self.push_content(channel, &m, message);
    }

    fn confirm(&self, channel: u16, seq: u64, multiple: bool, ack: bool) {
        let m = if ack {
            AmqpMethod::BasicAck {
                delivery_tag: seq,
                multiple,
            }
        } else {
            AmqpMethod::BasicNack {
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
