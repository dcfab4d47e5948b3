//! One client connection as the core sees it: its channels, consumers, publisher-confirm
//! counters, and every AMQP method a client can call.
//!
//! A protocol adapter owns one `Session` per connection and calls it from one worker at a
//! time (requests of a connection run in arrival order). Replies are the methods' return
//! values; pushes (deliveries, cancels, returns, confirms) go through the
//! [`ClientSink`]. Method names and reply codes follow AMQP 0-9-1 §1.8 (the class and
//! method reference) and RabbitMQ's extensions.

use crate::auth::permission::{Access, Resource};
use crate::broker::access::session::SessionAccess;
use crate::broker::channel::confirm::ConfirmTracker;
use crate::broker::channel::hasher::BuildChannelHasher;
use crate::broker::channel::{Channel, ChannelCounters};
use crate::broker::consumer::{consumer_priority, Consumer};
use crate::broker::dead_letter::jobs::{self, group_by_queue, jobs, requeue};
use crate::broker::delayed::{delay_of, hold_now_ms};
use crate::broker::exchange::header_routes::HeaderRoutes;
use crate::broker::exchange::Destination;
use crate::broker::message::body::MessageBody;
use crate::broker::message::{Message, RouteNames};
use crate::broker::names;
use crate::broker::node::Broker;
use crate::broker::queue::queue_type::QueueType;
use crate::broker::queue::Queue;
use crate::broker::queue::{ConsumerRemoved, Leaving};
use crate::broker::sink::ClientSink;
use crate::broker::topology::{self, RouteCache};
use crate::broker::vhost::{ExchangeSpec, QueueDeclared, QueueSpec, VirtualHost};
use crate::error::{BrokerError, ReplyCode};
use crate::storage::flusher::SyncWaiter;
use crate::types::{BasicProperties, FieldTable};
use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

mod direct_reply;

/// A message handed out by `basic.get`.
#[derive(Debug, Clone)]
pub struct GetResult {
    /// Delivery tag on the channel.
    pub delivery_tag: u64,
    /// Delivered before.
    pub redelivered: bool,
    /// Ready messages left in the queue.
    pub message_count: u32,
    /// The message.
    pub message: Arc<Message>,
}

#[derive(Debug)]
struct ChannelSession {
    shared: Arc<Channel>,
    consumers: HashMap<Arc<str>, Arc<Consumer>>,
    /// Set by `confirm.select`: the channel's confirm queue.
    confirms: Option<Arc<ConfirmTracker>>,
    /// Sequence number of the last publish in confirm mode (first is 1).
    publish_seq: u64,
    /// Highest sequence number routed but not yet confirmed to the client.
    confirm_pending: Option<u64>,
    /// Epoch that must be durable before `confirm_pending` may be acked (`--fsync always`).
    confirm_epoch: Option<u64>,
    /// The channel's direct reply-to consumer and name (`direct_reply`).
    direct_reply: Option<crate::broker::direct_reply::ReplyRegistration>,
}

/// The core state of one client connection.
pub struct Session {
    broker: Arc<Broker>,
    /// Server-assigned connection id.
    pub id: u64,
    vhost: Arc<VirtualHost>,
    sink: Arc<dyn ClientSink>,
    channels: HashMap<u16, ChannelSession, BuildChannelHasher>,
    channel_count: Arc<AtomicUsize>,
    channel_max: u16,
    /// The authenticated user: a published `user_id` property must name it.
    user: Option<String>,
    /// The user's permissions in the vhost; `None` (sessions made inside the broker, unit
    /// tests) checks nothing.
    access: Option<SessionAccess>,
    /// Recent publish routes, valid while the topology version is unchanged.
    routes: RouteCache,
}

impl Drop for Session {
    /// A session dropped without [`Session::close`] (an adapter bug) still leaves the
    /// channel registry: its channels are not closed or requeued, only forgotten.
    fn drop(&mut self) {
        for cs in self.channels.values() {
            self.broker.channel_registry().unregister(&cs.shared);
        }
    }
}

fn channel_not_open(n: u16) -> BrokerError {
    BrokerError::new(ReplyCode::ChannelError, format!("channel {n} is not open"))
}

