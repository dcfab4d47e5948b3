//! AMQP 0-9-1 reply codes and the error types the core and the codecs return.
//!
//! Every failure a client can see carries a [`ReplyCode`] and a human message. Whether it
//! closes the channel or the connection follows AMQP 0-9-1 §1.4.2 (soft and hard errors).

use std::fmt;

/// A reply code from AMQP 0-9-1 §1.4.2 (the constants class of the specification).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u16)]
pub enum ReplyCode {
    /// 200: the operation completed.
    Success = 200,
    /// 311: the message is larger than the server accepts.
    ContentTooLarge = 311,
    /// 312: a mandatory message could not be routed to any queue.
    NoRoute = 312,
    /// 313: an immediate message had no consumer (not supported by RelayMQ).
    NoConsumers = 313,
    /// 320: the server closed the connection (shutdown, administrator).
    ConnectionForced = 320,
    /// 402: the virtual host does not exist.
    InvalidPath = 402,
    /// 403: the operation is not permitted (credentials, reserved names).
    AccessRefused = 403,
    /// 404: the exchange, queue or consumer does not exist.
    NotFound = 404,
    /// 405: the resource is exclusively owned by another connection.
    ResourceLocked = 405,
    /// 406: the request contradicts the current state (inequivalent redeclare, unknown tag).
    PreconditionFailed = 406,
    /// 501: a malformed frame.
    FrameError = 501,
    /// 502: a frame with an illegal field value.
    SyntaxError = 502,
    /// 503: a method that is not valid in this state.
    CommandInvalid = 503,
    /// 504: a channel that is not open, or already open.
    ChannelError = 504,
    /// 505: a frame that was not expected now.
    UnexpectedFrame = 505,
    /// 506: the server ran out of a resource (too many channels, ...).
    ResourceError = 506,
    /// 530: the operation is not allowed.
    NotAllowed = 530,
    /// 540: the method is not implemented.
    NotImplemented = 540,
    /// 541: an internal error.
    InternalError = 541,
}

impl ReplyCode {
    /// The code's number on the wire.
    pub fn as_u16(self) -> u16 {
        self as u16
    }

    /// The code for a number, or `None` when it is not one of the specification's codes.
    pub fn from_u16(code: u16) -> Option<ReplyCode> {
        use ReplyCode::*;
        Some(match code {
            200 => Success,
            311 => ContentTooLarge,
            312 => NoRoute,
            313 => NoConsumers,
            320 => ConnectionForced,
            402 => InvalidPath,
            403 => AccessRefused,
            404 => NotFound,
            405 => ResourceLocked,
            406 => PreconditionFailed,
            501 => FrameError,
            502 => SyntaxError,
            503 => CommandInvalid,
            504 => ChannelError,
            505 => UnexpectedFrame,
            506 => ResourceError,
            530 => NotAllowed,
            540 => NotImplemented,
            541 => InternalError,
            _ => return None,
        })
    }

    /// The specification's name, e.g. `NOT_FOUND`.
    pub fn name(self) -> &'static str {
        use ReplyCode::*;
        match self {
            Success => "REPLY_SUCCESS",
            ContentTooLarge => "CONTENT_TOO_LARGE",
            NoRoute => "NO_ROUTE",
            NoConsumers => "NO_CONSUMERS",
            ConnectionForced => "CONNECTION_FORCED",
            InvalidPath => "INVALID_PATH",
            AccessRefused => "ACCESS_REFUSED",
            NotFound => "NOT_FOUND",
            ResourceLocked => "RESOURCE_LOCKED",
            PreconditionFailed => "PRECONDITION_FAILED",
            FrameError => "FRAME_ERROR",
            SyntaxError => "SYNTAX_ERROR",
            CommandInvalid => "COMMAND_INVALID",
            ChannelError => "CHANNEL_ERROR",
            UnexpectedFrame => "UNEXPECTED_FRAME",
            ResourceError => "RESOURCE_ERROR",
            NotAllowed => "NOT_ALLOWED",
            NotImplemented => "NOT_IMPLEMENTED",
            InternalError => "INTERNAL_ERROR",
        }
    }

    /// Whether an error with this code closes the whole connection (a "hard" error,
    /// AMQP 0-9-1 §1.4.2) rather than only the channel.
    pub fn is_connection_error(self) -> bool {
        use ReplyCode::*;
        matches!(
            self,
            ConnectionForced
                | InvalidPath
                | FrameError
                | SyntaxError
                | CommandInvalid
                | ChannelError
                | UnexpectedFrame
                | ResourceError
                | NotAllowed
                | NotImplemented
                | InternalError
        )
    }
}

impl fmt::Display for ReplyCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({})", self.name(), self.as_u16())
    }
}

/// A refusal from the broker core: a reply code and the text the client is shown.
///
/// The protocol adapter closes the channel or the connection according to
/// [`ReplyCode::is_connection_error`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BrokerError {
    /// The AMQP reply code.
    pub code: ReplyCode,
    /// The message shown to the client, in RabbitMQ's wording where RabbitMQ has one.
    pub text: String,
}

impl BrokerError {
    /// An error with a code and a message.
    pub fn new(code: ReplyCode, text: impl Into<String>) -> BrokerError {
        BrokerError {
            code,
            text: text.into(),
        }
    }

    /// 404 NOT_FOUND with the given message.
    pub fn not_found(text: impl Into<String>) -> BrokerError {
        BrokerError::new(ReplyCode::NotFound, text)
    }

    /// 406 PRECONDITION_FAILED with the given message.
    pub fn precondition(text: impl Into<String>) -> BrokerError {
        BrokerError::new(ReplyCode::PreconditionFailed, text)
    }

    /// 403 ACCESS_REFUSED with the given message.
    pub fn access_refused(text: impl Into<String>) -> BrokerError {
        BrokerError::new(ReplyCode::AccessRefused, text)
    }

    /// 405 RESOURCE_LOCKED with the given message.
    pub fn resource_locked(text: impl Into<String>) -> BrokerError {
        BrokerError::new(ReplyCode::ResourceLocked, text)
    }
}

impl fmt::Display for BrokerError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.code, self.text)
    }
}

impl std::error::Error for BrokerError {}

/// Input that does not decode: a truncated, oversized or malformed field.
///
/// Reported to the peer as 502 SYNTAX_ERROR (or 501 FRAME_ERROR for framing) and the
/// connection is closed (AMQP 0-9-1 §4.2.3).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DecodeError {
    /// What was wrong, naming the field.
    pub message: String,
}

impl DecodeError {
    /// A decode error with a message naming the field.
    pub fn new(message: impl Into<String>) -> DecodeError {
        DecodeError {
            message: message.into(),
        }
    }
}

impl fmt::Display for DecodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for DecodeError {}

impl From<DecodeError> for BrokerError {
    fn from(e: DecodeError) -> BrokerError {
        BrokerError::new(ReplyCode::SyntaxError, e.message)
    }
}
