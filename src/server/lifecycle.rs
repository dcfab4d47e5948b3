//! A connection's life as both protocol adapters live it: its handshake (each protocol's
//! own steps), then open with a [`Session`], then closing; and what both adapters do the
//! same way, written once here: the connection and channel close handshakes, the events
//! every connection takes ([`ConnEvent`]), registering an opened connection and handing a
//! slow password check to the checker thread.
//!
//! The close rules (AMQP 0-9-1 §1.4.2.2 and §2.3.1; docs/protocol.md for the native
//! protocol): a channel error closes only its channel — the server sends `channel.close`
//! and ignores everything on that channel but `channel.close` (answered `close-ok`) and
//! `close-ok` (which frees the number); a connection error sends `connection.close`,
//! releases the session and closes the socket once what is queued is written; once closing,
//! a connection answers only `connection.close` (with `close-ok`). What each protocol
//! puts in those frames (RabbitMQ's `NAME - text` reply texts over AMQP, request ids over
//! the native protocol) is its [`Wire`].

use crate::broker::{Broker, ClientSink, ConnectionInfo, Session, VirtualHost};
use crate::error::{BrokerError, ReplyCode};
use crate::server::conn::{self, Conn};
use crate::server::conn_log::{self, Who};
use crate::server::event::ConnEvent;
use crate::server::outbound::Outbound;
use std::collections::HashSet;
use std::net::SocketAddr;
use std::sync::atomic::AtomicUsize;
use std::sync::{Arc, Weak};
use std::time::SystemTime;

/// Where a connection is in its life.
pub enum Phase<H> {
    /// The protocol's handshake, with what it has gathered so far (`H`, the adapter's own).
    Handshake(H),
    /// Open and serving.
    Open(Box<Session>),
    /// `connection.close` sent or received, or the socket gone: everything but a
    /// `connection.close` is ignored.
    Closing,
}

/// How one protocol writes the methods of the close handshakes, and any reply.
pub trait Wire {
    /// The protocol's method type.
    type Method;
    /// Which client request a frame answers or blames: the native protocol's method and
    /// request ids, AMQP's class and method ids. The default is "none" (zeros).
    type At: Copy + Default;

    /// Appends `method` on `channel` to the connection's outbound buffer, as the answer
    /// to (or about) the request `at`.
    fn send(&self, channel: u16, at: Self::At, method: &Self::Method);
    /// The connection's outbound buffer.
    fn outbound(&self) -> &Outbound;
    /// `connection.close` with `code` and `text`, blaming the request `at`.
    fn connection_close(code: ReplyCode, text: &str, at: Self::At) -> Self::Method;
    /// `connection.close-ok`.
    fn connection_close_ok() -> Self::Method;
    /// `channel.close` with `code` and `text`, blaming the request `at`.
    fn channel_close(code: ReplyCode, text: &str, at: Self::At) -> Self::Method;
    /// `channel.close-ok`.
    fn channel_close_ok() -> Self::Method;
    /// The name of the method `at` for log lines (`"method"` when unknown).
    fn method_name(at: Self::At) -> &'static str;
}

/// What a method received on a channel the server is closing is, for the close handshake.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChannelStep {
    /// `channel.close`: answered `close-ok`, the channel number is free again.
    Close,
    /// `channel.close-ok`: the client acknowledged the server's `channel.close`.
    CloseOk,
    /// Anything else: ignored.
    Other,
}

/// One connection's life, as both adapters keep it: its phase, the channels the server is
/// closing, and how its protocol writes frames.
pub struct Lifecycle<H, W> {
    /// Connection id (for log lines).
    pub id: u64,
    /// Client address (for log lines).
    pub peer: SocketAddr,
    /// How the protocol writes frames (and where to).
    pub wire: W,
    /// Handshake, open or closing.
    pub phase: Phase<H>,
    /// Channels the server closed and that await the client's `close-ok`.
    closing_channels: HashSet<u16>,
}

