//! The AMQP 0-9-1 adapter: the connection handshake (start, SASL PLAIN/AMQPLAIN, tune,
//! open), then every channel method translated into the same [`Session`] calls the native
//! protocol uses, with replies and errors as RabbitMQ sends them (docs/amqp.md).
//!
//! Errors: a channel error sends `channel.close` (reply code, RabbitMQ's `NAME - text`,
//! the failing method's class and method ids) and ignores the channel until the client's
//! `channel.close-ok`; a connection error sends `connection.close` and closes the socket
//! once it is flushed (AMQP 0-9-1 §1.4.2.2 and §2.3.1).

use crate::amqp::{write_method, AmqpMethod};
use crate::broker::access::LoginStep;
use crate::broker::channel::Channel;
use crate::broker::{Broker, CancelReason, ExchangeSpec, QueueSpec, Session};
use crate::error::{BrokerError, ReplyCode};
use crate::server::amqp::event::{AmqpEvent, Content};
use crate::server::amqp::sink::AmqpSink;
use crate::server::amqp::tx::{Transactions, TxOp};
use crate::server::conn::Conn;
use crate::server::lifecycle::{
    defer_login, open_session, ChannelStep, Lifecycle, Opening, Phase, Wire,
};
use crate::server::outbound::Outbound;
use crate::types::codec::Reader;
use crate::types::field_table::decode_table;
use crate::types::{FieldTable, FieldValue};
use std::collections::HashSet;
use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};

/// Smallest frame size a client may ask for, in bytes (AMQP 0-9-1 `frame-min-size`).
pub const AMQP_FRAME_MIN_BYTES: u32 = 4096;

/// The SASL mechanisms offered in `connection.start`.
const MECHANISMS: &[u8] = b"PLAIN AMQPLAIN";

/// Class and method ids of the handshake methods, for `connection.close`.
const START_OK: (u16, u16) = (10, 11);
const TUNE_OK: (u16, u16) = (10, 31);
const OPEN: (u16, u16) = (10, 40);
const PUBLISH: (u16, u16) = (60, 40);

/// The AMQP 0-9-1 handshake's steps (§1.4.2: start, start-ok, tune, tune-ok, open).
enum Handshake {
    /// Waiting for the client's protocol header.
    AwaitHeader,
    /// `connection.start` sent.
    AwaitStartOk,
    /// `connection.start-ok` received; its password is being checked (by the login
    /// checker thread: the answer arrives as `ConnEvent::LoginChecked`).
    Authenticating { user: String, mechanism: String },
    /// `connection.tune` sent; the user is authenticated.
    AwaitTuneOk { user: String },
    /// `connection.tune-ok` received.
    AwaitOpen { user: String },
}

/// How AMQP 0-9-1 writes a connection's frames: methods as they are (frames never split),
/// close reasons with RabbitMQ's reply texts, errors naming the failing method by its
/// class and method ids.
pub struct AmqpWire {
    outbound: Arc<Outbound>,
}

impl Wire for AmqpWire {
    type Method = AmqpMethod;
    /// Class and method ids of the request.
    type At = (u16, u16);

    fn send(&self, channel: u16, _at: (u16, u16), method: &AmqpMethod) {
        self.outbound
            .write_with(|buf| write_method(buf, channel, method));
    }

    fn outbound(&self) -> &Outbound {
        &self.outbound
    }

    fn connection_close(
        code: ReplyCode,
        text: &str,
        (class_id, method_id): (u16, u16),
    ) -> AmqpMethod {
        AmqpMethod::ConnectionClose {
            reply_code: code.as_u16(),
            reply_text: reply_text(code, text),
            class_id,
            method_id,
        }
    }

    fn connection_close_ok() -> AmqpMethod {
        AmqpMethod::ConnectionCloseOk {}
    }

    fn channel_close(code: ReplyCode, text: &str, (class_id, method_id): (u16, u16)) -> AmqpMethod {
        AmqpMethod::ChannelClose {
            reply_code: code.as_u16(),
            reply_text: reply_text(code, text),
            class_id,
            method_id,
        }
    }

    fn channel_close_ok() -> AmqpMethod {
        AmqpMethod::ChannelCloseOk {}
    }

    fn method_name((class_id, method_id): (u16, u16)) -> &'static str {
        AmqpMethod::name_of(class_id, method_id).unwrap_or("method")
    }
}

