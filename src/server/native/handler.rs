//! The native protocol adapter: turns decoded methods into [`Session`] calls and results
//! into reply frames; handles the connection and channel close handshakes.
//!
//! Channel errors close only the channel (the server sends `channel.close` with the
//! failing request's id and ignores the channel until `close-ok`); connection errors send
//! `connection.close` and close the socket once it is flushed (AMQP 0-9-1 §1.4.2).

use crate::auth::users::{TAG_ADMINISTRATOR, TAG_MONITORING};
use crate::broker::access::LoginStep;
use crate::broker::{listing, Broker, ConnectionInfo, ExchangeSpec, QueueSpec, Session};
use crate::error::{BrokerError, ReplyCode};
use crate::limits::{FRAME_BYTES_MIN, LIST_ROWS_MAX};
use crate::native::frame::write_method;
use crate::native::publish_batch::PUBLISH_METHOD_ID;
use crate::native::{ListKind, Method, PublishBatch};
use crate::server::config::negotiate;
use crate::server::conn::{Conn, Event};
use crate::server::conn_log::{self, Who};
use crate::server::native::admin;
use crate::server::native::methods::defer_login;
use crate::server::native::sink::NativeSink;
use crate::server::outbound::Outbound;
use std::collections::HashSet;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Weak};
use std::time::SystemTime;

enum State {
    /// Waiting for `connection.open`.
    AwaitOpen,
    /// `connection.open` received; its password is being checked.
    Authenticating(Box<PendingOpen>),
    /// Open and serving.
    Open(Box<Session>),
    /// `connection.close` sent or received; everything else is ignored.
    Closing,
}

/// Requests a native client may pipeline behind `connection.open` while its password is
/// checked; more close the connection (503). Before `open-ok` each payload is at most
/// `FRAME_BYTES_HANDSHAKE` (64 KiB), so these stay small.
const HELD_EVENTS_MAX: usize = 16;

/// A `connection.open` waiting for its password check.
struct PendingOpen {
    request_id: u32,
    user: String,
    vhost: String,
    frame_max: u32,
    heartbeat_s: u16,
    channel_max: u16,
    client_name: String,
}

/// Protocol state of one native connection; run by one worker at a time.
pub struct Handler {
    broker: Arc<Broker>,
    conn: Weak<Conn>,
    id: u64,
    peer: SocketAddr,
    local: SocketAddr,
    outbound: Arc<Outbound>,
    frame_max: u32,
    state: State,
    /// Channels the server closed and that await the client's `close-ok`.
    closing_channels: HashSet<u16>,
    /// Requests received while `connection.open` waits for its password check, replayed
    /// in order once it is accepted (at most [`HELD_EVENTS_MAX`]).
    held: Vec<Event>,
}