impl<H, W: Wire> Lifecycle<H, W> {
    /// A connection at the first step of its handshake.
    pub fn new(id: u64, peer: SocketAddr, wire: W, handshake: H) -> Lifecycle<H, W> {
        Lifecycle {
            id,
            peer,
            wire,
            phase: Phase::Handshake(handshake),
            closing_channels: HashSet::new(),
        }
    }

    /// The session, once open.
    pub fn session(&self) -> Option<&Session> {
        match &self.phase {
            Phase::Open(s) => Some(s),
            _ => None,
        }
    }

    /// The session, once open, to change.
    pub fn session_mut(&mut self) -> Option<&mut Session> {
        match &mut self.phase {
            Phase::Open(s) => Some(s),
            _ => None,
        }
    }

    /// Who the connection is, for log lines.
    pub fn who(&self) -> Who<'_> {
        Who {
            peer: self.peer,
            session: self.session(),
        }
    }

    /// Whether the server closed `channel` and waits for its `close-ok`.
    pub fn is_closing_channel(&self, channel: u16) -> bool {
        self.closing_channels.contains(&channel)
    }

    /// Sends `connection.close` (unless closing already), releases the session and
    /// closes the socket once what is queued is flushed.
    pub fn close_connection(&mut self, code: ReplyCode, text: &str, at: W::At) {
        let session = match std::mem::replace(&mut self.phase, Phase::Closing) {
            Phase::Closing => return,
            Phase::Open(session) => Some(session),
            Phase::Handshake(_) => None,
        };
        let who = Who {
            peer: self.peer,
            session: session.as_deref(),
        };
        conn_log::server_closed(self.id, &who, code, text);
        if let Some(mut session) = session {
            session.close();
        }
        self.wire.send(0, at, &W::connection_close(code, text, at));
        self.wire.outbound().close_after_flush();
    }

    /// The client's `connection.close` (`at`) on an open connection: the session is
    /// released, `close-ok` sent and the socket closed once it is flushed.
    pub fn client_closed(&mut self, at: W::At) {
        conn_log::client_closed(self.id, &self.who());
        if let Phase::Open(mut session) = std::mem::replace(&mut self.phase, Phase::Closing) {
            session.close();
        }
        self.wire.send(0, at, &W::connection_close_ok());
        self.wire.outbound().close_after_flush();
    }

    /// A method (`at`) arrived on a closing connection: a `connection.close` is answered
    /// `close-ok`, anything else ignored (AMQP 0-9-1 §1.4.2.2).
    pub fn while_closing(&self, is_connection_close: bool, at: W::At) {
        if is_connection_close {
            self.wire.send(0, at, &W::connection_close_ok());
        }
    }

    /// Reports a failed request `at` on `channel`: a connection error (or any error on
    /// channel 0) closes the connection; a channel error closes the channel — the
    /// session forgets it, `channel.close` is sent and the channel ignored until the
    /// client's `close-ok`. Returns true when a channel was closed (the adapter then drops
    /// what it kept for it).
    pub fn fail(&mut self, channel: u16, at: W::At, err: BrokerError) -> bool {
        if err.code.is_connection_error() || channel == 0 {
            self.close_connection(err.code, &err.text, at);
            return false;
        }
        let method = W::method_name(at);
        conn_log::channel_error(self.id, &self.who(), channel, method, err.code, &err.text);
        if let Phase::Open(session) = &mut self.phase {
            session.close_channel(channel);
        }
        self.closing_channels.insert(channel);
        self.wire
            .send(channel, at, &W::channel_close(err.code, &err.text, at));
        true
    }

    /// Sends what a method on `channel` (`at`) came to: its reply, nothing, or its error
    /// ([`Lifecycle::fail`], whose answer this returns).
    pub fn answer(
        &mut self,
        channel: u16,
        at: W::At,
        result: Result<Option<W::Method>, BrokerError>,
    ) -> bool {
        match result {
            Ok(Some(reply)) => {
                self.wire.send(channel, at, &reply);
                false
            }
            Ok(None) => false,
            Err(e) => self.fail(channel, at, e),
        }
    }

    /// The close handshake of a channel the server closed: returns false when `channel`
    /// is not closing (the method is the adapter's to run); otherwise takes the method
    /// (`step`, `at`) as the handshake says and returns true.
    pub fn closing_channel(&mut self, channel: u16, step: ChannelStep, at: W::At) -> bool {
        if !self.closing_channels.contains(&channel) {
            return false;
        }
        match step {
            ChannelStep::Close => {
                self.closing_channels.remove(&channel);
                self.wire.send(channel, at, &W::channel_close_ok());
            }
            ChannelStep::CloseOk => {
                self.closing_channels.remove(&channel);
            }
            // Everything else on a closing channel is ignored until close-ok.
            ChannelStep::Other => {}
        }
        true
    }

    /// Carries out an event every connection takes; a password check's outcome
    /// ([`ConnEvent::LoginChecked`]) is the adapter's to carry on from and is returned.
    pub fn on_event(&mut self, event: ConnEvent) -> Option<Result<(), BrokerError>> {
        match event {
            ConnEvent::LoginChecked { result } => return Some(result),
            ConnEvent::ProtocolError { code, text } => {
                log::warn!("connection {} ({}): {text}", self.id, self.peer);
                self.close_connection(code, &text, W::At::default());
            }
            ConnEvent::ForceClose { code, text } => {
                self.close_connection(code, &text, W::At::default())
            }
            ConnEvent::Shutdown => self.close_connection(
                ReplyCode::ConnectionForced,
                "broker forced connection closure with reason 'shutdown'",
                W::At::default(),
            ),
            ConnEvent::Drained => {
                if let Some(s) = self.session() {
                    s.redispatch();
                }
            }
            ConnEvent::Closed { by_peer } => {
                // A server-side close (timeout, refused header, TLS failure) was logged
                // where it was decided; only the peer's own close is logged here.
                if by_peer && !matches!(self.phase, Phase::Closing) {
                    conn_log::socket_closed(self.id, &self.who());
                }
                if let Phase::Open(session) = &mut self.phase {
                    session.close();
                }
                self.phase = Phase::Closing;
            }
        }
        None
    }

    /// Closes the connection after an internal error (541), releasing its session.
    pub fn abort(&mut self) {
        self.close_connection(ReplyCode::InternalError, "internal error", W::At::default());
    }
}