/// Protocol state of one AMQP 0-9-1 connection; run by one worker at a time.
pub struct AmqpHandler {
    broker: Arc<Broker>,
    conn: Weak<Conn>,
    local: SocketAddr,
    life: Lifecycle<Handshake, AmqpWire>,
    /// Frame size in bytes: the server's offer (the limits in force at accept) until
    /// `tune-ok`, then the negotiated value.
    frame_max: u32,
    /// Heartbeat interval in seconds: offered, then negotiated.
    heartbeat_s: u16,
    /// Highest channel number: offered, then negotiated.
    channel_max: u16,
    client_name: String,
    /// The client's `start-ok` properties (bounded by the handshake's frame size).
    client_properties: Arc<FieldTable>,
    /// The client announced `consumer_cancel_notify` in `connection.start-ok`: it is told
    /// of the server's cancels with `basic.cancel`; other clients are not (RabbitMQ's
    /// `rabbit_channel:server_consumer_cancel_supported`).
    cancel_notify: bool,
    /// Transactional channels and what their transactions hold.
    tx: Transactions,
    /// Channels in confirm mode (they cannot become transactional).
    confirm_channels: HashSet<u16>,
}

/// RabbitMQ's reply text: the reply code's name, " - ", the reason.
fn reply_text(code: ReplyCode, text: &str) -> String {
    format!("{} - {text}", code.name())
}

impl AmqpHandler {
    /// A handler for a connection whose protocol header has not arrived yet; `peer` and
    /// `local` are the socket's two addresses.
    pub fn new(
        broker: Arc<Broker>,
        conn: Weak<Conn>,
        id: u64,
        (peer, local): (SocketAddr, SocketAddr),
        outbound: Arc<Outbound>,
    ) -> AmqpHandler {
        let limits = broker.limits().load();
        AmqpHandler {
            frame_max: limits.frame_bytes_max,
            heartbeat_s: limits.heartbeat_s,
            channel_max: limits.channels_per_connection_max,
            broker,
            conn,
            local,
            life: Lifecycle::new(id, peer, AmqpWire { outbound }, Handshake::AwaitHeader),
            client_name: String::new(),
            client_properties: Arc::default(),
            cancel_notify: false,
            tx: Transactions::default(),
            confirm_channels: HashSet::new(),
        }
    }

    fn send(&self, channel: u16, method: &AmqpMethod) {
        self.life.wire.send(channel, (0, 0), method);
    }

    /// Executes one event.
    pub fn handle(&mut self, event: AmqpEvent) {
        match event {
            AmqpEvent::Header => self.start(),
            AmqpEvent::Method {
                channel,
                method,
                content,
            } => self.method(channel, method, content),
            AmqpEvent::Oversized { channel, size } => {
                let max = self.broker.limits().message_bytes_max();
                let err = BrokerError::precondition(format!(
                    "message size {size} is larger than configured max size {max}"
                ));
                if self.life.is_closing_channel(channel) {
                    return;
                }
                self.fail(channel, PUBLISH, err);
            }
            AmqpEvent::ServerCancel {
                channel,
                consumer_tag,
                reason,
            } => self.server_cancel(&channel, consumer_tag, reason),
            AmqpEvent::Conn(e) => {
                if let Some(result) = self.life.on_event(e) {
                    let phase = std::mem::replace(
                        &mut self.life.phase,
                        Phase::Handshake(Handshake::AwaitStartOk),
                    );
                    if let Phase::Handshake(Handshake::Authenticating { user, mechanism }) = phase {
                        self.login_checked(user, &mechanism, result);
                    }
                }
            }
        }
    }

    /// Closes the connection after an internal error (541), releasing its session.
    pub fn abort(&mut self) {
        self.life.abort();
    }

    fn close_connection(&mut self, code: ReplyCode, text: &str, ids: (u16, u16)) {
        self.life.close_connection(code, text, ids);
    }

    /// Reports a failed method: a channel error closes the channel (its transaction and
    /// confirm mode go with it), a connection error the connection (AMQP 0-9-1 §1.4.2:
    /// which codes are which).
    fn fail(&mut self, channel: u16, ids: (u16, u16), err: BrokerError) {
        if self.life.fail(channel, ids, err) {
            self.forget_channel(channel);
        }
    }

    /// Sets the handshake step. A handshake method runs with the phase taken out (closing),
    /// so each outcome sets the step it leads to, or goes back to its own step before a
    /// refusal (which would otherwise find the connection closing already).
    fn set_step(&mut self, step: Handshake) {
        self.life.phase = Phase::Handshake(step);
    }