impl Handler {
    /// A handler for a connection that has not opened yet; `peer` and `local` are the
    /// socket's two addresses.
    #[allow(
        clippy::too_many_arguments,
        reason = "the connection's shared state, given once at accept"
    )]
    pub fn new(
        broker: Arc<Broker>,
        conn: Weak<Conn>,
        id: u64,
        peer: SocketAddr,
        local: SocketAddr,
        outbound: Arc<Outbound>,
        frame_max: u32,
    ) -> Handler {
        Handler {
            broker,
            conn,
            id,
            peer,
            local,
            outbound,
            frame_max,
            state: State::AwaitOpen,
            closing_channels: HashSet::new(),
            held: Vec::new(),
        }
    }

    fn send(&self, channel: u16, request_id: u32, method: &Method) {
        let frame_max = self.frame_max;
        self.outbound.write_with(|buf| {
            write_method(buf, channel, frame_max, |b| method.encode(request_id, b))
        });
    }

    /// Executes one event.
    pub fn handle(&mut self, event: Event) {
        if matches!(self.state, State::Authenticating(_))
            && matches!(
                event,
                Event::Method { .. } | Event::Publish { .. } | Event::Oversized { .. }
            )
        {
            // Requests pipelined behind connection.open wait for its password check.
            if self.held.len() < HELD_EVENTS_MAX {
                self.held.push(event);
            } else {
                self.held.clear();
                let text = format!(
                    "more than {HELD_EVENTS_MAX} requests before connection.open was answered"
                );
                self.close_connection(ReplyCode::CommandInvalid, &text, 0, 0);
            }
            return;
        }
        match event {
            Event::Method {
                channel,
                request_id,
                method,
            } => self.method(channel, request_id, method),
            Event::Publish {
                channel,
                request_id,
                batch,
            } => self.publish(channel, request_id, batch),
            Event::Oversized {
                channel,
                method_id,
                request_id,
                size,
            } => {
                let max = self.broker.limits().message_bytes_max();
                let err = BrokerError::precondition(format!(
                    "a {size}-byte payload (message, properties and names) is larger than \
                     the configured max message size {max}"
                ));
                if self.closing_channels.contains(&channel) {
                    // Already being closed: everything on it is ignored until close-ok.
                } else if channel != 0 && self.session().is_some_and(|s| s.has_channel(channel)) {
                    self.fail(channel, request_id, method_id, err);
                } else {
                    self.close_connection(ReplyCode::FrameError, &err.text, method_id, request_id);
                }
            }
            Event::LoginChecked { result } => {
                if let State::Authenticating(open) =
                    std::mem::replace(&mut self.state, State::AwaitOpen)
                {
                    match result {
                        Ok(()) => {
                            self.finish_open(*open);
                            for held in std::mem::take(&mut self.held) {
                                self.handle(held);
                            }
                        }
                        Err(e) => {
                            self.held.clear();
                            self.close_connection(e.code, &e.text, 0x0001, open.request_id)
                        }
                    }
                }
            }
            Event::ProtocolError { code, text } => {
                log::warn!("connection {} ({}): {text}", self.id, self.peer);
                self.close_connection(code, &text, 0, 0);
            }
            Event::ForceClose { code, text } => self.close_connection(code, &text, 0, 0),
            Event::Shutdown => self.close_connection(
                ReplyCode::ConnectionForced,
                "broker forced connection closure with reason 'shutdown'",
                0,
                0,
            ),
            // AMQP events never reach a native connection.
            Event::AmqpHeader
            | Event::Amqp { .. }
            | Event::AmqpOversized { .. }
            | Event::ServerCancel { .. } => {}
            Event::Drained => {
                if let Some(s) = self.session() {
                    s.redispatch();
                }
            }
            Event::Closed { by_peer } => {
                // A server-side close (timeout, refused header, TLS failure) was logged
                // where it was decided; only the peer's own close is logged here.
                if by_peer && !matches!(self.state, State::Closing) {
                    let who = Who {
                        peer: self.peer,
                        session: self.session(),
                    };
                    conn_log::socket_closed(self.id, &who);
                }
                if let State::Open(session) = &mut self.state {
                    session.close();
                }
                self.state = State::Closing;
            }
        }
    }

    /// Closes the connection after an internal error (541), releasing its session.
    pub fn abort(&mut self) {
        self.close_connection(ReplyCode::InternalError, "internal error", 0, 0);
    }

    fn session(&self) -> Option<&Session> {
        match &self.state {
            State::Open(s) => Some(s),
            _ => None,
        }
    }

    /// Sends `connection.close`, releases the session and closes the socket once flushed.
    fn close_connection(&mut self, code: ReplyCode, text: &str, method_id: u16, request_id: u32) {
        let old = std::mem::replace(&mut self.state, State::Closing);
        if let State::Closing = old {
            return;
        }
        let session = match old {
            State::Open(session) => Some(session),
            _ => None,
        };
        let who = Who {
            peer: self.peer,
            session: session.as_deref(),
        };
        conn_log::server_closed(self.id, &who, code, text);
        if let Some(mut session) = session {
            session.close();
        }
        self.send(
            0,
            request_id,
            &Method::Close {
                reply_code: code.as_u16(),
                reply_text: text.to_string(),
                method_id,
            },
        );
        self.outbound.close_after_flush();
    }

    /// Reports a failed request: a channel error closes the channel, a connection error
    /// the connection.
    fn fail(&mut self, channel: u16, request_id: u32, method_id: u16, err: BrokerError) {
        if err.code.is_connection_error() || channel == 0 {
            self.close_connection(err.code, &err.text, method_id, request_id);
            return;
        }
        let who = Who {
            peer: self.peer,
            session: self.session(),
        };
        let method = crate::native::method::method_name(method_id);
        conn_log::channel_error(self.id, &who, channel, method, err.code, &err.text);
        if let State::Open(session) = &mut self.state {
            session.close_channel(channel);
        }
        self.closing_channels.insert(channel);
        self.send(
            channel,
            request_id,
            &Method::ChannelClose {
                reply_code: err.code.as_u16(),
                reply_text: err.text,
                method_id,
            },
        );
    }

    fn method(&mut self, channel: u16, request_id: u32, method: Method) {
        match &self.state {
            State::Closing => {
                if let Method::Close { .. } = method {
                    self.send(0, request_id, &Method::CloseOk);
                }
            }
            State::AwaitOpen => self.open(channel, request_id, method),
            // Held by `handle` until the password check answers; not reached.
            State::Authenticating(_) => {}
            State::Open(_) if channel == 0 => self.connection_method(request_id, method),
            State::Open(_) => self.channel_method(channel, request_id, method),
        }
    }

    fn open(&mut self, channel: u16, request_id: u32, method: Method) {
        let Method::Open {
            user,
            password,
            vhost,
            frame_max,
            heartbeat_s,
            channel_max,
            client_name,
        } = method
        else {
            let err = format!(
                "expected connection.open on channel 0, got {} on channel {channel}",
                method.name()
            );
            self.close_connection(ReplyCode::CommandInvalid, &err, method.id(), request_id);
            return;
        };
        if channel != 0 {
            self.close_connection(
                ReplyCode::CommandInvalid,
                "connection.open must be sent on channel 0",
                0x0001,
                request_id,
            );
            return;
        }
        let open = PendingOpen {
            request_id,
            user,
            vhost,
            frame_max,
            heartbeat_s,
            channel_max,
            client_name,
        };
        // Refusals are logged by the broker, with the reason and the peer.
        match self.broker.login_quick(&open.user, &password, &self.peer) {
            LoginStep::Done(Ok(())) => self.finish_open(open),
            LoginStep::Done(Err(e)) => self.close_connection(e.code, &e.text, 0x0001, request_id),
            LoginStep::Slow => {
                // The password check runs on the checker thread; its answer comes back
                // as an event in this connection's mailbox.
                defer_login(&self.broker, &self.conn, &open.user, password, self.peer);
                self.state = State::Authenticating(Box::new(open));
            }
        }
    }

    /// The rest of `connection.open` once the password is right.
    fn finish_open(&mut self, open: PendingOpen) {
        let PendingOpen {
            request_id,
            user,
            vhost,
            frame_max,
            heartbeat_s,
            channel_max,
            client_name,
        } = open;
        let vh = match self.broker.open_vhost_to_administer(&user, &vhost) {
            Ok(v) => v,
            Err(e) => {
                self.close_connection(e.code, &e.text, 0x0001, request_id);
                return;
            }
        };
        if frame_max != 0 && frame_max < FRAME_BYTES_MIN {
            let text =
                format!("frame_max {frame_max} is below the minimum of {FRAME_BYTES_MIN} bytes");
            self.close_connection(ReplyCode::NotAllowed, &text, 0x0001, request_id);
            return;
        }
        let limits = self.broker.limits().load();
        let frame_max = negotiate(frame_max, limits.frame_bytes_max);
        let heartbeat_s = negotiate(heartbeat_s, limits.heartbeat_s);
        let channel_max = negotiate(channel_max, limits.channels_per_connection_max);
        let Some(conn) = self.conn.upgrade() else {
            return;
        };
        conn.frame_max.store(frame_max, Ordering::Release);
        conn.heartbeat_s.store(heartbeat_s, Ordering::Release);
        self.frame_max = frame_max;
        let sink = Arc::new(NativeSink::new(
            Arc::clone(&self.outbound),
            frame_max,
            Weak::clone(&self.conn),
        ));
        let channels = Arc::new(AtomicUsize::new(0));
        // Connection limits (total, per user): refused with 530 before open-ok.
        let registered = self.broker.register_connection(ConnectionInfo {
            id: self.id,
            protocol: crate::broker::node::PROTOCOL_NATIVE,
            peer: self.peer,
            local: self.local,
            frame_max,
            heartbeat_s,
            user: user.clone(),
            vhost: vhost.clone(),
            client_name: client_name.clone(),
            connected_at: SystemTime::now(),
            channels: Arc::clone(&channels),
            sink: sink.clone(),
        });
        if let Err(e) = registered {
            self.close_connection(e.code, &e.text, 0x0001, request_id);
            return;
        }
        let session = Session::new(
            Arc::clone(&self.broker),
            self.id,
            vh,
            sink,
            channel_max,
            channels,
        )
        .with_user(&user);
        self.state = State::Open(Box::new(session));
        log::info!(
            "connection {} ({}) opened: user '{user}', vhost '{vhost}', client '{client_name}', frame_max {frame_max}, heartbeat {heartbeat_s} s",
            self.id,
            self.peer
        );
        // Open before open-ok can reach the client: the I/O thread raises its frame
        // assembler's bound from the handshake's 64 KiB when it sees this flag, and a client
        // may send a large request the moment it reads open-ok (a definitions import of
        // 300 KB was refused with 501 when the flag came second).
        conn.opened.store(true, Ordering::Release);
        self.send(
            0,
            request_id,
            &Method::OpenOk {
                frame_max,
                heartbeat_s,
                channel_max,
                server_version: format!("RelayMQ {}", env!("CARGO_PKG_VERSION")),
                connection_id: self.id,
            },
        );
    }

    fn connection_method(&mut self, request_id: u32, method: Method) {
        let broker = Arc::clone(&self.broker);
        let id = method.id();
        let reply = match method {
            Method::Close { .. } => {
                let who = Who {
                    peer: self.peer,
                    session: self.session(),
                };
                conn_log::client_closed(self.id, &who);
                if let State::Open(mut session) = std::mem::replace(&mut self.state, State::Closing)
                {
                    session.close();
                }
                self.send(0, request_id, &Method::CloseOk);
                self.outbound.close_after_flush();
                return;
            }
            Method::CloseOk => return,
            Method::Status => Ok(Method::StatusOk {
                info: listing::status(&broker),
            }),
            Method::List { kind } => {
                let Some(session) = self.session() else {
                    return;
                };
                list(&broker, session, kind)
            }
            other => {
                let Some(session) = self.session() else {
                    return;
                };
                let user = session.user().unwrap_or_default().to_string();
                admin::run(&broker, &user, other)
            }
        };
        match reply {
            Ok(m) => self.send(0, request_id, &m),
            Err(e) if e.code.is_connection_error() => {
                self.close_connection(e.code, &e.text, id, request_id)
            }
            // Admin refusals on channel 0 do not cost the connection: answer with a
            // channel-0 `channel.close`-style error the client maps to the request.
            Err(e) => self.send(
                0,
                request_id,
                &Method::ChannelClose {
                    reply_code: e.code.as_u16(),
                    reply_text: e.text,
                    method_id: id,
                },
            ),
        }
    }

    /// A `basic.publish` batch read in place: on an open channel of an open connection
    /// each message goes to the core as it is read; anywhere else the batch takes the
    /// general path of every method (the same errors).
    fn publish(&mut self, ch: u16, request_id: u32, batch: PublishBatch) {
        let open = ch != 0
            && !self.closing_channels.contains(&ch)
            && matches!(&self.state, State::Open(s) if s.has_channel(ch));
        if !open {
            match batch.into_method() {
                Ok(method) => self.method(ch, request_id, method),
                Err(e) => self.close_connection(ReplyCode::SyntaxError, &e.message, 0, 0),
            }
            return;
        }
        let State::Open(session) = &mut self.state else {
            return;
        };
        let result = publish_in_order(session, ch, batch.messages(), |s, m| {
            s.basic_publish(
                ch,
                m.exchange,
                m.routing_key,
                m.mandatory,
                m.properties,
                m.body,
            )
        });
        if let Err(e) = result {
            self.fail(ch, request_id, PUBLISH_METHOD_ID, e);
        }
    }

    fn channel_method(&mut self, ch: u16, request_id: u32, method: Method) {
        if self.closing_channels.contains(&ch) {
            match method {
                Method::ChannelClose { .. } => {
                    self.closing_channels.remove(&ch);
                    self.send(ch, request_id, &Method::CloseOk);
                }
                Method::CloseOk => {
                    self.closing_channels.remove(&ch);
                }
                _ => {}
            }
            return;
        }
        let id = method.id();
        let State::Open(session) = &mut self.state else {
            return;
        };
        let result: Result<Option<Method>, BrokerError> = match method {
            Method::ChannelOpen => session.open_channel(ch).map(|_| Some(Method::Ok)),
            Method::ChannelClose { .. } => {
                session.close_channel(ch);
                Ok(Some(Method::CloseOk))
            }
            Method::CloseOk => Ok(None),
            _ if !session.has_channel(ch) => Err(BrokerError::new(
                ReplyCode::ChannelError,
                format!("channel {ch} is not open"),
            )),
            Method::Publish { messages } => publish_in_order(session, ch, messages, |s, m| {
                let props = m.properties.into_boxed();
                s.basic_publish(ch, &m.exchange, &m.routing_key, m.mandatory, props, m.body)
            })
            .map(|()| None),
            Method::ExchangeDeclare {
                exchange,
                kind,
                passive,
                durable,
                auto_delete,
                internal,
                arguments,
            } => session
                .exchange_declare(
                    ch,
                    &ExchangeSpec {
                        name: exchange,
                        kind,
                        passive,
                        durable,
                        auto_delete,
                        internal,
                        arguments,
                    },
                )
                .map(|_| Some(Method::Ok)),
            Method::ExchangeDelete {
                exchange,
                if_unused,
            } => session
                .exchange_delete(ch, &exchange, if_unused)
                .map(|_| Some(Method::Ok)),
            Method::ExchangeBind {
                destination,
                source,
                routing_key,
                arguments,
            } => session
                .exchange_bind(ch, &destination, &source, &routing_key, &arguments)
                .map(|_| Some(Method::Ok)),
            Method::ExchangeUnbind {
                destination,
                source,
                routing_key,
                arguments,
            } => session
                .exchange_unbind(ch, &destination, &source, &routing_key, &arguments)
                .map(|_| Some(Method::Ok)),
            Method::QueueDeclare {
                queue,
                passive,
                durable,
                exclusive,
                auto_delete,
                arguments,
            } => session
                .queue_declare(
                    ch,
                    &QueueSpec {
                        name: queue,
                        passive,
                        durable,
                        exclusive,
                        auto_delete,
                        arguments,
                    },
                )
                .map(|d| {
                    Some(Method::QueueDeclareOk {
                        queue: d.name,
                        message_count: d.message_count,
                        consumer_count: d.consumer_count,
                    })
                }),
            Method::QueueBind {
                queue,
                exchange,
                routing_key,
                arguments,
            } => session
                .queue_bind(ch, &queue, &exchange, &routing_key, &arguments)
                .map(|_| Some(Method::Ok)),
            Method::QueueUnbind {
                queue,
                exchange,
                routing_key,
                arguments,
            } => session
                .queue_unbind(ch, &queue, &exchange, &routing_key, &arguments)
                .map(|_| Some(Method::Ok)),
            Method::QueuePurge { queue } => session
                .queue_purge(ch, &queue)
                .map(|n| Some(Method::QueuePurgeOk { message_count: n })),
            Method::QueueDelete {
                queue,
                if_unused,
                if_empty,
            } => session
                .queue_delete(ch, &queue, if_unused, if_empty)
                .map(|n| Some(Method::QueueDeleteOk { message_count: n })),
            Method::BasicQos {
                prefetch_count,
                global,
            } => session
                .basic_qos(ch, prefetch_count, global)
                .map(|_| Some(Method::Ok)),
            Method::BasicConsume {
                queue,
                consumer_tag,
                no_ack,
                exclusive,
                arguments,
            } => {
                let outbound = &self.outbound;
                let frame_max = self.frame_max;
                session
                    .basic_consume(
                        ch,
                        &queue,
                        &consumer_tag,
                        no_ack,
                        exclusive,
                        &arguments,
                        |tag| {
                            let m = Method::BasicConsumeOk {
                                consumer_tag: tag.to_string(),
                            };
                            outbound.write_with(|buf| {
                                write_method(buf, ch, frame_max, |b| m.encode(request_id, b))
                            });
                        },
                    )
                    .map(|_| None)
            }
            Method::BasicCancel { consumer_tag } => session
                .basic_cancel(ch, &consumer_tag)
                .map(|_| Some(Method::Ok)),
            Method::BasicGet { queue, no_ack } => {
                let outbound = &self.outbound;
                let frame_max = self.frame_max;
                session
                    .basic_get(ch, &queue, no_ack, |g| {
                        let m = Method::GetOk {
                            delivery_tag: g.delivery_tag,
                            redelivered: g.redelivered,
                            exchange: g.message.exchange().to_string(),
                            routing_key: g.message.routing_key().to_string(),
                            message_count: g.message_count,
                            properties: Box::new(g.message.properties().clone()),
                            body: g.message.body.to_vec(),
                        };
                        outbound.write_with(|buf| {
                            write_method(buf, ch, frame_max, |b| m.encode(request_id, b))
                        });
                    })
                    .map(|got| if got { None } else { Some(Method::GetEmpty) })
            }
            Method::Ack {
                delivery_tag,
                multiple,
            } => session.basic_ack(ch, delivery_tag, multiple).map(|_| None),
            Method::Nack {
                delivery_tag,
                multiple,
                requeue,
            } => session
                .basic_nack(ch, delivery_tag, multiple, requeue)
                .map(|_| None),
            Method::Reject {
                delivery_tag,
                requeue,
            } => session
                .basic_reject(ch, delivery_tag, requeue)
                .map(|_| None),
            Method::Recover { requeue } => {
                session.basic_recover(ch, requeue).map(|_| Some(Method::Ok))
            }
            Method::ConfirmSelect => session.confirm_select(ch).map(|_| Some(Method::Ok)),
            other => Err(BrokerError::new(
                ReplyCode::CommandInvalid,
                format!("{} is not a client method on a channel", other.name()),
            )),
        };
        match result {
            Ok(Some(reply)) => self.send(ch, request_id, &reply),
            Ok(None) => {}
            Err(e) => self.fail(ch, request_id, id, e),
        }
    }
}