/// What an adapter settled in its handshake, for [`open_session`].
pub struct Opening<'a> {
    /// The protocol's name in listings (`broker::node::PROTOCOL_NATIVE` / `PROTOCOL_AMQP`).
    pub protocol: &'static str,
    /// Connection id.
    pub id: u64,
    /// Client address.
    pub peer: SocketAddr,
    /// Server address the client connected to.
    pub local: SocketAddr,
    /// Negotiated frame size, bytes.
    pub frame_max: u32,
    /// Negotiated heartbeat interval, seconds.
    pub heartbeat_s: u16,
    /// Negotiated highest channel number.
    pub channel_max: u16,
    /// The authenticated user.
    pub user: &'a str,
    /// The vhost's name as the client asked for it.
    pub vhost_name: &'a str,
    /// The name the client gave itself.
    pub client_name: &'a str,
    /// The client's properties (AMQP 0-9-1 `start-ok`; empty for the native protocol).
    pub client_properties: Arc<crate::types::FieldTable>,
    /// The connection's byte counters, kept by the I/O thread.
    pub traffic: Arc<crate::broker::node::ConnTraffic>,
}

/// Registers an opened connection with the broker and opens its session on `vhost`,
/// pushing to the client through `sink`.
///
/// # Errors
/// 530 NOT_ALLOWED from [`Broker::register_connection`] when `--max-connections` or the
/// user's `--max-connections-per-user` is reached (RabbitMQ's text): the adapter closes
/// the connection before its `open-ok`.
pub fn open_session(
    broker: &Arc<Broker>,
    opening: &Opening<'_>,
    vhost: Arc<VirtualHost>,
    sink: Arc<dyn ClientSink>,
) -> Result<Session, BrokerError> {
    let channels = Arc::new(AtomicUsize::new(0));
    broker.register_connection(ConnectionInfo {
        id: opening.id,
        protocol: opening.protocol,
        peer: opening.peer,
        local: opening.local,
        frame_max: opening.frame_max,
        heartbeat_s: opening.heartbeat_s,
        user: opening.user.to_string(),
        vhost: opening.vhost_name.to_string(),
        client_name: opening.client_name.to_string(),
        connected_at: SystemTime::now(),
        channels: Arc::clone(&channels),
        channel_max: opening.channel_max,
        client_properties: Arc::clone(&opening.client_properties),
        traffic: Arc::clone(&opening.traffic),
        sink: Arc::clone(&sink),
    })?;
    Ok(Session::new(
        Arc::clone(broker),
        opening.id,
        vhost,
        sink,
        opening.channel_max,
        channels,
    )
    .with_user(opening.user))
}

