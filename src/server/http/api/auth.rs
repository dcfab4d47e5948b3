//! Who sent a request and what their tags let them do, as RabbitMQ's management plugin
//! decides it (`rabbit_web_dispatch_access_control`, RabbitMQ 4.x):
//!
//! - no `Authorization: Basic` header: 401 with `WWW-Authenticate: Basic
//!   realm="RabbitMQ Management"` and no body;
//! - a wrong user name or password: 401 `{"error":"not_authorized",
//!   "reason":"Not_Authorized"}` (no `WWW-Authenticate`, so a browser does not ask again);
//! - a user without any of the tags `management`, `policymaker`, `monitoring`,
//!   `administrator`: 401 `not_authorised` "Not management user";
//! - a loopback-only user from another address: 401 "User can only log in via
//!   localhost".
//!
//! Passwords are checked as for AMQP logins: the login throttle first, then the last
//! verified password's digest (no argon2 for a client repeating its credentials on each
//! request, as every HTTP client does), then argon2 on the `relaymq-auth` thread.

use super::ApiError;
use crate::broker::access::login_checker::LoginJob;
use crate::broker::access::LoginStep;
use crate::broker::Broker;
use crate::server::http::request::Request;
use base64::Engine;
use std::time::Duration;

/// The realm of the `WWW-Authenticate` challenge (RabbitMQ's `?AUTH_REALM`).
pub const AUTH_REALM: &str = "Basic realm=\"RabbitMQ Management\"";

/// Longest wait for a password check on the `relaymq-auth` thread, in ms.
const LOGIN_CHECK_WAIT_MS: u64 = 30_000;

/// The authenticated user of a request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Caller {
    /// User name.
    pub name: String,
    /// Tags.
    pub tags: Vec<String>,
}

impl Caller {
    fn has(&self, tags: &[&str]) -> bool {
        self.tags.iter().any(|t| tags.contains(&t.as_str()))
    }

    /// `administrator`.
    pub fn is_admin(&self) -> bool {
        self.has(&["administrator"])
    }

    /// `administrator` or `monitoring`.
    pub fn is_monitor(&self) -> bool {
        self.has(&["administrator", "monitoring"])
    }

    /// `administrator` or `policymaker`.
    pub fn is_policymaker(&self) -> bool {
        self.has(&["administrator", "policymaker"])
    }

    /// Any management tag.
    pub fn is_management(&self) -> bool {
        self.has(&["administrator", "monitoring", "policymaker", "management"])
    }
}

/// User name and password of an `Authorization: Basic` header.
fn basic_credentials(request: &Request) -> Option<(String, String)> {
    let value = request.header("authorization")?;
    let (scheme, encoded) = value.split_once(' ')?;
    if !scheme.eq_ignore_ascii_case("basic") {
        return None;
    }
    let decoded = base64::engine::general_purpose::STANDARD
        .decode(encoded.trim())
        .ok()?;
    let text = String::from_utf8(decoded).ok()?;
    let (user, password) = text.split_once(':')?;
    Some((user.to_string(), password.to_string()))
}

