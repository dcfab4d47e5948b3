//! [`ClientError`]: everything a client call can fail with.
//!
//! Server refusals carry the AMQP 0-9-1 reply code and text the server sent (§1.4.2: a
//! "soft" error closes the channel, a "hard" error the connection); the other variants are
//! local: I/O, malformed server data, timeouts and misuse of the API.

use crate::error::ReplyCode;
use std::fmt;
use std::io;

/// An error from the blocking client.
#[derive(Debug)]
pub enum ClientError {
    /// The socket failed: connect refused, reset, unexpected end of stream.
    Io(io::Error),
    /// The server sent data that does not decode or a reply that does not fit the request.
    /// The connection is closed when this happens on the reader thread.
    Protocol(String),
    /// The server refused the credentials or the virtual host at connection open
    /// (403 ACCESS_REFUSED, 402 INVALID_PATH, ...).
    Auth {
        /// AMQP reply code.
        code: u16,
        /// The server's reason.
        text: String,
    },
    /// The server closed the connection (AMQP 0-9-1 §1.4.2 hard error, or a shutdown).
    /// Every pending and later request of the connection fails with this error.
    ConnectionClosed {
        /// AMQP reply code (200 when the connection was closed normally).
        code: u16,
        /// The server's reason.
        text: String,
    },
    /// The channel was closed: by the server after a failed request (the request that
    /// caused it gets this error, with the server's code and text) or by the client.
    ChannelClosed {
        /// AMQP reply code (200 when the channel was closed normally).
        code: u16,
        /// The server's reason.
        text: String,
    },
    /// No reply arrived within the connection's request timeout.
    Timeout,
    /// The caller asked for something the client cannot send: a name longer than 255
    /// bytes, no free channel number, a request on a connection closed by the client.
    Usage(String),
    /// TLS failed: a CA, certificate or key file that cannot be used (the message names
    /// it), a handshake the server or the client refused (untrusted certificate, wrong
    /// server name, a client certificate missing or not trusted), or a record that does
    /// not decrypt on an open connection.
    Tls(String),
}

impl ClientError {
    /// The AMQP reply code when the error came from the server, else `None`.
    pub fn reply_code(&self) -> Option<u16> {
        match self {
            ClientError::Auth { code, .. }
            | ClientError::ConnectionClosed { code, .. }
            | ClientError::ChannelClosed { code, .. } => Some(*code),
            _ => None,
        }
    }

    /// The server's reply text when the error came from the server, else `None`.
    pub fn reply_text(&self) -> Option<&str> {
        match self {
            ClientError::Auth { text, .. }
            | ClientError::ConnectionClosed { text, .. }
            | ClientError::ChannelClosed { text, .. } => Some(text),
            _ => None,
        }
    }

    /// Whether this is [`ClientError::Timeout`].
    pub fn is_timeout(&self) -> bool {
        matches!(self, ClientError::Timeout)
    }

    /// A copy of the error, for handing one failure to every waiting request
    /// (`io::Error` is not `Clone`: the copy keeps its kind and message).
    pub(crate) fn duplicate(&self) -> ClientError {
        match self {
            ClientError::Io(e) => ClientError::Io(io::Error::new(e.kind(), e.to_string())),
            ClientError::Protocol(s) => ClientError::Protocol(s.clone()),
            ClientError::Auth { code, text } => ClientError::Auth {
                code: *code,
                text: text.clone(),
            },
            ClientError::ConnectionClosed { code, text } => ClientError::ConnectionClosed {
                code: *code,
                text: text.clone(),
            },
            ClientError::ChannelClosed { code, text } => ClientError::ChannelClosed {
                code: *code,
                text: text.clone(),
            },
            ClientError::Timeout => ClientError::Timeout,
            ClientError::Usage(s) => ClientError::Usage(s.clone()),
            ClientError::Tls(s) => ClientError::Tls(s.clone()),
        }
    }
}

/// Writes `NAME (CODE): text`, or `reply code CODE: text` for a code outside the
/// specification's list. A text in RabbitMQ's `NAME - text` form loses its prefix, which
/// would repeat the name.
fn write_reply(f: &mut fmt::Formatter<'_>, code: u16, text: &str) -> fmt::Result {
    match ReplyCode::from_u16(code) {
        Some(rc) => {
            let text = text
                .strip_prefix(rc.name())
                .and_then(|t| t.strip_prefix(" - "))
                .unwrap_or(text);
            write!(f, "{rc}: {text}")
        }
        None => write!(f, "reply code {code}: {text}"),
    }
}

impl fmt::Display for ClientError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ClientError::Io(e) => write!(f, "{e}"),
            ClientError::Protocol(s) => write!(f, "protocol error: {s}"),
            ClientError::Auth { code, text }
            | ClientError::ConnectionClosed { code, text }
            | ClientError::ChannelClosed { code, text } => write_reply(f, *code, text),
            ClientError::Timeout => f.write_str("timed out waiting for the server"),
            ClientError::Usage(s) => f.write_str(s),
            ClientError::Tls(s) => write!(f, "TLS: {s}"),
        }
    }
}

impl std::error::Error for ClientError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            ClientError::Io(e) => Some(e),
            _ => None,
        }
    }
}

impl From<io::Error> for ClientError {
    /// [`ClientError::Tls`] for a TLS failure (rustls reports them as I/O errors),
    /// [`ClientError::Io`] otherwise.
    fn from(e: io::Error) -> ClientError {
        match crate::tls::tls_failure(&e) {
            Some(t) => ClientError::Tls(t.to_string()),
            None => ClientError::Io(e),
        }
    }
}

impl From<crate::error::DecodeError> for ClientError {
    fn from(e: crate::error::DecodeError) -> ClientError {
        ClientError::Protocol(e.message)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn display_names_the_reply_code() {
        let e = ClientError::ChannelClosed {
            code: 404,
            text: "no queue 'x' in vhost '/'".into(),
        };
        assert_eq!(e.to_string(), "NOT_FOUND (404): no queue 'x' in vhost '/'");
        let e = ClientError::ChannelClosed {
            code: 404,
            text: "NOT_FOUND - no queue 'x' in vhost '/'".into(),
        };
        assert_eq!(e.to_string(), "NOT_FOUND (404): no queue 'x' in vhost '/'");
        assert_eq!(e.reply_code(), Some(404));
        let e = ClientError::ConnectionClosed {
            code: 999,
            text: "odd".into(),
        };
        assert_eq!(e.to_string(), "reply code 999: odd");
        assert_eq!(ClientError::Timeout.reply_code(), None);
    }

    #[test]
    fn duplicate_keeps_io_kind() {
        let e = ClientError::Io(io::Error::new(io::ErrorKind::ConnectionReset, "reset"));
        match e.duplicate() {
            ClientError::Io(d) => assert_eq!(d.kind(), io::ErrorKind::ConnectionReset),
            other => panic!("{other:?}"),
        }
    }
}
