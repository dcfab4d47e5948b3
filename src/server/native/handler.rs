//! The native protocol adapter: turns decoded methods into [`Session`] calls and results
//! into reply frames; handles the connection and channel close handshakes.
//!
//! Channel errors close only the channel (the server sends `channel.close` with the
//! failing request's id and ignores the channel until `close-ok`); connection errors send
//! `connection.close` and close the socket once it is flushed (AMQP 0-9-1 §1.4.2).

use crate::auth::users::{TAG_ADMINISTRATOR, TAG_MONITORING, TAG_POLICYMAKER};
use crate::broker::access::LoginStep;
use crate::broker::{listing, Broker, ExchangeSpec, QueueSpec, Session};
use crate::error::{BrokerError, ReplyCode};
use crate::limits::{FRAME_BYTES_HANDSHAKE, FRAME_BYTES_MIN, LIST_ROWS_MAX};
use crate::native::frame::write_method;
use crate::native::publish_batch::PUBLISH_METHOD_ID;
use crate::native::{ListKind, Method, PublishBatch};
use crate::server::config::negotiate;
use crate::server::conn::Conn;
use crate::server::inspect;
use crate::server::lifecycle::{
    defer_login, open_session, ChannelStep, Lifecycle, Opening, Phase, Wire,
};
use crate::server::native::admin;
use crate::server::native::event::NativeEvent;
use crate::server::native::sink::NativeSink;
use crate::server::outbound::Outbound;
use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};

/// The native handshake's steps (`connection.open` is its only method).
enum Handshake {
    /// Waiting for `connection.open`.
    AwaitOpen,
    /// `connection.open` received; its password is being checked.
    Authenticating(Box<PendingOpen>),
}

/// Requests a native client may pipeline behind `connection.open` while its password is
/// checked; more close the connection (503). Before `open-ok` each payload is at most
/// `FRAME_BYTES_HANDSHAKE` (64 KiB), so these stay small.
const HELD_EVENTS_MAX: usize = 16;

/// Method id of `connection.open`, blamed by the handshake's refusals.
const OPEN_METHOD_ID: u16 = 0x0001;

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

/// The request a native frame answers or blames: its method id and request id (both 0
/// for none). Replies carry the request's id; `close` frames name its method.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Request {
    /// Method id of the request.
    pub method_id: u16,
    /// Request id the client gave it.
    pub request_id: u32,
}

impl Request {
    fn new(method_id: u16, request_id: u32) -> Request {
        Request {
            method_id,
            request_id,
        }
    }
}

/// How the native protocol writes a connection's frames: split at the connection's frame
/// size, each carrying the request id it answers.
pub struct NativeWire {
    outbound: Arc<Outbound>,
    /// Frame size in bytes: the handshake's until `open-ok`, then the negotiated value.
    frame_max: u32,
}

impl Wire for NativeWire {
    type Method = Method;
    type At = Request;

    fn send(&self, channel: u16, at: Request, method: &Method) {
        let frame_max = self.frame_max;
        self.outbound.write_with(|buf| {
            write_method(buf, channel, frame_max, |b| method.encode(at.request_id, b))
        });
    }

    fn outbound(&self) -> &Outbound {
        &self.outbound
    }

    fn connection_close(code: ReplyCode, text: &str, at: Request) -> Method {
        Method::Close {
            reply_code: code.as_u16(),
            reply_text: text.to_string(),
            method_id: at.method_id,
        }
    }

    fn connection_close_ok() -> Method {
        Method::CloseOk
    }

    fn channel_close(code: ReplyCode, text: &str, at: Request) -> Method {
        Method::ChannelClose {
            reply_code: code.as_u16(),
            reply_text: text.to_string(),
            method_id: at.method_id,
        }
    }

    fn channel_close_ok() -> Method {
        Method::CloseOk
    }

    fn method_name(at: Request) -> &'static str {
        crate::native::method::method_name(at.method_id)
    }
}

/// Protocol state of one native connection; run by one worker at a time.
pub struct NativeHandler {
    broker: Arc<Broker>,
    conn: Weak<Conn>,
    local: SocketAddr,
    life: Lifecycle<Handshake, NativeWire>,
    /// Requests received while `connection.open` waits for its password check, replayed
    /// in order once it is accepted (at most [`HELD_EVENTS_MAX`]).
    held: Vec<NativeEvent>,
}

impl NativeHandler {
    /// A handler for a connection that has not opened yet; `peer` and `local` are the
    /// socket's two addresses.
    pub fn new(
        broker: Arc<Broker>,
        conn: Weak<Conn>,
        id: u64,
        (peer, local): (SocketAddr, SocketAddr),
        outbound: Arc<Outbound>,
    ) -> NativeHandler {
        let wire = NativeWire {
            outbound,
            frame_max: FRAME_BYTES_HANDSHAKE,
        };
        NativeHandler {
            broker,
            conn,
            local,
            life: Lifecycle::new(id, peer, wire, Handshake::AwaitOpen),
            held: Vec::new(),
        }
    }