/// The caller of `request`.
///
/// # Errors
/// 401 as the module documentation lists.
pub fn authenticate(broker: &Broker, request: &Request) -> Result<Caller, ApiError> {
    let Some((user, password)) = basic_credentials(request) else {
        let mut e = ApiError::new(401, "not_authorized", "");
        e.empty = true;
        e.headers
            .push(("www-authenticate".into(), AUTH_REALM.into()));
        return Err(e);
    };
    let outcome = match broker.login_quick(&user, &password, &request.peer) {
        LoginStep::Done(r) => r,
        LoginStep::Slow => {
            let (tx, rx) = crossbeam_channel::bounded(1);
            broker.submit_login(LoginJob {
                user: user.clone(),
                password,
                peer: request.peer,
                done: Box::new(move |r| {
                    let _ = tx.send(r);
                }),
            });
            rx.recv_timeout(Duration::from_millis(LOGIN_CHECK_WAIT_MS))
                .unwrap_or_else(|_| {
                    Err(crate::error::BrokerError::access_refused(
                        "password check timed out",
                    ))
                })
        }
    };
    if let Err(e) = outcome {
        if e.text.contains("can only connect via localhost") {
            return Err(ApiError::not_authorised(
                "User can only log in via localhost",
            ));
        }
        return Err(ApiError::new(401, "not_authorized", "Not_Authorized"));
    }
    let tags = broker
        .users()
        .user(&user)
        .map(|u| u.tags)
        .unwrap_or_default();
    let caller = Caller { name: user, tags };
    if !caller.is_management() {
        log::warn!(
            "HTTP access denied: user '{}' - Not management user",
            caller.name.escape_debug()
        );
        return Err(ApiError::not_authorised("Not management user"));
    }
    Ok(caller)
}

/// What a request needs of its caller beyond a management tag (RabbitMQ's
/// `is_authorized_*` variants).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Need {
    /// `administrator`: "Not administrator user".
    Administrator,
    /// `monitoring` or `administrator`: "Not monitor user".
    Monitor,
}

/// Checks `need` for `caller`.
///
/// # Errors
/// 401 `not_authorised` with RabbitMQ's text.
pub fn require(caller: &Caller, need: Need) -> Result<(), ApiError> {
    let (ok, text) = match need {
        Need::Administrator => (caller.is_admin(), "Not administrator user"),
        Need::Monitor => (caller.is_monitor(), "Not monitor user"),
    };
    if ok {
        Ok(())
    } else {
        log::warn!(
            "HTTP access denied: user '{}' - {text}",
            caller.name.escape_debug()
        );
        Err(ApiError::not_authorised(text))
    }
}

/// Whether `caller` may see or use `vhost` (`is_authorized_vhost`): an administrator,
/// or a user with permissions there. A vhost that does not exist passes (the endpoint
/// then answers 404); one the user may not access is hidden behind 404 `not_found`.
///
/// # Errors
/// 404 `not_found` "Not Found" when refused.
pub fn require_vhost(broker: &Broker, caller: &Caller, vhost: &str) -> Result<(), ApiError> {
    if caller.is_admin()
        || broker.vhost(vhost).is_none()
        || broker.users().permissions(&caller.name, vhost).is_some()
    {
        Ok(())
    } else {
        Err(ApiError::hidden())
    }
}

/// Whether `caller` sees objects of `vhost` in a list: monitors and administrators see
/// all, other users the vhosts they have permissions in (`rabbit_mgmt_util:list_visible_vhosts`).
pub fn sees_vhost(broker: &Broker, caller: &Caller, vhost: &str) -> bool {
    caller.is_monitor() || broker.users().permissions(&caller.name, vhost).is_some()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn caller(tags: &[&str]) -> Caller {
        Caller {
            name: "u".into(),
            tags: tags.iter().map(|t| t.to_string()).collect(),
        }
    }

    #[test]
    fn tags_extend_management_as_rabbitmq_does() {
        assert!(require(&caller(&["management"]), Need::Monitor).is_err());
        assert!(require(&caller(&["monitoring"]), Need::Monitor).is_ok());
        assert!(require(&caller(&["monitoring"]), Need::Administrator).is_err());
        assert!(caller(&["policymaker"]).is_policymaker());
        assert!(require(&caller(&["policymaker"]), Need::Monitor).is_err());
        let admin = caller(&["administrator"]);
        for need in [Need::Administrator, Need::Monitor] {
            assert!(require(&admin, need).is_ok(), "{need:?}");
        }
        assert!(!caller(&["impersonator"]).is_management());
        let e = require(&caller(&["management"]), Need::Administrator).unwrap_err();
        assert_eq!(
            (e.status, e.error.as_str(), e.reason.as_str()),
            (401, "not_authorised", "Not administrator user")
        );
    }
}