    /// The client's protocol header was right: offer `connection.start`.
    fn start(&mut self) {
        if !matches!(self.life.phase, Phase::Handshake(Handshake::AwaitHeader)) {
            return;
        }
        let mut capabilities = FieldTable::new();
        for cap in [
            "publisher_confirms",
            "exchange_exchange_bindings",
            "basic.nack",
            "consumer_cancel_notify",
            "connection.blocked",
            "per_consumer_qos",
            "authentication_failure_close",
            "direct_reply_to",
        ] {
            capabilities.insert(cap.into(), FieldValue::Bool(true));
        }
        let mut props = FieldTable::new();
        props.insert("product".into(), FieldValue::string("RelayMQ"));
        props.insert(
            "version".into(),
            FieldValue::string(env!("CARGO_PKG_VERSION")),
        );
        props.insert("platform".into(), FieldValue::string("Rust"));
        props.insert(
            "information".into(),
            FieldValue::string("RelayMQ, a single-node broker in the RabbitMQ family"),
        );
        props.insert("capabilities".into(), FieldValue::Table(capabilities));
        // RabbitMQ's: federation links name the upstream by it (`x-received-from`).
        props.insert(
            "cluster_name".into(),
            FieldValue::string(
                self.broker
                    .cluster_name()
                    .unwrap_or_else(crate::server::http::api::node::node_name),
            ),
        );
        self.send(
            0,
            &AmqpMethod::ConnectionStart {
                version_major: 0,
                version_minor: 9,
                server_properties: props,
                mechanisms: MECHANISMS.to_vec(),
                locales: b"en_US".to_vec(),
            },
        );
        self.set_step(Handshake::AwaitStartOk);
    }

    fn method(&mut self, channel: u16, method: AmqpMethod, content: Option<Content>) {
        match &self.life.phase {
            // Everything else is ignored until the socket closes (§1.4.2.2).
            Phase::Closing => self.life.while_closing(
                matches!(method, AmqpMethod::ConnectionClose { .. }),
                method.class_method_id(),
            ),
            // The input posts the header before any method: not reached.
            Phase::Handshake(Handshake::AwaitHeader) => {}
            Phase::Handshake(_) => self.handshake(channel, method),
            Phase::Open(_) if channel == 0 => self.connection_method(method),
            Phase::Open(_) => self.channel_method(channel, method, content),
        }
    }

    fn handshake(&mut self, channel: u16, method: AmqpMethod) {
        let ids = method.class_method_id();
        if channel != 0 {
            let text = format!(
                "{} on channel {channel} during the handshake",
                method.name()
            );
            self.close_connection(ReplyCode::CommandInvalid, &text, ids);
            return;
        }
        let Phase::Handshake(step) = std::mem::replace(&mut self.life.phase, Phase::Closing) else {
            return;
        };
        match (step, method) {
            (
                Handshake::AwaitStartOk,
                AmqpMethod::ConnectionStartOk {
                    client_properties,
                    mechanism,
                    response,
                    ..
                },
            ) => self.start_ok(&client_properties, &mechanism, &response),
            (
                Handshake::AwaitTuneOk { user },
                AmqpMethod::ConnectionTuneOk {
                    channel_max,
                    frame_max,
                    heartbeat,
                },
            ) => self.tune_ok(user, channel_max, frame_max, heartbeat),
            (Handshake::AwaitOpen { user }, AmqpMethod::ConnectionOpen { virtual_host }) => {
                self.open(user, virtual_host)
            }
            (_, AmqpMethod::ConnectionClose { .. }) => {
                self.send(0, &AmqpMethod::ConnectionCloseOk {});
                self.life.wire.outbound().close_after_flush();
            }
            (step, other) => {
                self.set_step(step);
                let text = format!("{} is not expected during the handshake", other.name());
                self.close_connection(ReplyCode::CommandInvalid, &text, ids);
            }
        }
    }

    fn start_ok(&mut self, client_properties: &FieldTable, mechanism: &str, response: &[u8]) {
        self.client_properties = Arc::new(client_properties.clone());
        self.client_name = client_properties
            .get("connection_name")
            .or_else(|| client_properties.get("product"))
            .and_then(FieldValue::as_str)
            .unwrap_or_default()
            .to_string();
        self.cancel_notify = announces(client_properties, "consumer_cancel_notify");
        let credentials = match mechanism {
            "PLAIN" => plain(response),
            "AMQPLAIN" => amqplain(response),
            other => {
                let text = format!("unknown authentication mechanism '{other}'");
                self.set_step(Handshake::AwaitStartOk);
                self.close_connection(ReplyCode::CommandInvalid, &text, START_OK);
                return;
            }
        };
        let Some((user, password)) = credentials else {
            self.set_step(Handshake::AwaitStartOk);
            self.close_connection(
                ReplyCode::AccessRefused,
                &format!("malformed {mechanism} response"),
                START_OK,
            );
            return;
        };
        // Refusals are logged by the broker, with the reason and the peer.
        let peer = self.life.peer;
        match self.broker.login_quick(&user, &password, &peer) {
            LoginStep::Done(result) => self.login_checked(user, mechanism, result),
            LoginStep::Slow => {
                defer_login(&self.broker, &self.conn, &user, password, peer);
                self.set_step(Handshake::Authenticating {
                    user,
                    mechanism: mechanism.to_string(),
                });
            }
        }
    }