/// A publish batch's rule (docs/architecture.md §4): messages go to the core in order
/// until one fails (the rest are dropped), then the confirms of those published are
/// flushed; returns the failure, if any.
fn publish_in_order<T>(
    session: &mut Session,
    ch: u16,
    messages: impl IntoIterator<Item = T>,
    mut publish: impl FnMut(&mut Session, T) -> Result<(), BrokerError>,
) -> Result<(), BrokerError> {
    let result = messages
        .into_iter()
        .try_for_each(|m| publish(&mut *session, m));
    session.flush_confirms(ch);
    result
}

/// The rows of a `list` request: users and permissions for administrators, the rest for
/// users with a management tag (RabbitMQ's management tags).
fn list(broker: &Broker, session: &Session, kind: ListKind) -> Result<Method, BrokerError> {
    let user = session.user().unwrap_or_default();
    let what = "list";
    match kind {
        ListKind::Users | ListKind::Permissions => broker.require_administrator(user, what)?,
        ListKind::Policies => broker.require_policymaker(user, &session.vhost().name, what)?,
        _ => broker.require_management(user, what)?,
    }
    let vh = session.vhost();
    let mut rows = match kind {
        ListKind::Vhosts => listing::vhosts(broker),
        ListKind::Exchanges => listing::exchanges(vh),
        ListKind::Queues => listing::queues_with_rates(vh, broker.rates()),
        ListKind::Bindings => listing::bindings(vh),
        ListKind::Consumers => listing::consumers(vh, broker),
        ListKind::Connections => listing::connections(broker),
        ListKind::Users => listing::users(broker),
        ListKind::Permissions => listing::permissions(broker),
        ListKind::Policies => listing::policies(vh),
    };
    // A `management` user (without `administrator` or `monitoring`) sees, as in
    // RabbitMQ, only the vhosts it may open and its own connections.
    let sees_all = broker
        .users()
        .user(user)
        .is_some_and(|u| u.has_tag(TAG_ADMINISTRATOR) || u.has_tag(TAG_MONITORING));
    if !sees_all {
        let field = |row: &crate::types::FieldTable, name: &str| {
            row.get(name).and_then(|v| v.as_str()).map(str::to_string)
        };
        match kind {
            ListKind::Vhosts => rows.retain(|r| {
                field(r, "name").is_some_and(|v| broker.users().permissions(user, &v).is_some())
            }),
            ListKind::Connections => rows.retain(|r| field(r, "user").as_deref() == Some(user)),
            _ => {}
        }
    }
    // The protocol caps a listing (docs/protocol.md §12); the rest is left out.
    rows.truncate(LIST_ROWS_MAX);
    Ok(Method::ListOk { rows })
}
