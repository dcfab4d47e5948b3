//! The protocol handler of a connection: native or AMQP 0-9-1, chosen by the listener
//! that accepted it.

use crate::server::amqp::handler::AmqpHandler;
use crate::server::conn::Event;
use crate::server::native::handler::Handler;

/// One connection's protocol state; run by one worker at a time.
pub enum ConnHandler {
    /// RelayMQ's native protocol.
    Native(Handler),
    /// AMQP 0-9-1.
    Amqp(Box<AmqpHandler>),
}

impl ConnHandler {
    /// Executes one event.
    pub fn handle(&mut self, event: Event) {
        match self {
            ConnHandler::Native(h) => h.handle(event),
            ConnHandler::Amqp(h) => h.handle(event),
        }
    }

    /// Closes the connection after an internal error (541), releasing its session.
    pub fn abort(&mut self) {
        match self {
            ConnHandler::Native(h) => h.abort(),
            ConnHandler::Amqp(h) => h.abort(),
        }
    }
}

/// Hands a login that needs its password checked to the broker's checker thread; the
/// outcome comes back to `conn` as [`Event::LoginChecked`] (both protocols' handlers wait
/// for it in an `Authenticating` state).
pub fn defer_login(
    broker: &crate::broker::Broker,
    conn: &std::sync::Weak<crate::server::conn::Conn>,
    user: &str,
    password: String,
    peer: std::net::SocketAddr,
) {
    let conn = std::sync::Weak::clone(conn);
    broker.submit_login(crate::broker::access::login_checker::LoginJob {
        user: user.to_string(),
        password,
        peer,
        done: Box::new(move |result| {
            if let Some(c) = conn.upgrade() {
                c.push(Event::LoginChecked { result }, 0);
            }
        }),
    });
}