    /// Answers `connection.start-ok` once its password is checked: `connection.tune`, or
    /// 403 with RabbitMQ's text for a wrong user or password (details only in the log) and
    /// the broker's own text for other refusals (throttled, busy, loopback-only).
    fn login_checked(&mut self, user: String, mechanism: &str, result: Result<(), BrokerError>) {
        if let Err(e) = result {
            self.set_step(Handshake::AwaitStartOk);
            let text = if e.text.contains("wrong user name or password") {
                // authentication_failure_close: RabbitMQ's text.
                format!(
                    "Login was refused using authentication mechanism {mechanism}. For details \
                     see the broker logfile."
                )
            } else {
                e.text
            };
            self.close_connection(ReplyCode::AccessRefused, &text, START_OK);
            return;
        }
        self.send(
            0,
            &AmqpMethod::ConnectionTune {
                channel_max: self.channel_max,
                frame_max: self.frame_max,
                heartbeat: self.heartbeat_s,
            },
        );
        self.set_step(Handshake::AwaitTuneOk { user });
    }

    fn tune_ok(&mut self, user: String, channel_max: u16, frame_max: u32, heartbeat: u16) {
        // What connection.tune offered (the limits in force at accept).
        let (server_frame_max, server_channel_max) = (self.frame_max, self.channel_max);
        let refuse = if frame_max != 0 && frame_max < AMQP_FRAME_MIN_BYTES {
            Some(format!(
                "frame_max={frame_max} < {AMQP_FRAME_MIN_BYTES} min size"
            ))
        } else if server_frame_max != 0 && frame_max > server_frame_max {
            Some(format!(
                "frame_max={frame_max} > {server_frame_max} max size"
            ))
        } else if channel_max > server_channel_max && server_channel_max != 0 {
            Some(format!(
                "channel_max={channel_max} > {server_channel_max} max size"
            ))
        } else {
            None
        };
        if let Some(text) = refuse {
            self.set_step(Handshake::AwaitTuneOk { user });
            self.close_connection(ReplyCode::NotAllowed, &text, TUNE_OK);
            return;
        }
        self.frame_max = if frame_max == 0 {
            server_frame_max
        } else {
            frame_max
        };
        self.channel_max = if channel_max == 0 {
            server_channel_max
        } else {
            channel_max
        };
        // The client's tune-ok value is the one both sides use (AMQP 0-9-1 §1.4.2.6).
        self.heartbeat_s = heartbeat;
        if let Some(conn) = self.conn.upgrade() {
            conn.frame_max.store(self.frame_max, Ordering::Release);
            conn.heartbeat_s.store(heartbeat, Ordering::Release);
        }
        self.set_step(Handshake::AwaitOpen { user });
    }

    fn open(&mut self, user: String, vhost: String) {
        let vh = match self.broker.open_vhost(&user, &vhost) {
            Ok(v) => v,
            Err(e) => {
                self.set_step(Handshake::AwaitOpen { user });
                if e.code == ReplyCode::InvalidPath {
                    // RabbitMQ answers an unknown vhost with 530 over AMQP.
                    let text = format!("vhost {vhost} not found");
                    self.close_connection(ReplyCode::NotAllowed, &text, OPEN);
                } else {
                    self.close_connection(e.code, &e.text, OPEN);
                }
                return;
            }
        };
        let Some(conn) = self.conn.upgrade() else {
            return;
        };
        let sink = Arc::new(AmqpSink::new(
            Arc::clone(&self.life.wire.outbound),
            self.frame_max,
            Weak::clone(&self.conn),
        ));
        let opening = Opening {
            protocol: crate::broker::node::PROTOCOL_AMQP,
            id: self.life.id,
            peer: self.life.peer,
            local: self.local,
            frame_max: self.frame_max,
            heartbeat_s: self.heartbeat_s,
            channel_max: self.channel_max,
            user: &user,
            vhost_name: &vhost,
            client_name: &self.client_name,
            client_properties: Arc::clone(&self.client_properties),
            traffic: Arc::clone(&conn.traffic),
        };
        // Connection limits (total, per user): 530 before open-ok, as RabbitMQ.
        let session = match open_session(&self.broker, &opening, vh, sink) {
            Ok(session) => session,
            Err(e) => {
                self.set_step(Handshake::AwaitOpen { user });
                self.close_connection(e.code, &e.text, OPEN);
                return;
            }
        };
        self.life.phase = Phase::Open(Box::new(session));
        log::info!(
            "connection {} ({}) opened over AMQP 0-9-1: user '{user}', vhost '{vhost}', client \
             '{}', frame_max {}, heartbeat {} s",
            self.life.id,
            self.life.peer,
            self.client_name,
            self.frame_max,
            self.heartbeat_s
        );
        self.send(0, &AmqpMethod::ConnectionOpenOk {});
        conn.opened.store(true, Ordering::Release);
    }

