//! One log line per connection event, the same on both listeners: the
//! connection id, the peer, the user and vhost once known, what happened and, for errors,
//! the reply code. No secrets: passwords never reach these functions.
//!
//! Levels follow RabbitMQ's: a client's orderly close and a server close with 320
//! CONNECTION_FORCED (shutdown, `close connection`, vhost deletion) are `info`; a channel
//! or connection error, and a client that drops its socket without `connection.close`,
//! are `warn`.

use crate::broker::Session;
use crate::error::ReplyCode;
use std::fmt;
use std::net::SocketAddr;

/// Who a connection is, as log lines print it: `127.0.0.1:5555, user 'guest', vhost '/'`
/// (only the peer before `connection.open`). Control characters in names are escaped.
pub struct Who<'a> {
    /// The client's address.
    pub peer: SocketAddr,
    /// The open session, when the connection got that far.
    pub session: Option<&'a Session>,
}

impl fmt::Display for Who<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.peer)?;
        if let Some(s) = self.session {
            if let Some(user) = s.user() {
                write!(f, ", user '{}'", user.escape_debug())?;
            }
            write!(f, ", vhost '{}'", s.vhost().name.escape_debug())?;
        }
        Ok(())
    }
}

/// Logs a connection the server closes: 320 CONNECTION_FORCED at info, every other code
/// at warn.
pub fn server_closed(id: u64, who: &Who<'_>, code: ReplyCode, text: &str) {
    if code == ReplyCode::ConnectionForced {
        log::info!("closing connection {id} ({who}): {text}");
    } else {
        log::warn!("closing connection {id} ({who}): {code}: {text}");
    }
}

/// Logs a client's `connection.close`.
pub fn client_closed(id: u64, who: &Who<'_>) {
    log::info!("connection {id} ({who}) closed by the client");
}

/// Logs a socket the client closed without `connection.close` (RabbitMQ: "client
/// unexpectedly closed TCP connection"): warn for an open connection, info for one that
/// never finished its handshake (port probes, health checks). Only for a peer that hung
/// up first (`ConnEvent::Closed { by_peer: true }`): a socket the server closed (handshake
/// or heartbeat timeout, bad protocol header, TLS failure) was logged where that was
/// decided.
pub fn socket_closed(id: u64, who: &Who<'_>) {
    if who.session.is_some() {
        log::warn!(
            "connection {id} ({who}) closed: the client closed the TCP connection without connection.close"
        );
    } else {
        log::info!("connection {id} ({who}) closed by the client during the handshake");
    }
}

/// Logs a channel error: the channel is closed with `code`, the connection stays open
/// (AMQP 0-9-1 §1.4.2.6; RabbitMQ logs these at error as "channel exception").
pub fn channel_error(
    id: u64,
    who: &Who<'_>,
    channel: u16,
    method: &str,
    code: ReplyCode,
    text: &str,
) {
    log::warn!("connection {id} ({who}) channel {channel}: {method}: {code}: {text}");
}