impl Session {
    /// A session for connection `id` using `vhost`, allowing `channel_max` open channels at
    /// once (any numbers 1..=65535).
    /// `channel_count` is kept equal to the number of open channels (for listings).
    pub fn new(
        broker: Arc<Broker>,
        id: u64,
        vhost: Arc<VirtualHost>,
        sink: Arc<dyn ClientSink>,
        channel_max: u16,
        channel_count: Arc<AtomicUsize>,
    ) -> Session {
        Session {
            broker,
            id,
            vhost,
            sink,
            channels: HashMap::default(),
            channel_count,
            channel_max,
            user: None,
            access: None,
            routes: RouteCache::default(),
        }
    }

    /// Sets the authenticated user: every operation is then checked against the user's
    /// permissions in the vhost, and a publish whose `user_id` property names another user
    /// is refused (RabbitMQ's validated user-ID).
    pub fn with_user(mut self, user: &str) -> Session {
        self.user = Some(user.to_string());
        self.access = Some(SessionAccess::new(
            self.broker.users(),
            user,
            Arc::clone(&self.vhost.name),
        ));
        self
    }

    /// Checks the user's `access` to a resource (RabbitMQ's table of which operation needs
    /// which permission: docs/security.md).
    ///
    /// # Errors
    /// 403 ACCESS_REFUSED naming the resource.
    pub(crate) fn permit(
        &mut self,
        access: Access,
        resource: Resource,
        name: &str,
    ) -> Result<(), BrokerError> {
        match &mut self.access {
            Some(a) => a.check(self.broker.users(), access, resource, name),
            None => Ok(()),
        }
    }

    /// The authenticated user, when there is one.
    pub fn user(&self) -> Option<&str> {
        self.user.as_deref()
    }

    /// The broker this session belongs to.
    pub fn broker(&self) -> &Arc<Broker> {
        &self.broker
    }

    /// The vhost in use.
    pub fn vhost(&self) -> &Arc<VirtualHost> {
        &self.vhost
    }

    /// Whether channel `n` is open.
    pub fn has_channel(&self, n: u16) -> bool {
        self.channels.contains_key(&n)
    }

    /// Checks that channel `n` is open.
    ///
    /// # Errors
    /// 504 CHANNEL_ERROR when it is not.
    pub(crate) fn require_channel(&mut self, n: u16) -> Result<(), BrokerError> {
        self.channel(n).map(|_| ())
    }

    fn channel(&mut self, n: u16) -> Result<&mut ChannelSession, BrokerError> {
        self.channels.get_mut(&n).ok_or_else(|| channel_not_open(n))
    }

    fn check_vhost(&self) -> Result<(), BrokerError> {
        if self.vhost.is_deleted() {
            return Err(BrokerError::new(
                ReplyCode::ConnectionForced,
                format!("vhost '{}' is deleted", self.vhost.name),
            ));
        }
        Ok(())
    }

    /// Opens channel `n` (AMQP `channel.open`).
    ///
    /// # Errors
    /// 504 CHANNEL_ERROR when `n` is 0 or already open; 530 NOT_ALLOWED when the
    /// negotiated channel-max channels are open already, or the user's `max-channels`
    /// limit is reached (all close the connection).
    pub fn open_channel(&mut self, n: u16) -> Result<(), BrokerError> {
        if n == 0 || self.channels.contains_key(&n) {
            return Err(BrokerError::new(
                ReplyCode::ChannelError,
                format!("channel {n} is already open or invalid"),
            ));
        }
        // `channel_max` bounds how many channels are open at once, not their numbers: any
        // number 1..=65535 may be used (RabbitMQ's `rabbit_reader:create_channel`).
        let open = self.channels.len();
        if self.channel_max != 0 && open >= usize::from(self.channel_max) {
            return Err(BrokerError::new(
                ReplyCode::NotAllowed,
                format!(
                    "number of channels opened ({open}) has reached the negotiated \
                     channel_max ({})",
                    self.channel_max
                ),
            ));
        }
        if let Some(user) = &self.user {
            // RabbitMQ's user limit `max-channels`, over all the user's connections.
            self.broker.check_user_channel_limit(user)?;
        }
        let shared = Arc::new(Channel::new(self.id, n, Arc::clone(&self.sink)));
        self.broker
            .channel_registry()
            .register(&shared, &self.vhost);
        self.channels.insert(
            n,
            ChannelSession {
                shared,
                consumers: HashMap::new(),
                confirms: None,
                publish_seq: 0,
                confirm_pending: None,
                confirm_epoch: None,
                direct_reply: None,
            },
        );
        self.channel_count
            .store(self.channels.len(), Ordering::Relaxed);
        Ok(())
    }