    fn send(&self, channel: u16, request_id: u32, method: &Method) {
        self.life
            .wire
            .send(channel, Request::new(0, request_id), method);
    }

    /// Executes one event.
    pub fn handle(&mut self, event: NativeEvent) {
        match event {
            NativeEvent::Conn(e) => {
                if let Some(result) = self.life.on_event(e) {
                    self.login_checked(result);
                }
            }
            // Requests pipelined behind connection.open wait for its password check.
            request if self.is_authenticating() => self.hold(request),
            NativeEvent::Method {
                channel,
                request_id,
                method,
            } => self.method(channel, request_id, method),
            NativeEvent::Publish {
                channel,
                request_id,
                batch,
            } => self.publish(channel, request_id, batch),
            NativeEvent::Oversized {
                channel,
                method_id,
                request_id,
                size,
            } => self.oversized(channel, Request::new(method_id, request_id), size),
        }
    }

    fn is_authenticating(&self) -> bool {
        matches!(
            self.life.phase,
            Phase::Handshake(Handshake::Authenticating(_))
        )
    }

    /// Keeps a request received while `connection.open` waits for its password check;
    /// past [`HELD_EVENTS_MAX`] the connection is closed (503).
    fn hold(&mut self, request: NativeEvent) {
        if self.held.len() < HELD_EVENTS_MAX {
            self.held.push(request);
            return;
        }
        self.held.clear();
        let text =
            format!("more than {HELD_EVENTS_MAX} requests before connection.open was answered");
        self.close_connection(ReplyCode::CommandInvalid, &text, Request::default());
    }

    /// Closes the connection after an internal error (541), releasing its session.
    pub fn abort(&mut self) {
        self.life.abort();
    }

    fn session(&self) -> Option<&Session> {
        self.life.session()
    }

    fn close_connection(&mut self, code: ReplyCode, text: &str, at: Request) {
        self.life.close_connection(code, text, at);
    }

    /// A split payload over the size limit was discarded: a channel error on an open
    /// channel, a connection error (501) elsewhere.
    fn oversized(&mut self, channel: u16, at: Request, size: u64) {
        let max = self.broker.limits().message_bytes_max();
        let err = BrokerError::precondition(format!(
            "a {size}-byte payload (message, properties and names) is larger than \
             the configured max message size {max}"
        ));
        if self.life.is_closing_channel(channel) {
            // Already being closed: everything on it is ignored until close-ok.
        } else if channel != 0 && self.session().is_some_and(|s| s.has_channel(channel)) {
            self.life.fail(channel, at, err);
        } else {
            self.close_connection(ReplyCode::FrameError, &err.text, at);
        }
    }

    /// The password check of a pending `connection.open` answered: the rest of the open
    /// and the requests held behind it, or the refusal.
    fn login_checked(&mut self, result: Result<(), BrokerError>) {
        let phase = std::mem::replace(&mut self.life.phase, Phase::Handshake(Handshake::AwaitOpen));
        let Phase::Handshake(Handshake::Authenticating(open)) = phase else {
            return;
        };
        match result {
            Ok(()) => {
                self.finish_open(*open);
                for held in std::mem::take(&mut self.held) {
                    self.handle(held);
                }
            }
            Err(e) => {
                self.held.clear();
                let at = Request::new(OPEN_METHOD_ID, open.request_id);
                self.close_connection(e.code, &e.text, at)
            }
        }
    }