    fn connection_method(&mut self, method: AmqpMethod) {
        match method {
            AmqpMethod::ConnectionClose { .. } => self.life.client_closed(method.class_method_id()),
            AmqpMethod::ConnectionCloseOk {} => {}
            // RabbitMQ accepts a new secret (OAuth token refresh); with one configured
            // user there is nothing to refresh.
            AmqpMethod::ConnectionUpdateSecret { .. } => {
                self.send(0, &AmqpMethod::ConnectionUpdateSecretOk {})
            }
            other => {
                let ids = other.class_method_id();
                let text = format!("{} is not allowed on channel 0", other.name());
                self.close_connection(ReplyCode::CommandInvalid, &text, ids);
            }
        }
    }

    fn channel_method(&mut self, ch: u16, method: AmqpMethod, content: Option<Content>) {
        let ids = method.class_method_id();
        let step = match method {
            AmqpMethod::ChannelClose { .. } => ChannelStep::Close,
            AmqpMethod::ChannelCloseOk {} => ChannelStep::CloseOk,
            _ => ChannelStep::Other,
        };
        if self.life.closing_channel(ch, step, ids) {
            return;
        }
        if step == ChannelStep::Close {
            self.forget_channel(ch);
        }
        let Some((method, content)) = self.transaction(ch, method, content) else {
            return;
        };
        let wire = &self.life.wire;
        let Phase::Open(session) = &mut self.life.phase else {
            return;
        };
        let result =
            run_channel_method(session, &wire.outbound, self.frame_max, ch, method, content);
        self.answer(ch, ids, result);
    }

    /// Sends what a channel method came to ([`Lifecycle::answer`]); a channel it closed
    /// takes its transaction and confirm mode with it.
    fn answer(
        &mut self,
        ch: u16,
        ids: (u16, u16),
        result: Result<Option<AmqpMethod>, BrokerError>,
    ) {
        if self.life.answer(ch, ids, result) {
            self.forget_channel(ch);
        }
    }
}

impl AmqpHandler {
    /// Tells the client the server cancelled a consumer, once the method that was running
    /// when it happened has been answered: `basic.cancel` to a client that announced
    /// `consumer_cancel_notify`. Another client hears nothing when the queue was deleted
    /// (its consumer silently ends), and has the channel closed with 406 when the
    /// consumer timed out, with RabbitMQ's text (`rabbit_channel`, consumer timeout).
    /// Nothing is sent for a channel closed since, or reopened with the same number.
    fn server_cancel(
        &mut self,
        channel: &Arc<Channel>,
        consumer_tag: String,
        reason: CancelReason,
    ) {
        let n = channel.number;
        let Some(session) = self.life.session() else {
            return;
        };
        if !session.is_channel(n, channel) || self.life.is_closing_channel(n) {
            return;
        }
        match (self.cancel_notify, reason) {
            (true, _) => self.send(
                n,
                &AmqpMethod::BasicCancel {
                    consumer_tag,
                    no_wait: true,
                },
            ),
            (false, CancelReason::QueueDeleted) => {}
            (false, CancelReason::ConsumerTimeout { timeout_ms }) => {
                let err = BrokerError::precondition(format!(
                    "delivery acknowledgement on channel {n} timed out. Timeout value used: \
                     {timeout_ms} ms. This timeout value can be configured, see consumers doc \
                     guide to learn more"
                ));
                self.fail(n, (0, 0), err);
            }
        }
    }

    /// A channel closed: its transaction and confirm mode go with it.
    fn forget_channel(&mut self, ch: u16) {
        self.tx.forget(ch);
        self.confirm_channels.remove(&ch);
    }