    /// Whether `channel` is this session's open channel number `n` (not a channel that
    /// had the number before, closed since).
    pub fn is_channel(&self, n: u16, channel: &Arc<Channel>) -> bool {
        self.channels
            .get(&n)
            .is_some_and(|cs| Arc::ptr_eq(&cs.shared, channel))
    }

    /// Closes channel `n`: cancels its consumers and requeues its unacked deliveries
    /// (AMQP 0-9-1 §1.5.2.5 and basic class rules). Closing an unknown channel does nothing.
    pub fn close_channel(&mut self, n: u16) {
        let Some(cs) = self.channels.remove(&n) else {
            return;
        };
        self.channel_count
            .store(self.channels.len(), Ordering::Relaxed);
        let unacked = cs.shared.close();
        self.broker.channel_registry().unregister(&cs.shared);
        for c in cs.consumers.values() {
            self.detach_consumer(c);
        }
        // A closed channel's deliveries failed (RabbitMQ 4.3 counts them on quorum queues).
        let dead = requeue(unacked, true);
        jobs::run(&self.vhost, dead);
    }

    /// Closes every channel and deletes the connection's exclusive queues (the connection
    /// is closing).
    pub fn close(&mut self) {
        let numbers: Vec<u16> = self.channels.keys().copied().collect();
        for n in numbers {
            self.close_channel(n);
        }
        self.vhost.remove_exclusive_queues(self.id);
        self.broker.unregister_connection(self.id);
    }

    fn detach_consumer(&self, c: &Arc<Consumer>) {
        let Some(q) = self.vhost.queue(&c.queue) else {
            return;
        };
        if q.remove_consumer(&c.tag, self.id, c.channel.number) == ConsumerRemoved::LastOfAutoDelete
        {
            self.vhost.remove_queue(&q);
        }
    }

    /// AMQP `exchange.declare`.
    ///
    /// # Errors
    /// As [`VirtualHost::declare_exchange`]; 504 for a channel that is not open.
    pub fn exchange_declare(&mut self, ch: u16, spec: &ExchangeSpec) -> Result<(), BrokerError> {
        self.channel(ch)?;
        self.check_vhost()?;
        if !spec.passive {
            self.permit(Access::Configure, Resource::Exchange, &spec.name)?;
            if let Some(ae) = spec
                .arguments
                .get("alternate-exchange")
                .and_then(|v| v.as_str())
            {
                self.permit(Access::Write, Resource::Exchange, ae)?;
                self.permit(Access::Read, Resource::Exchange, &spec.name)?;
            }
        }
        self.vhost.declare_exchange(spec)
    }

    /// AMQP `exchange.delete`.
    ///
    /// # Errors
    /// As [`VirtualHost::delete_exchange`].
    pub fn exchange_delete(
        &mut self,
        ch: u16,
        name: &str,
        if_unused: bool,
    ) -> Result<(), BrokerError> {
        self.channel(ch)?;
        self.permit(Access::Configure, Resource::Exchange, name)?;
        self.vhost.delete_exchange(name, if_unused)
    }

    /// RabbitMQ `exchange.bind` (`destination` receives what `source` routes).
    ///
    /// # Errors
    /// As [`VirtualHost::bind`].
    pub fn exchange_bind(
        &mut self,
        ch: u16,
        destination: &str,
        source: &str,
        key: &str,
        args: &FieldTable,
    ) -> Result<(), BrokerError> {
        self.channel(ch)?;
        self.permit(Access::Write, Resource::Exchange, destination)?;
        self.permit(Access::Read, Resource::Exchange, source)?;
        self.vhost.bind(
            source,
            &Destination::Exchange(Arc::from(destination)),
            key,
            args,
            self.id,
        )
    }

    /// RabbitMQ `exchange.unbind`.
    ///
    /// # Errors
    /// As [`VirtualHost::unbind`].
    pub fn exchange_unbind(
        &mut self,
        ch: u16,
        destination: &str,
        source: &str,
        key: &str,
        args: &FieldTable,
    ) -> Result<(), BrokerError> {
        self.channel(ch)?;
        self.permit(Access::Write, Resource::Exchange, destination)?;
        self.permit(Access::Read, Resource::Exchange, source)?;
        self.vhost.unbind(
            source,
            &Destination::Exchange(Arc::from(destination)),
            key,
            args,
            self.id,
        )
    }