/// Hands a login that needs its password checked to the broker's checker thread; the
/// outcome comes back to `conn` as [`ConnEvent::LoginChecked`] (both adapters wait for it
/// in a handshake step of their own).
pub fn defer_login(
    broker: &Broker,
    conn: &Weak<Conn>,
    user: &str,
    password: String,
    peer: SocketAddr,
) {
    let conn = Weak::clone(conn);
    broker.submit_login(crate::broker::access::login_checker::LoginJob {
        user: user.to_string(),
        password,
        peer,
        done: Box::new(move |result| conn::post(&conn, ConnEvent::LoginChecked { result })),
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::server::notifier::Notifier;
    use std::cell::RefCell;

    /// A frame as the test wire records it.
    #[derive(Debug, Clone, PartialEq, Eq)]
    enum Frame {
        ConnectionClose(u16, String, u16),
        ConnectionCloseOk,
        ChannelClose(u16, String, u16),
        ChannelCloseOk,
        Reply(&'static str),
    }

    /// Records what is sent, as (channel, request, frame); `At` is a request number.
    struct TestWire {
        outbound: Outbound,
        sent: RefCell<Vec<(u16, u16, Frame)>>,
        _poll: mio::Poll,
    }

    impl Wire for TestWire {
        type Method = Frame;
        type At = u16;

        fn send(&self, channel: u16, at: u16, method: &Frame) {
            self.sent.borrow_mut().push((channel, at, method.clone()));
        }
        fn outbound(&self) -> &Outbound {
            &self.outbound
        }
        fn connection_close(code: ReplyCode, text: &str, at: u16) -> Frame {
            Frame::ConnectionClose(code.as_u16(), text.to_string(), at)
        }
        fn connection_close_ok() -> Frame {
            Frame::ConnectionCloseOk
        }
        fn channel_close(code: ReplyCode, text: &str, at: u16) -> Frame {
            Frame::ChannelClose(code.as_u16(), text.to_string(), at)
        }
        fn channel_close_ok() -> Frame {
            Frame::ChannelCloseOk
        }
        fn method_name(_: u16) -> &'static str {
            "method"
        }
    }

    fn new_life() -> Lifecycle<(), TestWire> {
        let poll = mio::Poll::new().unwrap();
        let waker = mio::Waker::new(poll.registry(), mio::Token(0)).unwrap();
        let wire = TestWire {
            outbound: Outbound::new(1, Arc::new(Notifier::new(waker)), 1 << 20),
            sent: RefCell::new(Vec::new()),
            _poll: poll,
        };
        Lifecycle::new(1, "127.0.0.1:5672".parse().unwrap(), wire, ())
    }

    fn sent(life: &Lifecycle<(), TestWire>) -> Vec<(u16, u16, Frame)> {
        life.wire.sent.borrow_mut().drain(..).collect()
    }

    #[test]
    fn a_channel_error_closes_the_channel_until_the_clients_close_ok() {
        let mut life = new_life();
        let err = BrokerError::new(ReplyCode::NotFound, "no queue 'q'");
        assert!(life.fail(3, 7, err));
        assert_eq!(
            sent(&life),
            [(3, 7, Frame::ChannelClose(404, "no queue 'q'".into(), 7))]
        );
        // Everything on the channel is ignored until close-ok, which frees it.
        assert!(life.closing_channel(3, ChannelStep::Other, 8));
        assert!(
            !life.closing_channel(4, ChannelStep::Other, 8),
            "others run"
        );
        assert!(life.closing_channel(3, ChannelStep::CloseOk, 9));
        assert!(!life.is_closing_channel(3));
        assert!(!life.closing_channel(3, ChannelStep::Other, 10));
        assert_eq!(sent(&life), []);
        assert!(
            !life.wire.outbound.is_closing(),
            "the connection stays open"
        );
    }

    #[test]
    fn a_clients_channel_close_crossing_ours_is_answered_close_ok() {
        let mut life = new_life();
        life.fail(2, 1, BrokerError::precondition("no"));
        sent(&life);
        assert!(life.closing_channel(2, ChannelStep::Close, 5));
        assert_eq!(sent(&life), [(2, 5, Frame::ChannelCloseOk)]);
        assert!(!life.is_closing_channel(2));
    }

    #[test]
    fn a_connection_error_or_any_error_on_channel_zero_closes_the_connection_once() {
        let mut life = new_life();
        let err = BrokerError::new(ReplyCode::ChannelError, "channel 5 is not open");
        assert!(!life.fail(5, 4, err));
        assert_eq!(
            sent(&life),
            [(
                0,
                4,
                Frame::ConnectionClose(504, "channel 5 is not open".into(), 4)
            )]
        );
        assert!(matches!(life.phase, Phase::Closing));
        assert!(life.wire.outbound.is_closing());
        // Closing already: no second close; only a connection.close is answered.
        life.close_connection(ReplyCode::InternalError, "again", 0);
        life.while_closing(false, 6);
        life.while_closing(true, 7);
        assert_eq!(sent(&life), [(0, 7, Frame::ConnectionCloseOk)]);

        let mut life = new_life();
        assert!(!life.fail(0, 3, BrokerError::precondition("admin")));
        assert!(matches!(
            &sent(&life)[..],
            [(0, 3, Frame::ConnectionClose(406, _, 3))]
        ));
    }

    #[test]
    fn replies_go_out_and_errors_fail_the_request() {
        let mut life = new_life();
        assert!(!life.answer(1, 2, Ok(Some(Frame::Reply("ok")))));
        assert!(!life.answer(1, 3, Ok(None)));
        assert!(life.answer(1, 4, Err(BrokerError::precondition("bad"))));
        assert_eq!(
            sent(&life),
            [
                (1, 2, Frame::Reply("ok")),
                (1, 4, Frame::ChannelClose(406, "bad".into(), 4))
            ]
        );
    }

    #[test]
    fn connection_events_close_with_their_code_and_pass_on_login_outcomes() {
        let mut life = new_life();
        assert_eq!(
            life.on_event(ConnEvent::LoginChecked { result: Ok(()) }),
            Some(Ok(()))
        );
        assert_eq!(life.on_event(ConnEvent::Shutdown), None);
        let reason = "broker forced connection closure with reason 'shutdown'";
        assert_eq!(
            sent(&life),
            [(0, 0, Frame::ConnectionClose(320, reason.into(), 0))]
        );
        // The socket going away after the close sends nothing more.
        life.on_event(ConnEvent::Closed { by_peer: true });
        assert!(matches!(life.phase, Phase::Closing));
        assert_eq!(sent(&life), []);
    }

    #[test]
    fn the_client_closing_before_open_gets_close_ok_and_the_socket_closes() {
        let mut life = new_life();
        life.client_closed(9);
        assert_eq!(sent(&life), [(0, 9, Frame::ConnectionCloseOk)]);
        assert!(life.wire.outbound.is_closing());
        assert!(matches!(life.phase, Phase::Closing));
    }
}