    /// Handles what transactions change (`tx.*`, and publishes and acknowledgements on a
    /// transactional channel, which are held until commit); returns the method to run
    /// normally otherwise.
    fn transaction(
        &mut self,
        ch: u16,
        method: AmqpMethod,
        content: Option<Content>,
    ) -> Option<(AmqpMethod, Option<Content>)> {
        use AmqpMethod as M;
        let open = self.life.session().is_some_and(|s| s.has_channel(ch));
        if !open {
            return Some((method, content));
        }
        let ids = method.class_method_id();
        let transactional = self.tx.is_transactional(ch);
        let result: Result<Option<AmqpMethod>, BrokerError> = match method {
            M::TxSelect {} => {
                let selected = self.tx.select(ch, self.confirm_channels.contains(&ch));
                if selected.is_ok() {
                    if let Some(s) = self.life.session_mut() {
                        s.mark_transactional(ch);
                    }
                }
                selected.map(|_| Some(M::TxSelectOk {}))
            }
            M::TxRollback {} => self.tx.rollback(ch).map(|_| Some(M::TxRollbackOk {})),
            M::TxCommit {} => self.commit(ch).map(|_| Some(M::TxCommitOk {})),
            M::ConfirmSelect { .. } if transactional => Err(BrokerError::precondition(
                "cannot switch from tx to confirm mode",
            )),
            M::ConfirmSelect { nowait } => {
                self.confirm_channels.insert(ch);
                return Some((M::ConfirmSelect { nowait }, content));
            }
            M::BasicPublish {
                exchange,
                routing_key,
                mandatory,
                immediate: false,
            } if transactional => match content {
                Some(content) => self
                    .tx
                    .hold(
                        ch,
                        TxOp::Publish {
                            exchange,
                            routing_key,
                            mandatory,
                            content: Box::new(content),
                        },
                    )
                    .map(|_| None),
                None => Err(BrokerError::new(
                    ReplyCode::UnexpectedFrame,
                    "basic.publish without content",
                )),
            },
            M::BasicAck {
                delivery_tag,
                multiple,
            } if transactional => self
                .tx
                .hold(
                    ch,
                    TxOp::Ack {
                        delivery_tag,
                        multiple,
                    },
                )
                .map(|_| None),
            M::BasicNack {
                delivery_tag,
                multiple,
                requeue,
            } if transactional => self
                .tx
                .hold(
                    ch,
                    TxOp::Nack {
                        delivery_tag,
                        multiple,
                        requeue,
                    },
                )
                .map(|_| None),
            M::BasicReject {
                delivery_tag,
                requeue,
            } if transactional => self
                .tx
                .hold(
                    ch,
                    TxOp::Nack {
                        delivery_tag,
                        multiple: false,
                        requeue,
                    },
                )
                .map(|_| None),
            other => return Some((other, content)),
        };
        self.answer(ch, ids, result);
        None
    }

    /// `tx.commit`: applies the held operations in order; the first that fails is the
    /// commit's error (what came before it stays applied, as in RabbitMQ).
    fn commit(&mut self, ch: u16) -> Result<(), BrokerError> {
        let ops = self.tx.commit(ch)?;
        let Some(session) = self.life.session_mut() else {
            return Ok(());
        };
        for op in ops {
            match op {
                TxOp::Publish {
                    exchange,
                    routing_key,
                    mandatory,
                    content,
                } => {
                    let content = *content;
                    session.basic_publish(
                        ch,
                        &exchange,
                        &routing_key,
                        mandatory,
                        content.properties,
                        content.body,
                    )?
                }
                TxOp::Ack {
                    delivery_tag,
                    multiple,
                } => session.basic_ack(ch, delivery_tag, multiple)?,
                TxOp::Nack {
                    delivery_tag,
                    multiple,
                    requeue,
                } => session.basic_nack(ch, delivery_tag, multiple, requeue)?,
            }
        }
        Ok(())
    }
}

