//! Direct reply-to on a session (RabbitMQ's `amq.rabbitmq.reply-to`): consuming from the
//! pseudo-queue, the `reply_to` rewrite on publish, routing a reply to its requester,
//! `queue.declare` of a reply name, and the bindings refused.
//!
//! The rules and texts are RabbitMQ 4.x's `rabbit_channel.erl` (`basic.consume` and
//! `basic.cancel` clauses on `amq.rabbitmq.reply-to`, `override_reply_to/2`,
//! `queue.declare` of `amq.rabbitmq.reply-to…`, `reject_volatile_queue_as_binding_target`)
//! and `rabbit_volatile_queue.erl`; the registry of names is `broker/direct_reply.rs`;
//! docs/amqp.md, "Direct reply-to", says where RelayMQ differs.

use super::{ChannelSession, Session};
use crate::broker::consumer::Consumer;
use crate::broker::direct_reply::ReplyRouted;
use crate::broker::exchange::Exchange;
use crate::broker::message::Message;
use crate::broker::names;
use crate::broker::vhost::QueueDeclared;
use crate::error::{BrokerError, ReplyCode};
use crate::types::{BasicProperties, FieldTable};
use std::sync::Arc;

/// RabbitMQ's 406 text for a consume on the pseudo-queue that asks for acks.
pub const CANNOT_ACK_TEXT: &str = "reply consumer cannot acknowledge";

/// RabbitMQ's 406 text for a second reply consumer on a channel.
pub const ALREADY_SET_TEXT: &str = "reply consumer already set";

/// RabbitMQ's 406 text for a publish with `reply_to: amq.rabbitmq.reply-to` on a channel
/// without a reply consumer.
pub const NO_CONSUMER_TEXT: &str = "fast reply consumer does not exist";

/// RabbitMQ's (4.2.6+) 403 text for a binding to or from a reply name.
pub const NOT_BINDABLE_TEXT: &str = "cannot bind or unbind to a volatile (direct reply-to) queue";

impl Session {
    /// `basic.consume` on the pseudo-queue [`names::DIRECT_REPLY_QUEUE`]: the channel gets
    /// its reply consumer and reply name (no queue is declared or listed). `reply` is
    /// called with the consumer tag (given, or `amq.ctag-…` generated) before the name
    /// becomes routable.
    ///
    /// # Errors
    /// In RabbitMQ's order: 530 NOT_ALLOWED for a tag already used on the channel; 406
    /// for a tag over `name_bytes_max` or a channel at `consumers_per_channel_max` (as
    /// [`Session::basic_consume`]); 406 "reply consumer cannot acknowledge" unless
    /// `no_ack`; 406 "reply consumer already set" for a second one on the channel; 504
    /// for a channel that is not open; 320 for a deleted vhost.
    pub(super) fn consume_direct_reply(
        &mut self,
        ch: u16,
        consumer_tag: &str,
        no_ack: bool,
        arguments: &FieldTable,
        reply: impl FnOnce(&str),
    ) -> Result<(), BrokerError> {
        self.channel(ch)?;
        self.check_vhost()?;
        let limits = self.broker.limits();
        let (name_max, consumers_max) =
            (limits.name_bytes_max(), limits.consumers_per_channel_max());
        crate::broker::vhost::check_name_bytes("consumer tag", consumer_tag, name_max)?;
        let targets = Arc::clone(self.vhost.direct_replies());
        let connection_id = self.id;
        let cs = self.channel(ch)?;
        cs.consumers.retain(|_, c| !c.is_cancelled());
        if cs.consumers.contains_key(consumer_tag) {
            return Err(BrokerError::new(
                ReplyCode::NotAllowed,
                format!("attempt to reuse consumer tag '{consumer_tag}'"),
            ));
        }
        if cs.consumers.len() >= consumers_max {
            return Err(BrokerError::precondition(format!(
                "reached maximum ({consumers_max}) of consumers per channel"
            )));
        }
        if !no_ack {
            return Err(BrokerError::precondition(CANNOT_ACK_TEXT));
        }
        if cs.direct_reply.is_some() {
            return Err(BrokerError::precondition(ALREADY_SET_TEXT));
        }
        let tag: Arc<str> = if consumer_tag.is_empty() {
            Arc::from(names::generate("amq.ctag-"))
        } else {
            Arc::from(consumer_tag)
        };
        let consumer = Arc::new(Consumer::new(
            Arc::clone(&tag),
            Arc::from(names::DIRECT_REPLY_QUEUE),
            Arc::clone(&cs.shared),
            true,
            false,
            0,
            arguments.clone(),
        ));
        reply(&tag);
        cs.direct_reply = Some(targets.register(connection_id, Arc::clone(&consumer)));
        cs.consumers.insert(tag, consumer);
        Ok(())
    }