    fn method(&mut self, channel: u16, request_id: u32, method: Method) {
        let at = Request::new(method.id(), request_id);
        match &self.life.phase {
            Phase::Closing => self
                .life
                .while_closing(matches!(method, Method::Close { .. }), at),
            Phase::Handshake(Handshake::AwaitOpen) => self.open(channel, request_id, method),
            // Held by `handle` until the password check answers; not reached.
            Phase::Handshake(Handshake::Authenticating(_)) => {}
            Phase::Open(_) if channel == 0 => self.connection_method(request_id, method),
            Phase::Open(_) => self.channel_method(channel, request_id, method),
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
            let at = Request::new(method.id(), request_id);
            self.close_connection(ReplyCode::CommandInvalid, &err, at);
            return;
        };
        let at = Request::new(OPEN_METHOD_ID, request_id);
        if channel != 0 {
            self.close_connection(
                ReplyCode::CommandInvalid,
                "connection.open must be sent on channel 0",
                at,
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
        let peer = self.life.peer;
        match self.broker.login_quick(&open.user, &password, &peer) {
            LoginStep::Done(Ok(())) => self.finish_open(open),
            LoginStep::Done(Err(e)) => self.close_connection(e.code, &e.text, at),
            LoginStep::Slow => {
                // The password check runs on the checker thread; its answer comes back
                // as an event in this connection's mailbox.
                defer_login(&self.broker, &self.conn, &open.user, password, peer);
                self.life.phase = Phase::Handshake(Handshake::Authenticating(Box::new(open)));
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
        let at = Request::new(OPEN_METHOD_ID, request_id);
        let vh = match self.broker.open_vhost_to_administer(&user, &vhost) {
            Ok(v) => v,
            Err(e) => {
                self.close_connection(e.code, &e.text, at);
                return;
            }
        };
        if frame_max != 0 && frame_max < FRAME_BYTES_MIN {
            let text =
                format!("frame_max {frame_max} is below the minimum of {FRAME_BYTES_MIN} bytes");
            self.close_connection(ReplyCode::NotAllowed, &text, at);
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
        self.life.wire.frame_max = frame_max;
        let sink = Arc::new(NativeSink::new(
            Arc::clone(&self.life.wire.outbound),
            frame_max,
            Weak::clone(&self.conn),
        ));
        let opening = Opening {
            protocol: crate::broker::node::PROTOCOL_NATIVE,
            id: self.life.id,
            peer: self.life.peer,
            local: self.local,
            frame_max,
            heartbeat_s,
            channel_max,
            user: &user,
            vhost_name: &vhost,
            client_name: &client_name,
            client_properties: Arc::default(),
            traffic: Arc::clone(&conn.traffic),
        };
        // Connection limits (total, per user): refused with 530 before open-ok.
        let session = match open_session(&self.broker, &opening, vh, sink) {
            Ok(session) => session,
            Err(e) => {
                self.close_connection(e.code, &e.text, at);
                return;
            }
        };
        self.life.phase = Phase::Open(Box::new(session));
        log::info!(
            "connection {} ({}) opened: user '{user}', vhost '{vhost}', client '{client_name}', frame_max {frame_max}, heartbeat {heartbeat_s} s",
            self.life.id,
            self.life.peer
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
                connection_id: self.life.id,
            },
        );
    }

    fn connection_method(&mut self, request_id: u32, method: Method) {
        let broker = Arc::clone(&self.broker);
        let at = Request::new(method.id(), request_id);
        let reply = match method {
            Method::Close { .. } => return self.life.client_closed(at),
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
            Err(e) if e.code.is_connection_error() => self.close_connection(e.code, &e.text, at),
            // Admin refusals on channel 0 do not cost the connection: answer with a
            // channel-0 `channel.close`-style error the client maps to the request.
            Err(e) => self
                .life
                .wire
                .send(0, at, &NativeWire::channel_close(e.code, &e.text, at)),
        }
    }

    /// A `basic.publish` batch read in place: on an open channel of an open connection
    /// each message goes to the core as it is read; anywhere else the batch takes the
    /// general path of every method (the same errors).
    fn publish(&mut self, ch: u16, request_id: u32, batch: PublishBatch) {
        let open = ch != 0
            && !self.life.is_closing_channel(ch)
            && self.session().is_some_and(|s| s.has_channel(ch));
        if !open {
            match batch.into_method() {
                Ok(method) => self.method(ch, request_id, method),
                Err(e) => {
                    self.close_connection(ReplyCode::SyntaxError, &e.message, Request::default())
                }
            }
            return;
        }
        let Some(session) = self.life.session_mut() else {
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
            self.life
                .fail(ch, Request::new(PUBLISH_METHOD_ID, request_id), e);
        }
    }

    fn channel_method(&mut self, ch: u16, request_id: u32, method: Method) {
        let at = Request::new(method.id(), request_id);
        let step = match method {
            Method::ChannelClose { .. } => ChannelStep::Close,
            Method::CloseOk => ChannelStep::CloseOk,
            _ => ChannelStep::Other,
        };
        if self.life.closing_channel(ch, step, at) {
            return;
        }
        let wire = &self.life.wire;
        let Phase::Open(session) = &mut self.life.phase else {
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
            } => session
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
                        wire.send(ch, at, &m);
                    },
                )
                .map(|_| None),
            Method::BasicCancel { consumer_tag } => session
                .basic_cancel(ch, &consumer_tag)
                .map(|_| Some(Method::Ok)),
            Method::BasicGet { queue, no_ack } => session
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
                    wire.send(ch, at, &m);
                })
                .map(|got| if got { None } else { Some(Method::GetEmpty) }),
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
            Method::QueuePeek { queue, request } => {
                queue_tool(session, ch, &queue, &request, inspect::peek)
            }
            Method::QueueReplay { queue, request } => {
                queue_tool(session, ch, &queue, &request, inspect::replay)
            }
            Method::QueueSearch { queue, request } => {
                queue_tool(session, ch, &queue, &request, inspect::search)
            }
            Method::QueueUnacked { queue, request } => {
                queue_tool(session, ch, &queue, &request, inspect::unacked)
            }
            Method::QueuePause { queue } => inspect::QueueAction::Pause
                .run(session, ch, &queue)
                .map(|()| Some(Method::Ok)),
            Method::QueueResume { queue } => inspect::QueueAction::Resume
                .run(session, ch, &queue)
                .map(|()| Some(Method::Ok)),

            other => Err(BrokerError::new(
                ReplyCode::CommandInvalid,
                format!("{} is not a client method on a channel", other.name()),
            )),
        };
        self.life.answer(ch, at, result);
    }
}