/// Executes one channel method on the session; returns the reply to send, if any.
fn run_channel_method(
    session: &mut Session,
    outbound: &Arc<Outbound>,
    frame_max: u32,
    ch: u16,
    method: AmqpMethod,
    content: Option<Content>,
) -> Result<Option<AmqpMethod>, BrokerError> {
    use AmqpMethod as M;
    let reply = |no_wait: bool, m: AmqpMethod| if no_wait { None } else { Some(m) };
    match method {
        M::ChannelOpen {} => session.open_channel(ch).map(|_| Some(M::ChannelOpenOk {})),
        M::ChannelClose { .. } => {
            session.close_channel(ch);
            Ok(Some(M::ChannelCloseOk {}))
        }
        M::ChannelCloseOk {} => Ok(None),
        _ if !session.has_channel(ch) => Err(BrokerError::new(
            ReplyCode::ChannelError,
            format!("expected 'channel.open' on channel {ch}"),
        )),
        M::ChannelFlow { active: true } => Ok(Some(M::ChannelFlowOk { active: true })),
        M::ChannelFlow { active: false } => {
            Err(BrokerError::new(ReplyCode::NotImplemented, "active=false"))
        }
        M::ExchangeDeclare {
            exchange,
            kind,
            passive,
            durable,
            auto_delete,
            internal,
            no_wait,
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
            .map(|_| reply(no_wait, M::ExchangeDeclareOk {})),
        M::ExchangeDelete {
            exchange,
            if_unused,
            no_wait,
        } => session
            .exchange_delete(ch, &exchange, if_unused)
            .map(|_| reply(no_wait, M::ExchangeDeleteOk {})),
        M::ExchangeBind {
            destination,
            source,
            routing_key,
            no_wait,
            arguments,
        } => session
            .exchange_bind(ch, &destination, &source, &routing_key, &arguments)
            .map(|_| reply(no_wait, M::ExchangeBindOk {})),
        M::ExchangeUnbind {
            destination,
            source,
            routing_key,
            no_wait,
            arguments,
        } => session
            .exchange_unbind(ch, &destination, &source, &routing_key, &arguments)
            .map(|_| reply(no_wait, M::ExchangeUnbindOk {})),
        M::QueueDeclare {
            queue,
            passive,
            durable,
            exclusive,
            auto_delete,
            no_wait,
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
                reply(
                    no_wait,
                    M::QueueDeclareOk {
                        queue: d.name,
                        message_count: d.message_count,
                        consumer_count: d.consumer_count,
                    },
                )
            }),
        M::QueueBind {
            queue,
            exchange,
            routing_key,
            no_wait,
            arguments,
        } => session
            .queue_bind(ch, &queue, &exchange, &routing_key, &arguments)
            .map(|_| reply(no_wait, M::QueueBindOk {})),
        M::QueueUnbind {
            queue,
            exchange,
            routing_key,
            arguments,
        } => session
            .queue_unbind(ch, &queue, &exchange, &routing_key, &arguments)
            .map(|_| Some(M::QueueUnbindOk {})),
        M::QueuePurge { queue, no_wait } => session
            .queue_purge(ch, &queue)
            .map(|n| reply(no_wait, M::QueuePurgeOk { message_count: n })),
        M::QueueDelete {
            queue,
            if_unused,
            if_empty,
            no_wait,
        } => session
            .queue_delete(ch, &queue, if_unused, if_empty)
            .map(|n| reply(no_wait, M::QueueDeleteOk { message_count: n })),
        M::BasicQos {
            prefetch_size,
            prefetch_count,
            global,
        } => {
            if prefetch_size != 0 {
                return Err(BrokerError::new(
                    ReplyCode::NotImplemented,
                    format!("prefetch_size!=0 ({prefetch_size})"),
                ));
            }
            session
                .basic_qos(ch, prefetch_count, global)
                .map(|_| Some(M::BasicQosOk {}))
        }
        M::BasicConsume {
            queue,
            consumer_tag,
            no_ack,
            exclusive,
            no_wait,
            arguments,
            ..
        } => session
            .basic_consume(
                ch,
                &queue,
                &consumer_tag,
                no_ack,
                exclusive,
                &arguments,
                |tag| {
                    if !no_wait {
                        let m = M::BasicConsumeOk {
                            consumer_tag: tag.to_string(),
                        };
                        outbound.write_with(|buf| write_method(buf, ch, &m));
                    }
                },
            )
            .map(|_| None),
        M::BasicCancel {
            consumer_tag,
            no_wait,
        } => session
            .basic_cancel(ch, &consumer_tag)
            .map(|_| reply(no_wait, M::BasicCancelOk { consumer_tag })),
        M::BasicPublish {
            exchange,
            routing_key,
            mandatory,
            immediate,
        } => {
            if immediate {
                return Err(BrokerError::new(
                    ReplyCode::NotImplemented,
                    "immediate=true",
                ));
            }
            let Some(content) = content else {
                return Err(BrokerError::new(
                    ReplyCode::UnexpectedFrame,
                    "basic.publish without content",
                ));
            };
            let result = session.basic_publish(
                ch,
                &exchange,
                &routing_key,
                mandatory,
                content.properties,
                content.body,
            );
            session.flush_confirms(ch);
            result.map(|_| None)
        }
        M::BasicGet { queue, no_ack } => session
            .basic_get(ch, &queue, no_ack, |g| {
                let m = M::BasicGetOk {
                    delivery_tag: g.delivery_tag,
                    redelivered: g.redelivered,
                    exchange: g.message.exchange().to_string(),
                    routing_key: g.message.routing_key().to_string(),
                    message_count: g.message_count,
                };
                outbound.write_with(|buf| {
                    write_method(buf, ch, &m);
                    crate::amqp::write_content(
                        buf,
                        ch,
                        crate::amqp::BASIC_CLASS_ID,
                        g.message.properties(),
                        &g.message.body,
                        frame_max,
                    );
                });
            })
            .map(|got| if got { None } else { Some(M::BasicGetEmpty {}) }),
        M::BasicAck {
            delivery_tag,
            multiple,
        } => session.basic_ack(ch, delivery_tag, multiple).map(|_| None),
        M::BasicNack {
            delivery_tag,
            multiple,
            requeue,
        } => session
            .basic_nack(ch, delivery_tag, multiple, requeue)
            .map(|_| None),
        M::BasicReject {
            delivery_tag,
            requeue,
        } => session
            .basic_reject(ch, delivery_tag, requeue)
            .map(|_| None),
        M::BasicRecover { requeue } => session
            .basic_recover(ch, requeue)
            .map(|_| Some(M::BasicRecoverOk {})),
        M::BasicRecoverAsync { requeue } => session.basic_recover(ch, requeue).map(|_| None),
        M::ConfirmSelect { nowait } => session
            .confirm_select(ch)
            .map(|_| reply(nowait, M::ConfirmSelectOk {})),
        other => Err(BrokerError::new(
            ReplyCode::CommandInvalid,
            format!("{} is not a client method on a channel", other.name()),
        )),
    }
}