    /// RabbitMQ's `override_reply_to`: a publish whose `reply_to` is the pseudo-queue
    /// name carries the channel's reply name instead.
    ///
    /// # Errors
    /// 406 PRECONDITION_FAILED "fast reply consumer does not exist" when the channel has
    /// no reply consumer; 504 for a channel that is not open.
    pub(super) fn rewrite_reply_to(
        &mut self,
        ch: u16,
        properties: Option<&mut BasicProperties>,
    ) -> Result<(), BrokerError> {
        let Some(p) = properties else {
            return Ok(());
        };
        if p.reply_to.as_deref() != Some(names::DIRECT_REPLY_QUEUE) {
            return Ok(());
        }
        match &self.channel(ch)?.direct_reply {
            Some(r) => {
                p.reply_to = Some(r.name().to_string());
                Ok(())
            }
            None => Err(BrokerError::precondition(NO_CONSUMER_TEXT)),
        }
    }

    /// Pushes `msg`, published to `exchange`, to the requesters whose reply names are
    /// among its routing keys (the routing key and its `CC`/`BCC` keys; only through the
    /// default exchange, as no binding can name a reply name). Returns how many reply
    /// names it counts as routed to: delivered, or dropped for a full outbound buffer.
    pub(super) fn route_direct_replies(&self, exchange: &Exchange, msg: &Message) -> u64 {
        if !exchange.is_default() {
            return 0;
        }
        let mut keys: Vec<&str> = msg
            .routing_keys()
            .filter(|k| names::is_direct_reply(k))
            .collect();
        if keys.is_empty() {
            return 0;
        }
        // One delivery per requester, however often its name is listed.
        keys.sort_unstable();
        keys.dedup();
        let targets = self.vhost.direct_replies();
        keys.iter()
            .filter(|k| targets.deliver(k, msg) != ReplyRouted::Gone)
            .count() as u64
    }

    /// `queue.declare` of `amq.rabbitmq.reply-to` or a name under it, passive or not:
    /// answered as RabbitMQ answers it, 0 messages and 1 consumer for the pseudo-queue and
    /// for a live reply name of this vhost (CR and LF taken out of the name first).
    ///
    /// # Errors
    /// 404 NOT_FOUND "no queue '…' in vhost '…'" for a reply name no channel has (never
    /// had, or its consumer is cancelled or its channel closed); 504 for a channel that
    /// is not open.
    pub(super) fn declare_direct_reply(
        &mut self,
        ch: u16,
        name: &str,
    ) -> Result<QueueDeclared, BrokerError> {
        self.channel(ch)?;
        let name: String = name.chars().filter(|c| !matches!(c, '\r' | '\n')).collect();
        if name == names::DIRECT_REPLY_QUEUE || self.vhost.direct_replies().contains(&name) {
            return Ok(QueueDeclared {
                name,
                message_count: 0,
                consumer_count: 1,
            });
        }
        Err(BrokerError::not_found(format!(
            "no queue '{name}' in vhost '{}'",
            self.vhost.name
        )))
    }
}

/// Whether `name` is answered by [`Session::declare_direct_reply`]: the pseudo-queue or
/// any name starting with it (RabbitMQ's `queue.declare` clause matches the prefix
/// `amq.rabbitmq.reply-to`, dot or not).
pub(super) fn is_declared_as_reply(name: &str) -> bool {
    name.starts_with(names::DIRECT_REPLY_QUEUE)
}

