//! The API's errors: RabbitMQ's `{"error": …, "reason": …}` bodies with its status
//! codes (`rabbit_mgmt_util:halt_response/5` and the `cowboy_rest` defaults), and how
//! the broker's AMQP reply codes map onto them.

use super::{json_reply, JSON};
use crate::error::{BrokerError, ReplyCode};
use crate::server::http::response::Response;

/// An error answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiError {
    /// HTTP status.
    pub status: u16,
    /// The `error` field (`not_found`, `bad_request`, `not_authorised`, ...).
    pub error: String,
    /// The `reason` field, the human text.
    pub reason: String,
    /// Headers to add (e.g. `www-authenticate`).
    pub headers: Vec<(String, String)>,
    /// No body at all (cowboy's 401 for a request without credentials).
    pub empty: bool,
    /// Close the connection after the answer (a body left unread).
    pub close: bool,
}

impl ApiError {
    /// An error with `status`, `error` and `reason`.
    pub fn new(status: u16, error: &str, reason: impl Into<String>) -> ApiError {
        ApiError {
            status,
            error: error.to_string(),
            reason: reason.into(),
            headers: Vec::new(),
            empty: false,
            close: false,
        }
    }

    /// 400 `bad_request`.
    pub fn bad_request(reason: impl Into<String>) -> ApiError {
        ApiError::new(400, "bad_request", reason)
    }

    /// 404 for a missing object (`cowboy_rest`'s `resource_exists` false):
    /// `{"error":"Object Not Found","reason":"Not Found"}`.
    pub fn not_found() -> ApiError {
        ApiError::new(404, "Object Not Found", "Not Found")
    }

    /// 404 `not_found` "Not Found": a vhost the user may not access (RabbitMQ hides it).
    pub fn hidden() -> ApiError {
        ApiError::new(404, "not_found", "Not Found")
    }

    /// 401 `not_authorised` with `reason` (a missing tag or permission).
    pub fn not_authorised(reason: impl Into<String>) -> ApiError {
        ApiError::new(401, "not_authorised", reason)
    }

    /// Closes the connection after the answer.
    pub fn closing(mut self) -> ApiError {
        self.close = true;
        self
    }

    /// The answer.
    pub fn into_response(self) -> Response {
        let mut r = if self.empty {
            Response::empty(self.status)
        } else {
            json_reply(
                self.status,
                &serde_json::json!({"error": self.error, "reason": self.reason}),
            )
        };
        for (n, v) in self.headers {
            r = r.with_header(&n, v);
        }
        if r.headers.iter().all(|(n, _)| n != "content-type") && !self.empty {
            r = r.with_header("content-type", JSON);
        }
        if self.close {
            r = r.closing();
        }
        r
    }
}

impl From<BrokerError> for ApiError {
    /// RabbitMQ answers a refused permission 401, a missing object 404 and every other
    /// channel or connection error of an operation 400 with its text.
    fn from(e: BrokerError) -> ApiError {
        match e.code {
            ReplyCode::AccessRefused => ApiError::not_authorised(e.text),
            ReplyCode::NotFound | ReplyCode::InvalidPath => ApiError::not_found(),
            ReplyCode::InternalError => ApiError::new(500, "internal_server_error", e.text),
            ReplyCode::ResourceError => ApiError::new(503, "service_unavailable", e.text),
            _ => ApiError::bad_request(e.text),
        }
    }
}