/// Runs a queue tool ([`inspect`]) with its JSON request; answers `queue.tool-ok`.
fn queue_tool(
    session: &mut Session,
    ch: u16,
    queue: &str,
    request: &str,
    tool: inspect::Tool,
) -> Result<Option<Method>, BrokerError> {
    let body = match serde_json::from_str::<serde_json::Value>(request) {
        Ok(serde_json::Value::Object(m)) => m,
        _ => {
            return Err(BrokerError::precondition(
                "the request must be a JSON object",
            ))
        }
    };
    tool(session, ch, queue, &body)
        .map(|json| {
            Some(Method::QueueToolOk {
                json: json.to_string(),
            })
        })
        .map_err(inspect::InspectError::into_broker_error)
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

/// The rows of a `list` request: users, permissions and user limits for administrators;
/// policies, runtime and global parameters for `policymaker`s and administrators; the
/// rest for users with a management tag (RabbitMQ's management tags, as the management
/// API's `GET` of each).
fn list(broker: &Broker, session: &Session, kind: ListKind) -> Result<Method, BrokerError> {
    let user = session.user().unwrap_or_default();
    let what = "list";
    match kind {
        ListKind::Users | ListKind::Permissions | ListKind::UserLimits => {
            broker.require_administrator(user, what)?
        }
        ListKind::Policies => broker.require_policymaker(user, &session.vhost().name, what)?,
        ListKind::Parameters | ListKind::GlobalParameters => {
            broker.require_tag(user, &[TAG_POLICYMAKER, TAG_ADMINISTRATOR], what)?
        }
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
        ListKind::VhostLimits => listing::vhost_limits(broker),
        ListKind::UserLimits => listing::user_limits(broker),
        ListKind::Parameters => listing::parameters(broker),
        ListKind::GlobalParameters => listing::global_parameters(broker),
        ListKind::OperatorPolicies => listing::operator_policies(broker),
        ListKind::Shovels => {
            crate::links::Links::of(broker).map_or_else(Vec::new, |l| l.shovels.rows())
        }
        ListKind::FederationLinks => crate::links::Links::of(broker)
            .map_or_else(Vec::new, |l| l.federation.rows(&l.shovels.node())),
    };
    // A `management` user (without `administrator` or `monitoring`) sees, as in
    // RabbitMQ, only the vhosts it may open and its own connections.
    let (is_admin, sees_all) = broker.users().user(user).map_or((false, false), |u| {
        let admin = u.has_tag(TAG_ADMINISTRATOR);
        (admin, admin || u.has_tag(TAG_MONITORING))
    });
    let field = |row: &crate::types::FieldTable, name: &str| {
        row.get(name).and_then(|v| v.as_str()).map(str::to_string)
    };
    let may_use = |row: &crate::types::FieldTable, name: &str| {
        field(row, name).is_some_and(|v| broker.users().permissions(user, &v).is_some())
    };
    if !sees_all {
        match kind {
            ListKind::Vhosts => rows.retain(|r| may_use(r, "name")),
            ListKind::Connections => rows.retain(|r| field(r, "user").as_deref() == Some(user)),
            ListKind::VhostLimits
            | ListKind::OperatorPolicies
            | ListKind::Shovels
            | ListKind::FederationLinks => rows.retain(|r| may_use(r, "vhost")),
            _ => {}
        }
    }
    // Runtime parameters: a `policymaker` sees the vhosts it has permissions in
    // (`rabbit_mgmt_wm_parameters`), a monitoring tag adds nothing.
    if kind == ListKind::Parameters && !is_admin {
        rows.retain(|r| may_use(r, "vhost"));
    }
    // The protocol caps a listing (docs/protocol.md §12); the rest is left out.
    rows.truncate(LIST_ROWS_MAX);
    Ok(Method::ListOk { rows })
}