/// Forgets the channel's reply consumer when `consumer_tag` is its tag (`basic.cancel`):
/// its name stops being routable at once.
pub(super) fn cancelled(cs: &mut ChannelSession, consumer_tag: &str) {
    if cs
        .direct_reply
        .as_ref()
        .is_some_and(|r| r.consumer_tag() == consumer_tag)
    {
        cs.direct_reply = None;
    }
}

/// Refuses a binding whose queue is a reply name.
///
/// # Errors
/// 403 ACCESS_REFUSED "cannot bind or unbind to a volatile (direct reply-to) queue"
/// (RabbitMQ 4.2.6+; earlier versions accepted such a binding, which did nothing).
pub(super) fn check_bindable(queue: &str) -> Result<(), BrokerError> {
    if names::is_direct_reply(queue) {
        return Err(BrokerError::access_refused(NOT_BINDABLE_TEXT));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::broker::channel::Channel;
    use crate::broker::sink::{CancelReason, ClientSink};
    use crate::broker::vhost::QueueSpec;
    use crate::broker::{Broker, BrokerConfig};
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    use std::sync::Mutex;

    /// One delivery as a client would see it.
    #[derive(Debug, Clone, PartialEq, Eq)]
    struct Seen {
        channel: u16,
        consumer_tag: String,
        delivery_tag: u64,
        routing_key: String,
        body: Vec<u8>,
    }

    /// Records deliveries and returns; `full` refuses direct replies.
    #[derive(Default)]
    struct Recorder {
        delivered: Mutex<Vec<Seen>>,
        returned: Mutex<Vec<(ReplyCode, String)>>,
        full: AtomicBool,
    }

    impl ClientSink for Recorder {
        fn deliver(&self, channel: u16, tag: &str, delivery_tag: u64, _: bool, m: &Message) {
            self.delivered.lock().unwrap().push(Seen {
                channel,
                consumer_tag: tag.into(),
                delivery_tag,
                routing_key: m.routing_key().into(),
                body: m.body.to_vec(),
            });
        }
        fn deliver_reply(&self, channel: u16, tag: &str, delivery_tag: u64, m: &Message) -> bool {
            if self.full.load(Ordering::Relaxed) {
                return false;
            }
            self.deliver(channel, tag, delivery_tag, false, m);
            true
        }
        fn cancel(&self, _: &Arc<Channel>, _: &str, _: CancelReason) {}
        fn basic_return(&self, _: u16, code: ReplyCode, _: &str, m: &Message) {
            self.returned
                .lock()
                .unwrap()
                .push((code, m.routing_key().into()));
        }
        fn confirm(&self, _: u16, _: u64, _: bool, _: bool) {}
        fn is_saturated(&self) -> bool {
            false
        }
        fn force_close(&self, _: ReplyCode, _: &str) {}
    }

    impl Recorder {
        fn delivered(&self) -> Vec<Seen> {
            self.delivered.lock().unwrap().clone()
        }
        fn returned(&self) -> Vec<(ReplyCode, String)> {
            self.returned.lock().unwrap().clone()
        }
    }

    fn session(broker: &Arc<Broker>, id: u64) -> (Session, Arc<Recorder>) {
        let sink = Arc::new(Recorder::default());
        let vhost = broker.vhost("/").unwrap();
        let mut s = Session::new(
            Arc::clone(broker),
            id,
            vhost,
            Arc::clone(&sink) as Arc<dyn ClientSink>,
            0,
            Arc::new(AtomicUsize::new(0)),
        );
        s.open_channel(1).unwrap();
        (s, sink)
    }

    fn consume(s: &mut Session, tag: &str, no_ack: bool) -> Result<String, BrokerError> {
        let mut got = String::new();
        let q = names::DIRECT_REPLY_QUEUE;
        s.basic_consume(1, q, tag, no_ack, false, &FieldTable::new(), |t| {
            got = t.to_string()
        })?;
        Ok(got)
    }

    fn publish(
        s: &mut Session,
        key: &str,
        mandatory: bool,
        reply_to: Option<&str>,
        body: &[u8],
    ) -> Result<(), BrokerError> {
        let props = BasicProperties {
            reply_to: reply_to.map(String::from),
            ..Default::default()
        };
        s.basic_publish(1, "", key, mandatory, Some(Box::new(props)), body.to_vec())
    }

    fn declare(s: &mut Session, name: &str) -> Result<QueueDeclared, BrokerError> {
        let spec = QueueSpec {
            name: name.into(),
            passive: true,
            ..QueueSpec::default()
        };
        s.queue_declare(1, &spec)
    }

    /// Publishes a request with `reply_to: amq.rabbitmq.reply-to` from `requester` through
    /// queue `requests` and returns the `reply_to` the responder gets with it.
    fn request(requester: &mut Session, responder: &mut Session) -> Option<String> {
        publish(
            requester,
            "requests",
            false,
            Some(names::DIRECT_REPLY_QUEUE),
            b"q",
        )
        .unwrap();
        let mut reply_to = None;
        responder
            .basic_get(1, "requests", true, |g| {
                reply_to = g.message.properties().reply_to.clone()
            })
            .unwrap();
        reply_to
    }

    /// A requester consuming on the pseudo-queue, a request published through queue
    /// `requests`, and the reply name it carried.
    fn rpc_setup() -> (
        Arc<Broker>,
        Session,
        Arc<Recorder>,
        Session,
        Arc<Recorder>,
        String,
    ) {
        let broker = Arc::new(Broker::new(BrokerConfig::default()));
        let (mut requester, rsink) = session(&broker, 1);
        let (mut responder, ssink) = session(&broker, 2);
        let spec = QueueSpec {
            name: "requests".into(),
            ..QueueSpec::default()
        };
        responder.queue_declare(1, &spec).unwrap();
        assert_eq!(consume(&mut requester, "replies", true).unwrap(), "replies");
        let name =
            request(&mut requester, &mut responder).expect("the request carries a reply name");
        (broker, requester, rsink, responder, ssink, name)
    }

    #[test]
    fn a_reply_goes_straight_to_the_requesters_consumer() {
        let (_b, mut requester, rsink, mut responder, ssink, name) = rpc_setup();
        assert!(name.starts_with("amq.rabbitmq.reply-to.1-1."), "{name}");
        publish(&mut responder, &name, true, None, b"answer").unwrap();
        publish(&mut responder, &name, true, None, b"again").unwrap();
        let seen = rsink.delivered();
        assert_eq!(seen.len(), 2, "{seen:?}");
        assert_eq!(
            seen[0],
            Seen {
                channel: 1,
                consumer_tag: "replies".into(),
                delivery_tag: 1,
                routing_key: name.clone(),
                body: b"answer".to_vec(),
            }
        );
        assert_eq!(seen[1].delivery_tag, 2);
        assert!(ssink.returned().is_empty(), "a delivered reply is routed");
        let live = declare(&mut responder, &name).unwrap();
        assert_eq!((live.message_count, live.consumer_count), (0, 1));
        let pseudo = declare(&mut responder, names::DIRECT_REPLY_QUEUE).unwrap();
        assert_eq!(pseudo.consumer_count, 1);
        // Neither the pseudo-queue nor the name is a queue, nor is the consumer listed.
        let vhost = Arc::clone(responder.vhost());
        assert_eq!(vhost.queue_count(), 1, "only `requests`");
        assert!(vhost.queue(&name).is_none() && vhost.queue(names::DIRECT_REPLY_QUEUE).is_none());
        let consumers = crate::broker::listing::consumers(&vhost, responder.broker());
        assert!(consumers.is_empty(), "{consumers:?}");
        // Each publish on the requester's channel carries the same name.
        let again = request(&mut requester, &mut responder);
        assert_eq!(again.as_deref(), Some(name.as_str()));
    }

    #[test]
    fn misuse_gets_rabbitmqs_errors() {
        let broker = Arc::new(Broker::new(BrokerConfig::default()));
        let (mut s, _sink) = session(&broker, 1);
        let err = publish(&mut s, "q", false, Some(names::DIRECT_REPLY_QUEUE), b"").unwrap_err();
        assert_eq!(
            (err.code, err.text.as_str()),
            (ReplyCode::PreconditionFailed, NO_CONSUMER_TEXT)
        );
        let err = consume(&mut s, "", false).unwrap_err();
        assert_eq!(
            (err.code, err.text.as_str()),
            (ReplyCode::PreconditionFailed, CANNOT_ACK_TEXT)
        );
        let tag = consume(&mut s, "", true).unwrap();
        assert!(tag.starts_with("amq.ctag-"), "{tag}");
        let err = consume(&mut s, "other", true).unwrap_err();
        assert_eq!(
            (err.code, err.text.as_str()),
            (ReplyCode::PreconditionFailed, ALREADY_SET_TEXT)
        );
        let err = consume(&mut s, &tag, true).unwrap_err();
        assert_eq!(err.code, ReplyCode::NotAllowed, "{}", err.text);
        let err = s
            .queue_bind(
                1,
                "amq.rabbitmq.reply-to.x",
                "amq.direct",
                "k",
                &FieldTable::new(),
            )
            .unwrap_err();
        assert_eq!(
            (err.code, err.text.as_str()),
            (ReplyCode::AccessRefused, NOT_BINDABLE_TEXT)
        );
    }

    #[test]
    fn a_reply_to_a_gone_requester_is_returned_when_mandatory_and_dropped_otherwise() {
        let (_b, mut requester, rsink, mut responder, ssink, name) = rpc_setup();
        // A forged name: the requester's connection and channel, another key.
        let forged = format!("{}1-1.AAAAAAAAAAAAAAAAAAAAAA", names::DIRECT_REPLY_PREFIX);
        publish(&mut responder, &forged, true, None, b"forged").unwrap();
        assert_eq!(ssink.returned(), vec![(ReplyCode::NoRoute, forged.clone())]);
        assert_eq!(
            declare(&mut responder, &forged).unwrap_err().code,
            ReplyCode::NotFound
        );

        requester.basic_cancel(1, "replies").unwrap();
        publish(&mut responder, &name, false, None, b"dropped").unwrap();
        publish(&mut responder, &name, true, None, b"returned").unwrap();
        assert!(rsink.delivered().is_empty(), "{:?}", rsink.delivered());
        assert_eq!(ssink.returned()[1..], [(ReplyCode::NoRoute, name.clone())]);
        let err = declare(&mut responder, &name).unwrap_err();
        assert_eq!(
            (err.code, err.text),
            (
                ReplyCode::NotFound,
                format!("no queue '{name}' in vhost '/'")
            )
        );
        // After a cancel the channel may consume again, under a new name.
        consume(&mut requester, "replies", true).unwrap();
        let renewed = request(&mut requester, &mut responder).unwrap();
        assert_ne!(renewed, name);
        // Closing the channel (or the connection) ends the name too.
        requester.close_channel(1);
        publish(&mut responder, &renewed, true, None, b"closed").unwrap();
        assert_eq!(ssink.returned().len(), 3);
        assert!(rsink.delivered().is_empty());
        assert!(responder.vhost().direct_replies().is_empty());
    }

    #[test]
    fn a_reply_the_requester_has_no_room_for_is_dropped_as_routed_and_uses_no_tag() {
        let (_b, _requester, rsink, mut responder, ssink, name) = rpc_setup();
        rsink.full.store(true, Ordering::Relaxed);
        publish(&mut responder, &name, true, None, b"no room").unwrap();
        assert!(ssink.returned().is_empty(), "the requester exists: routed");
        rsink.full.store(false, Ordering::Relaxed);
        publish(&mut responder, &name, true, None, b"room").unwrap();
        let seen = rsink.delivered();
        assert_eq!(seen.len(), 1);
        assert_eq!((seen[0].delivery_tag, &seen[0].body[..]), (1, &b"room"[..]));
    }
}
