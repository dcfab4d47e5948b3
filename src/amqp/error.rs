//! The errors the AMQP 0-9-1 codec returns: each carries the reply code and text the
//! server sends in `connection.close` (AMQP 0-9-1 §1.4.2.8, §4.2.3).

use crate::error::ReplyCode;
use std::fmt;

/// A framing failure: a frame or content header that cannot be read.
///
/// Every framing error is a connection error (AMQP 0-9-1 §4.2.3: "the peer MUST close the
/// connection with a frame error"). It names no method, so `connection.close` carries
/// class id 0 and method id 0 unless the caller knows the method being assembled.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FrameError {
    /// The reply code: 501 FRAME_ERROR for framing, 502 SYNTAX_ERROR for an illegal value
    /// in a content header.
    pub code: ReplyCode,
    /// What was wrong, for the `reply-text` of `connection.close`.
    pub text: String,
}

impl FrameError {
    /// A 501 FRAME_ERROR with the given text.
    pub fn frame(text: impl Into<String>) -> FrameError {
        FrameError {
            code: ReplyCode::FrameError,
            text: text.into(),
        }
    }

    /// A 502 SYNTAX_ERROR with the given text.
    pub fn syntax(text: impl Into<String>) -> FrameError {
        FrameError {
            code: ReplyCode::SyntaxError,
            text: text.into(),
        }
    }
}

impl fmt::Display for FrameError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.code, self.text)
    }
}

impl std::error::Error for FrameError {}

/// A method payload that does not decode.
///
/// Carries the class and method ids when they could be read, so `connection.close` can
/// name the offending method (AMQP 0-9-1 `connection.close` fields `class-id`,
/// `method-id`); both are 0 when the payload was too short to hold them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MethodError {
    /// The reply code: 501 FRAME_ERROR (no class/method ids), 540 NOT_IMPLEMENTED (unknown
    /// class or method) or 502 SYNTAX_ERROR (arguments that do not decode).
    pub code: ReplyCode,
    /// What was wrong, for the `reply-text` of `connection.close`.
    pub text: String,
    /// The class id of the offending method, 0 when unknown.
    pub class_id: u16,
    /// The method id of the offending method, 0 when unknown.
    pub method_id: u16,
}

impl fmt::Display for MethodError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}: {} (class {}, method {})",
            self.code, self.text, self.class_id, self.method_id
        )
    }
}

impl std::error::Error for MethodError {}
