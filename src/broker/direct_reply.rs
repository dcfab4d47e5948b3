//! Direct reply-to (RabbitMQ's `amq.rabbitmq.reply-to`): a vhost's live reply names and
//! the channels they lead to.
//!
//! A requester consumes from the pseudo-queue [`names::DIRECT_REPLY_QUEUE`] (no-ack); its
//! channel then has one reply name, `amq.rabbitmq.reply-to.<connection id>-<channel>.<key>`,
//! which a publish on that channel with `reply_to: amq.rabbitmq.reply-to` carries instead.
//! A message published to the default exchange with that name as routing key goes
//! straight to the requester's consumer, through no queue. The key is 22 URL-safe base64
//! characters of a random v4 UUID (122 random bits from the OS): a name is found only by
//! an exact match in [`ReplyTargets`], so knowing a connection id and channel number is
//! not enough to reach that channel (RabbitMQ encodes node and pid plus a random key,
//! `rabbit_volatile_queue.erl`, `new_name/0`, and checks the whole name,
//! `rabbit_channel.erl`, `has_state`).
//!
//! The map holds one entry per channel with a reply consumer (a channel has at most one:
//! RabbitMQ's "reply consumer already set"), so it is bounded by the open channels. An
//! entry lives as long as its [`ReplyRegistration`], which the channel's session keeps
//! and drops on `basic.cancel`, channel close and connection close. Its lock is a leaf:
//! taken only to copy an entry out, never while delivering (docs/architecture.md §8).
//!
//! The session side (consume, the `reply_to` rewrite, routing a reply, `queue.declare`)
//! is `broker/session/direct_reply.rs`; docs/amqp.md, "Direct reply-to", describes the
//! behaviour and where it differs from RabbitMQ.

use crate::broker::channel::ReplyOffer;
use crate::broker::consumer::Consumer;
use crate::broker::message::Message;
use crate::broker::names;
use base64::Engine;
use std::collections::HashMap;
use std::sync::{Arc, RwLock};

/// A vhost's live reply names, each with the no-ack consumer its replies go to.
#[derive(Debug, Default)]
pub struct ReplyTargets {
    map: RwLock<HashMap<Arc<str>, Arc<Consumer>>>,
}

/// What became of a reply published to a reply name ([`ReplyTargets::deliver`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReplyRouted {
    /// Pushed to the requester's consumer.
    Delivered,
    /// The requester is there but its connection's outbound backlog had no room: the
    /// reply was dropped. Counts as routed (no `basic.return`), as RabbitMQ 4.2+ counts a
    /// reply to any reply name whose node it knows.
    Dropped,
    /// No requester has that name (never had, or cancelled, or its channel or connection
    /// closed): not routed, so a mandatory publish is returned.
    Gone,
}

impl ReplyTargets {
    /// Registers `consumer` (on its channel, of connection `connection_id`) under a fresh
    /// reply name; the name stays routable until the returned registration is dropped.
    pub fn register(
        self: &Arc<Self>,
        connection_id: u64,
        consumer: Arc<Consumer>,
    ) -> ReplyRegistration {
        let name: Arc<str> = Arc::from(reply_name(connection_id, consumer.channel.number));
        let tag = Arc::clone(&consumer.tag);
        self.write().insert(Arc::clone(&name), consumer);
        ReplyRegistration {
            name,
            tag,
            targets: Arc::clone(self),
        }
    }

    /// Whether `name` is a live reply name (what `queue.declare` of it answers).
    pub fn contains(&self, name: &str) -> bool {
        self.read().contains_key(name)
    }

    /// Live reply names, one per channel with a reply consumer.
    pub fn len(&self) -> usize {
        self.read().len()
    }

    /// Whether no channel has a reply consumer.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Pushes `msg` to the consumer registered under `name`, if any (the map's lock is
    /// released before the channel's is taken).
    pub fn deliver(&self, name: &str, msg: &Message) -> ReplyRouted {
        let Some(consumer) = self.read().get(name).cloned() else {
            return ReplyRouted::Gone;
        };
        match consumer.channel.deliver_reply(&consumer, msg) {
            ReplyOffer::Delivered => ReplyRouted::Delivered,
            ReplyOffer::Full => {
                log::debug!(
                    "direct reply to {name} dropped: the requester's outbound buffer is full \
                     (connection {}, channel {})",
                    consumer.channel.connection_id,
                    consumer.channel.number
                );
                ReplyRouted::Dropped
            }
            ReplyOffer::Closed => ReplyRouted::Gone,
        }
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, HashMap<Arc<str>, Arc<Consumer>>> {
        // Inserts and removes are whole: a poisoned map is still consistent.
        self.map.read().unwrap_or_else(|e| e.into_inner())
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, HashMap<Arc<str>, Arc<Consumer>>> {
        self.map.write().unwrap_or_else(|e| e.into_inner())
    }
}

/// A channel's reply consumer and its name, routable while this lives.
#[derive(Debug)]
pub struct ReplyRegistration {
    name: Arc<str>,
    tag: Arc<str>,
    targets: Arc<ReplyTargets>,
}

impl ReplyRegistration {
    /// The reply name, `amq.rabbitmq.reply-to.<token>`.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The reply consumer's tag.
    pub fn consumer_tag(&self) -> &str {
        &self.tag
    }
}

impl Drop for ReplyRegistration {
    /// The name stops being routable: replies to it are [`ReplyRouted::Gone`].
    fn drop(&mut self) {
        let removed = self.targets.write().remove(&self.name);
        if let Some(consumer) = removed {
            // A reply that found the entry just before is written before this returns,
            // so nothing follows a `basic.cancel-ok`.
            consumer.channel.stop_consumer(&consumer);
        }
    }
}

/// A fresh reply name for channel `channel` of connection `connection_id`:
/// `amq.rabbitmq.reply-to.<connection id>-<channel>.<key>`, the key 22 URL-safe base64
/// characters of a random v4 UUID. At most 22 + 20 + 1 + 5 + 1 + 22 = 71 bytes, within
/// a `shortstr` routing key.
pub fn reply_name(connection_id: u64, channel: u16) -> String {
    let key = uuid::Uuid::new_v4();
    let mut s = format!("{}{connection_id}-{channel}.", names::DIRECT_REPLY_PREFIX);
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode_string(key.as_bytes(), &mut s);
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reply_names_carry_connection_and_channel_and_a_fresh_key() {
        let a = reply_name(42, 7);
        let b = reply_name(42, 7);
        assert!(a.starts_with("amq.rabbitmq.reply-to.42-7."), "{a}");
        assert!(names::is_direct_reply(&a));
        assert_ne!(a, b, "a new key every time");
        assert_eq!(a.len(), "amq.rabbitmq.reply-to.42-7.".len() + 22);
        let longest = reply_name(u64::MAX, u16::MAX);
        assert!(longest.len() <= 255, "{longest}");
    }
}
