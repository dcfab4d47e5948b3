//! [`AmqpClientError`]: everything an AMQP 0-9-1 client call can fail with.
//!
//! Server refusals carry the reply code and text of the server's `connection.close` or
//! `channel.close` (AMQP 0-9-1 §1.4.2: a "soft" error closes the channel, a "hard" error
//! the connection); the other variants are local: the socket, malformed server data,
//! timeouts and misuse of the API.

use std::fmt;
use std::io;

/// An error from the AMQP 0-9-1 client.
#[derive(Debug)]
pub enum AmqpClientError {
    /// The socket failed or the server hung up (an unexpected end of stream is kind
    /// `UnexpectedEof`).
    Io {
        /// What the client was doing, e.g. `cannot connect to 127.0.0.1:5672`.
        context: String,
        /// The socket's error.
        source: io::Error,
    },
    /// The server sent a frame this client cannot read or did not expect: a malformed
    /// frame (AMQP 0-9-1 §4.2.3), an undecodable method, content outside a delivery, a
    /// confirm of a publish never sent. The connection can no longer be trusted.
    Protocol(String),
    /// The server closed the connection (`connection.close`, answered with `close-ok`):
    /// a refused login (403), an unknown vhost (530), a hard error, a shutdown (320).
    ConnectionClosed {
        /// The reply code, e.g. 403.
        code: u16,
        /// The reply text, e.g. `ACCESS_REFUSED - Login was refused …`.
        text: String,
    },
    /// The server closed the channel in use (`channel.close`, answered with
    /// `close-ok`): a refused request (404, 406, …). The connection stays open;
    /// [`Connection::open_channel`](super::Connection::open_channel) opens another.
    ChannelClosed {
        /// The reply code, e.g. 404.
        code: u16,
        /// The reply text.
        text: String,
    },
    /// The server cancelled the consumer (`basic.cancel` from the server, RabbitMQ's
    /// `consumer_cancel_notify`: its queue was deleted, or it timed out).
    ConsumerCancelled {
        /// The consumer's tag.
        consumer_tag: String,
    },
    /// No reply, or not enough confirms, in the time allowed; a write blocked past the
    /// write timeout. The text says which.
    Timeout(String),
    /// TLS could not be set up (`amqps://`): a CA or certificate file, the server's
    /// certificate, a port that does not speak TLS. The text says which.
    Tls(String),
    /// The caller asked for something the client cannot send: a name longer than 255
    /// bytes, no channel number left, a publish prepared for another channel, a content
    /// header larger than the frame size.
    Usage(String),
}

impl AmqpClientError {
    /// An [`AmqpClientError::Io`] with what the client was doing.
    pub(super) fn io(context: impl Into<String>, source: io::Error) -> AmqpClientError {
        AmqpClientError::Io {
            context: context.into(),
            source,
        }
    }

    /// The server's reply code, for a close the server sent; `None` otherwise.
    pub fn reply_code(&self) -> Option<u16> {
        match self {
            AmqpClientError::ConnectionClosed { code, .. }
            | AmqpClientError::ChannelClosed { code, .. } => Some(*code),
            _ => None,
        }
    }

    /// The server's reply text, for a close the server sent; `None` otherwise.
    pub fn reply_text(&self) -> Option<&str> {
        match self {
            AmqpClientError::ConnectionClosed { text, .. }
            | AmqpClientError::ChannelClosed { text, .. } => Some(text),
            _ => None,
        }
    }
}

impl fmt::Display for AmqpClientError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AmqpClientError::Io { context, source } => write!(f, "{context}: {source}"),
            AmqpClientError::Protocol(m)
            | AmqpClientError::Timeout(m)
            | AmqpClientError::Tls(m)
            | AmqpClientError::Usage(m) => f.write_str(m),
            AmqpClientError::ConnectionClosed { code, text } => {
                write!(f, "the server closed the connection: {code} {text}")
            }
            AmqpClientError::ChannelClosed { code, text } => {
                write!(f, "the server closed the channel: {code} {text}")
            }
            AmqpClientError::ConsumerCancelled { consumer_tag } => {
                write!(f, "the server cancelled consumer '{consumer_tag}'")
            }
        }
    }
}

impl std::error::Error for AmqpClientError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            AmqpClientError::Io { source, .. } => Some(source),
            _ => None,
        }
    }
}