    /// AMQP `queue.declare`. A name starting `amq.rabbitmq.reply-to` is answered as
    /// RabbitMQ answers it, whatever the flags (`session/direct_reply.rs`).
    ///
    /// # Errors
    /// As [`VirtualHost::declare_queue`]; 404 for a reply name no channel has.
    pub fn queue_declare(
        &mut self,
        ch: u16,
        spec: &QueueSpec,
    ) -> Result<QueueDeclared, BrokerError> {
        if direct_reply::is_declared_as_reply(&spec.name) {
            return self.declare_direct_reply(ch, &spec.name);
        }
        self.channel(ch)?;
        self.check_vhost()?;
        if spec.passive {
            return self.vhost.declare_queue(spec, self.id);
        }
        // A server-named queue is checked under the name it will get, as in RabbitMQ.
        let generated = spec.name.is_empty().then(|| names::generate("amq.gen-"));
        let name = generated.as_deref().unwrap_or(&spec.name).to_string();
        self.permit(Access::Configure, Resource::Queue, &name)?;
        if let Some(dlx) = spec
            .arguments
            .get("x-dead-letter-exchange")
            .and_then(|v| v.as_str())
        {
            self.permit(Access::Write, Resource::Exchange, dlx)?;
            self.permit(Access::Read, Resource::Queue, &name)?;
        }
        self.vhost.declare_queue_as(spec, generated, self.id)
    }

    /// AMQP `queue.bind`.
    ///
    /// # Errors
    /// As [`VirtualHost::bind`]; 403 for a direct reply-to name as the queue.
    pub fn queue_bind(
        &mut self,
        ch: u16,
        queue: &str,
        exchange: &str,
        key: &str,
        args: &FieldTable,
    ) -> Result<(), BrokerError> {
        self.channel(ch)?;
        direct_reply::check_bindable(queue)?;
        self.permit(Access::Write, Resource::Queue, queue)?;
        self.permit(Access::Read, Resource::Exchange, exchange)?;
        self.vhost.bind(
            exchange,
            &Destination::Queue(Arc::from(queue)),
            key,
            args,
            self.id,
        )
    }

    /// AMQP `queue.unbind`.
    ///
    /// # Errors
    /// As [`VirtualHost::unbind`]; 403 for a direct reply-to name as the queue.
    pub fn queue_unbind(
        &mut self,
        ch: u16,
        queue: &str,
        exchange: &str,
        key: &str,
        args: &FieldTable,
    ) -> Result<(), BrokerError> {
        self.channel(ch)?;
        direct_reply::check_bindable(queue)?;
        self.permit(Access::Write, Resource::Queue, queue)?;
        self.permit(Access::Read, Resource::Exchange, exchange)?;
        self.vhost.unbind(
            exchange,
            &Destination::Queue(Arc::from(queue)),
            key,
            args,
            self.id,
        )
    }

    /// AMQP `queue.purge`: removes ready messages, returns how many.
    ///
    /// # Errors
    /// 404 absent; 405 exclusive to another connection.
    pub fn queue_purge(&mut self, ch: u16, queue: &str) -> Result<u32, BrokerError> {
        self.channel(ch)?;
        self.permit(Access::Read, Resource::Queue, queue)?;
        let q = self.vhost.queue_for(queue, self.id)?;
        Ok(q.purge() as u32)
    }

    /// AMQP `queue.delete`: returns the ready messages deleted.
    ///
    /// # Errors
    /// As [`VirtualHost::delete_queue`].
    pub fn queue_delete(
        &mut self,
        ch: u16,
        queue: &str,
        if_unused: bool,
        if_empty: bool,
    ) -> Result<u32, BrokerError> {
        self.channel(ch)?;
        self.permit(Access::Configure, Resource::Queue, queue)?;
        self.vhost.delete_queue(queue, if_unused, if_empty, self.id)
    }

    /// AMQP `basic.qos` with RabbitMQ's meaning of `global`.
    ///
    /// # Errors
    /// 504 for a channel that is not open.
    pub fn basic_qos(
        &mut self,
        ch: u16,
        prefetch_count: u16,
        global: bool,
    ) -> Result<(), BrokerError> {
        let cs = self.channel(ch)?;
        cs.shared.set_prefetch(prefetch_count, global);
        // A larger limit may let waiting messages flow.
        self.dispatch_channel(ch);
        Ok(())
    }