/// Whether `client_properties` (of `connection.start-ok`) announce `capability` with
/// the boolean true, as RabbitMQ reads them (`{bool, true}` in the `capabilities` table).
fn announces(client_properties: &FieldTable, capability: &str) -> bool {
    match client_properties.get("capabilities") {
        Some(FieldValue::Table(caps)) => caps.get(capability) == Some(&FieldValue::Bool(true)),
        _ => false,
    }
}

/// User and password from a SASL PLAIN response: `authzid NUL user NUL password`.
fn plain(response: &[u8]) -> Option<(String, String)> {
    let mut parts = response.split(|b| *b == 0);
    let _authzid = parts.next()?;
    let user = std::str::from_utf8(parts.next()?).ok()?;
    let password = std::str::from_utf8(parts.next()?).ok()?;
    if parts.next().is_some() {
        return None;
    }
    Some((user.to_string(), password.to_string()))
}

/// User and password from an AMQPLAIN response: a field table without its length prefix,
/// holding `LOGIN` and `PASSWORD` (RabbitMQ's mechanism).
fn amqplain(response: &[u8]) -> Option<(String, String)> {
    let mut framed = Vec::with_capacity(response.len() + 4);
    framed.extend_from_slice(&(u32::try_from(response.len()).ok()?).to_be_bytes());
    framed.extend_from_slice(response);
    let table = decode_table(&mut Reader::new(&framed)).ok()?;
    let user = table.get("LOGIN")?.as_str()?.to_string();
    let password = table.get("PASSWORD")?.as_str()?.to_string();
    Some((user, password))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::field_table::encode_table;

    #[test]
    fn plain_and_amqplain_responses_give_user_and_password() {
        assert_eq!(
            plain(b"\0guest\0secret"),
            Some(("guest".into(), "secret".into()))
        );
        assert_eq!(plain(b"guest"), None);
        assert_eq!(plain(b"\0a\0b\0c"), None);
        let mut t = FieldTable::new();
        t.insert("LOGIN".into(), FieldValue::string("guest"));
        t.insert("PASSWORD".into(), FieldValue::string("pw"));
        let mut bytes = Vec::new();
        encode_table(&mut bytes, &t);
        // AMQPLAIN sends the table's entries without the 4-byte length.
        assert_eq!(amqplain(&bytes[4..]), Some(("guest".into(), "pw".into())));
        assert_eq!(amqplain(b"\x05LOGIN"), None);
    }

    #[test]
    fn reply_texts_carry_the_code_name_as_rabbitmq() {
        assert_eq!(
            reply_text(ReplyCode::NotFound, "no queue 'q' in vhost '/'"),
            "NOT_FOUND - no queue 'q' in vhost '/'"
        );
    }
}