    /// AMQP `basic.consume`. `reply` is called with the consumer tag once the consumer is
    /// accepted and before any delivery to it is pushed, so `consume-ok` precedes them.
    /// On `amq.rabbitmq.reply-to` it makes the channel's direct reply consumer instead,
    /// with the errors of `Session::consume_direct_reply` (`session/direct_reply.rs`).
    ///
    /// # Errors
    /// 404 absent queue; 405 exclusive queue of another connection; 403 queue in exclusive
    /// use; 530 NOT_ALLOWED for a tag already used on the channel; 406 for a tag longer
    /// than `name_bytes_max`, or when the channel has `consumers_per_channel_max`
    /// consumers (RabbitMQ's `consumer_max_per_channel` wording, but a channel error: the
    /// connection's other channels keep serving).
    #[allow(
        clippy::too_many_arguments,
        reason = "basic.consume's own fields, as AMQP lists them"
    )]
    pub fn basic_consume(
        &mut self,
        ch: u16,
        queue: &str,
        consumer_tag: &str,
        no_ack: bool,
        exclusive: bool,
        arguments: &FieldTable,
        reply: impl FnOnce(&str),
    ) -> Result<(), BrokerError> {
        if queue == names::DIRECT_REPLY_QUEUE {
            return self.consume_direct_reply(ch, consumer_tag, no_ack, arguments, reply);
        }
        let q = {
            self.channel(ch)?;
            self.check_vhost()?;
            self.permit(Access::Read, Resource::Queue, queue)?;
            self.vhost.queue_for(queue, self.id)?
        };
        let vhost_name = Arc::clone(&self.vhost.name);
        let limits = self.broker.limits();
        let (name_max, consumers_max) =
            (limits.name_bytes_max(), limits.consumers_per_channel_max());
        crate::broker::vhost::check_name_bytes("consumer tag", consumer_tag, name_max)?;
        consumer_priority(arguments)
            .map_err(|e| crate::broker::vhost::naming_the_queue(e, &q.name, &vhost_name))?;
        let cs = self.channel(ch)?;
        if q.queue_type == QueueType::Quorum && cs.shared.info().channel_prefetch > 0 {
            return Err(QueueType::global_qos_refused(&q.name, &vhost_name));
        }
        cs.consumers.retain(|_, c| !c.is_cancelled());
        if cs.consumers.len() >= consumers_max {
            return Err(BrokerError::precondition(format!(
                "reached maximum ({consumers_max}) of consumers per channel"
            )));
        }
        let tag: Arc<str> = if consumer_tag.is_empty() {
            Arc::from(names::generate("amq.ctag-"))
        } else {
            Arc::from(consumer_tag)
        };
        if cs.consumers.contains_key(&tag) {
            return Err(BrokerError::new(
                ReplyCode::NotAllowed,
                format!("attempt to reuse consumer tag '{tag}'"),
            ));
        }
        let consumer = Arc::new(Consumer::new(
            Arc::clone(&tag),
            Arc::clone(&q.name),
            Arc::clone(&cs.shared),
            no_ack,
            exclusive,
            cs.shared.consumer_prefetch(),
            arguments.clone(),
        ));
        q.add_consumer(Arc::clone(&consumer), &vhost_name, || reply(&tag))?;
        cs.consumers.insert(tag, consumer);
        Ok(())
    }

    /// AMQP `basic.cancel`. Cancelling an unknown tag succeeds, as in RabbitMQ.
    ///
    /// # Errors
    /// 504 for a channel that is not open.
    pub fn basic_cancel(&mut self, ch: u16, consumer_tag: &str) -> Result<(), BrokerError> {
        let cs = self.channel(ch)?;
        direct_reply::cancelled(cs, consumer_tag);
        if let Some(c) = cs.consumers.remove(consumer_tag) {
            self.detach_consumer(&c);
        }
        Ok(())
    }

    /// AMQP `basic.publish` of one message. In confirm mode the message gets the next
    /// sequence number; its ack is sent by [`Session::flush_confirms`]. A `reply_to` of
    /// `amq.rabbitmq.reply-to` is replaced by the channel's reply name, and a routing key
    /// that is a live reply name (default exchange) delivers to its requester directly
    /// (`session/direct_reply.rs`).
    ///
    /// # Errors
    /// 406 "fast reply consumer does not exist" for `reply_to: amq.rabbitmq.reply-to` on a
    /// channel without a reply consumer; 406 body over the maximum, an invalid
    /// `expiration`, a `user_id` that is not the authenticated user's, or a `CC`/`BCC` header that is not an array; 404 absent
    /// exchange; 403
    /// internal exchange; 504 for a channel that is not open. The message is then not published and not confirmed.
    pub fn basic_publish(
        &mut self,
        ch: u16,
        exchange: &str,
        routing_key: &str,
        mandatory: bool,
        properties: Option<Box<BasicProperties>>,
        body: impl AsRef<[u8]> + Into<MessageBody>,
    ) -> Result<(), BrokerError> {
        let max = self.broker.limits().message_bytes_max();
        self.channel(ch)?;
        self.check_vhost()?;
        let size = body.as_ref().len();
        if size > max {
            return Err(BrokerError::precondition(format!(
                "message size {size} is larger than configured max size {max}"
            )));
        }
        if let Some(props) = &properties {
            crate::broker::queue::args::expiration_ms(props)?;
            if let (Some(claimed), Some(user)) = (&props.user_id, &self.user) {
                if claimed != user {
                    return Err(BrokerError::precondition(format!(
                        "user_id property set to '{claimed}' but authenticated user was '{user}'"
                    )));
                }
            }
        }
        let mut properties = properties;
        self.rewrite_reply_to(ch, properties.as_deref_mut())?;
        // RabbitMQ's sender-selected distribution: CC and BCC add routing keys, BCC is
        // removed here, before the message is stored or delivered.
        let header_routes = match properties.as_deref_mut() {
            Some(p) => HeaderRoutes::take(p)?,
            None => None,
        };
        // A message with header routes is routed by more than its exchange and routing
        // key: the route cache neither answers nor remembers it.
        // Read before routing: a change made meanwhile makes the entry stale. A route
        // depends on the topology and on the user's write permission: both versions only
        // grow, so their sum moves whenever either does.
        let version = topology::version().wrapping_add(self.broker.users().version());
        let cached = match header_routes {
            None => self.routes.get(version, exchange, routing_key),
            Some(_) => None,
        };
        let (msg, queues, ex) = if let Some(route) = cached {
            let msg = Message::with_names(Arc::clone(&route.names), properties, body);
            (
                Arc::new(msg),
                Arc::clone(&route.queues),
                Arc::clone(&route.exchange),
            )
        } else {
            self.permit(Access::Write, Resource::Exchange, exchange)?;
            let ex = self.vhost.exchange_for_publish(exchange)?;
            let names = Arc::new(RouteNames::with_header_routes(
                Arc::clone(&ex.name),
                routing_key.into(),
                header_routes,
            ));
            let msg = Arc::new(Message::with_names(Arc::clone(&names), properties, body));
            let (queues, keyed) = self.vhost.route_keyed(&ex, &msg);
            let queues: Arc<[Arc<Queue>]> = queues.into();
            if keyed {
                self.routes
                    .insert(version, Arc::clone(&ex), names, Arc::clone(&queues));
            }
            (msg, queues, ex)
        };
        let mut routed = 0u64;
        let mut sync: Option<u64> = None;
        let mut refused: Option<String> = None;
        // A delayed-message exchange holds a message with a positive `x-delay` instead of
        // routing it now (`broker/delayed`).
        let held = ex.delayed().and_then(|d| {
            delay_of(msg.properties()).map(|delay| d.hold(&msg, delay, hold_now_ms()))
        });
        let is_held = held.is_some();
        let queues: &[Arc<Queue>] = match held {
            None => &queues,
            Some(Ok(s)) => {
                sync = s;
                &[]
            }
            Some(Err(text)) => {
                refused = Some(text);
                &[]
            }
        };
        let enqueued = jobs::enqueue_all(queues, &msg);
        routed += enqueued.routed;
        sync = sync.max(enqueued.sync);
        refused = refused.or(enqueued.refused);
        let dead = enqueued.dead;
        if !is_held {
            routed += self.route_direct_replies(&ex, &msg);
        }
        jobs::run(&self.vhost, dead);
        ex.counters.published(routed);
        // A held message is routed later: unroutable now only for a mandatory publish,
        // which the plugin returns at once (it cannot know the queues of the due time).
        let unroutable = routed == 0 && refused.is_none() && (!is_held || mandatory);
        if unroutable {
            self.vhost.count_unroutable(mandatory);
            if mandatory {
                self.sink
                    .basic_return(ch, ReplyCode::NoRoute, "NO_ROUTE", &msg);
            }
        }
        if refused.is_some() && self.channel(ch)?.confirms.is_some() {
            // Confirms before this message go out as they are; this one is nacked (a
            // queue it was routed to could not take it), in order behind them.
            self.flush_confirms(ch);
        }
        let cs = self.channel(ch)?;
        // The channel's own counts, on the channel already looked up for its confirms.
        let counters = &cs.shared.counters;
        ChannelCounters::add(&counters.publish, 1);
        if unroutable && mandatory {
            ChannelCounters::add(&counters.return_unroutable, 1);
        } else if unroutable {
            ChannelCounters::add(&counters.drop_unroutable, 1);
        }
        if let Some(tracker) = &cs.confirms {
            cs.publish_seq += 1;
            if let Some(text) = &refused {
                // The publisher hears of it (the nack); a full queue would flood the log.
                log::debug!("nacking publish {} on channel {ch}: {text}", cs.publish_seq);
                tracker.confirm(cs.publish_seq, None, false);
            } else {
                cs.confirm_pending = Some(cs.publish_seq);
                cs.confirm_epoch = cs.confirm_epoch.max(sync);
            }
        } else if let Some(text) = refused {
            // Without confirms the publisher has no way to hear of it but the log.
            log::error!("persistent message dropped for a queue that cannot store it: {text}");
        }
        Ok(())
    }

    /// Sends the publisher confirm covering every message published on `ch` since the last
    /// flush (one `basic.ack` with `multiple`).
    pub fn flush_confirms(&mut self, ch: u16) {
        let Some(cs) = self.channels.get_mut(&ch) else {
            return;
        };
        let (Some(seq), Some(tracker)) = (cs.confirm_pending.take(), &cs.confirms) else {
            return;
        };
        let epoch = cs.confirm_epoch.take();
        if tracker.confirm(seq, epoch, true) {
            if let (Some(epoch), Some(flusher)) = (epoch, self.broker.flusher()) {
                flusher.wait(epoch, Arc::clone(tracker) as Arc<dyn SyncWaiter>);
            }
        }
    }

    /// AMQP `confirm.select`.
    ///
    /// # Errors
    /// 504 for a channel that is not open.
    pub fn confirm_select(&mut self, ch: u16) -> Result<(), BrokerError> {
        let sink = Arc::clone(&self.sink);
        let counters = Arc::clone(self.vhost.counters());
        let cs = self.channel(ch)?;
        if cs.confirms.is_none() {
            cs.shared
                .counters
                .confirm_mode
                .store(true, Ordering::Relaxed);
            cs.confirms = Some(Arc::new(ConfirmTracker::new(
                ch,
                sink,
                counters,
                Arc::clone(&cs.shared),
            )));
        }
        Ok(())
    }

    /// AMQP `basic.get`: takes the head message and calls `reply` with it (under the
    /// channel lock, so `get-ok` precedes any later delivery on the channel). Returns
    /// false when the queue had no ready message (the adapter answers `get-empty`).
    ///
    /// # Errors
    /// 404 absent queue; 405 exclusive queue of another connection.
    pub fn basic_get(
        &mut self,
        ch: u16,
        queue: &str,
        no_ack: bool,
        reply: impl FnOnce(GetResult),
    ) -> Result<bool, BrokerError> {
        let q = {
            self.channel(ch)?;
            self.permit(Access::Read, Resource::Queue, queue)?;
            self.vhost.queue_for(queue, self.id)?
        };
        if q.queue_type == QueueType::Quorum && q.is_single_active() {
            // RabbitMQ's text (`rabbit_channel:unsupported_single_active_consumer_error`).
            return Err(BrokerError::resource_locked(format!(
                "cannot obtain access to locked queue '{}' in vhost '{}'. basic.get operations \
                 are not supported by quorum queues with single active consumer",
                q.name, self.vhost.name
            )));
        }
        let channel = Arc::clone(&self.channel(ch)?.shared);
        let got = q.get(
            |entry, left| {
                channel.record_get(&q, entry, no_ack, |tag| {
                    reply(GetResult {
                        delivery_tag: tag,
                        redelivered: entry.redelivered,
                        message_count: left as u32,
                        message: Arc::clone(&entry.msg),
                    })
                })
            },
            !no_ack,
        );
        if got.is_none() {
            ChannelCounters::add(&channel.counters.get_empty, 1);
        }
        Ok(got.is_some())
    }

    /// Marks `ch` transactional (`tx.select`, kept by the AMQP adapter) for the
    /// management API's channel rows; nothing else changes.
    pub fn mark_transactional(&mut self, ch: u16) {
        if let Some(cs) = self.channels.get(&ch) {
            cs.shared
                .counters
                .transactional
                .store(true, Ordering::Relaxed);
        }
    }

    /// AMQP `basic.ack`.
    ///
    /// # Errors
    /// 406 unknown delivery tag; 504 channel not open.
    pub fn basic_ack(
        &mut self,
        ch: u16,
        delivery_tag: u64,
        multiple: bool,
    ) -> Result<(), BrokerError> {
        let shared = &self.channel(ch)?.shared;
        let taken = shared.take(delivery_tag, multiple)?;
        ChannelCounters::add(&shared.counters.ack, taken.len() as u64);
        for (q, entries) in group_by_queue(taken) {
            q.settle(&entries, true);
        }
        self.dispatch_channel(ch);
        Ok(())
    }

    /// AMQP `basic.nack` (RabbitMQ extension): requeue, or drop when `requeue` is false.
    ///
    /// # Errors
    /// 406 unknown delivery tag; 504 channel not open.
    pub fn basic_nack(
        &mut self,
        ch: u16,
        delivery_tag: u64,
        multiple: bool,
        requeue_them: bool,
    ) -> Result<(), BrokerError> {
        self.reject_deliveries(ch, delivery_tag, multiple, requeue_them, false)
    }

    /// `basic.nack` and `basic.reject`: requeue or dead-letter/drop. `failed`: a reject,
    /// which counts as a failed delivery on a quorum queue where a nack does not
    /// (RabbitMQ 4.3, docs/lifecycle.md "Quorum queues").
    fn reject_deliveries(
        &mut self,
        ch: u16,
        delivery_tag: u64,
        multiple: bool,
        requeue_them: bool,
        failed: bool,
    ) -> Result<(), BrokerError> {
        let taken = self.channel(ch)?.shared.take(delivery_tag, multiple)?;
        if requeue_them {
            let dead = requeue(taken, failed);
            jobs::run(&self.vhost, dead);
        } else {
            for (q, entries) in group_by_queue(taken) {
                if q.dead_letter().is_some() {
                    // In the target before it leaves the source (at-least-once): the
                    // jobs settle the records once the dead letters are durable.
                    let msgs = entries
                        .iter()
                        .map(|e| Leaving {
                            msg: Arc::clone(&e.msg),
                            record: e.record,
                        })
                        .collect();
                    q.settle_dead_lettered(&entries);
                    jobs::run(&self.vhost, jobs(&q, msgs, "rejected"));
                } else {
                    q.settle(&entries, false);
                }
            }
        }
        self.dispatch_channel(ch);
        Ok(())
    }

    /// AMQP `basic.reject`.
    ///
    /// # Errors
    /// 406 unknown delivery tag; 504 channel not open.
    pub fn basic_reject(
        &mut self,
        ch: u16,
        delivery_tag: u64,
        requeue_it: bool,
    ) -> Result<(), BrokerError> {
        self.reject_deliveries(ch, delivery_tag, false, requeue_it, true)
    }

    /// AMQP `basic.recover`: requeues every unacked delivery of the channel.
    ///
    /// # Errors
    /// 540 NOT_IMPLEMENTED for `requeue = false`, as RabbitMQ; 504 channel not open.
    pub fn basic_recover(&mut self, ch: u16, requeue_them: bool) -> Result<(), BrokerError> {
        let cs = self.channel(ch)?;
        if !requeue_them {
            return Err(BrokerError::new(ReplyCode::NotImplemented, "requeue=false"));
        }
        let taken = cs.shared.take_all();
        let dead = requeue(taken, false);
        jobs::run(&self.vhost, dead);
        self.dispatch_channel(ch);
        Ok(())
    }

    /// Dispatches every queue this connection consumes from (after its outbound buffer
    /// drained below the low-water mark).
    pub fn redispatch(&self) {
        let numbers: Vec<u16> = self.channels.keys().copied().collect();
        for n in numbers {
            self.dispatch_channel(n);
        }
    }

    fn dispatch_channel(&self, ch: u16) {
        let Some(cs) = self.channels.get(&ch) else {
            return;
        };
        let mut queues: Vec<&Arc<str>> = cs
            .consumers
            .values()
            .filter(|c| !c.is_cancelled())
            .map(|c| &c.queue)
            .collect();
        queues.sort_unstable();
        queues.dedup();
        for name in queues {
            if let Some(q) = self.vhost.queue(name) {
                q.dispatch();
            }
        }
    }
}
