//! AMQP URIs as RabbitMQ writes them ("URI Specification", RabbitMQ's `amqp_uri`):
//! `amqp[s]://[USER[:PASS]@]HOST[:PORT][/VHOST][?QUERY]`, user, password and vhost
//! percent-encoded (vhost `/` is `%2F`). No host (`amqp://`, `amqp:///VHOST`) names the
//! local broker: a shovel's in-process end, no socket and no login.
//!
//! Defaults: user and password `guest`, port 5672 (`amqps`: 5671), vhost `/` when the
//! URI has no path. Query parameters read: `heartbeat` (seconds), `connection_timeout`
//! (ms), and for `amqps` `cacertfile`, `certfile`, `keyfile`, `server_name_indication`;
//! `verify=verify_peer` is the only verification (a certificate is always checked).
//! `channel_max`, `frame_max` and `auth_mechanism` are accepted and take no effect (the
//! server's values and PLAIN are used). Anything else is refused, so a typo is seen.

use std::path::PathBuf;

/// Port of an `amqp://` URI that names none (AMQP 0-9-1's IANA port).
pub const AMQP_PORT_DEFAULT: u16 = 5672;

/// Port of an `amqps://` URI that names none (AMQP over TLS, IANA).
pub const AMQPS_PORT_DEFAULT: u16 = 5671;

/// A parsed AMQP URI.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AmqpUri {
    /// `amqps://`: TLS.
    pub tls: bool,
    /// The host, brackets of an IPv6 literal kept; `None`: the local broker.
    pub host: Option<String>,
    /// The port.
    pub port: u16,
    /// User name (decoded).
    pub user: String,
    /// Password (decoded).
    pub password: String,
    /// Virtual host (decoded: `/`, not `%2F`).
    pub vhost: String,
    /// `heartbeat`, seconds.
    pub heartbeat: Option<u16>,
    /// `connection_timeout`, ms.
    pub connection_timeout_ms: Option<u64>,
    /// `cacertfile`: PEM file of the CAs the server's certificate must chain to.
    pub ca_file: Option<PathBuf>,
    /// `certfile`: this client's certificate chain (PEM).
    pub cert_file: Option<PathBuf>,
    /// `keyfile`: this client's private key (PEM).
    pub key_file: Option<PathBuf>,
    /// `server_name_indication`: the name the server's certificate must carry.
    pub server_name: Option<String>,
}

impl AmqpUri {
    /// Parses `uri`.
    ///
    /// # Errors
    /// A sentence saying what is wrong: another scheme, a bad port, a bad
    /// percent-encoding, an unknown or bad query parameter.
    pub fn parse(uri: &str) -> Result<AmqpUri, String> {
        let lower = uri.to_ascii_lowercase();
        let (tls, rest) = if lower.starts_with("amqp://") {
            (false, &uri["amqp://".len()..])
        } else if lower.starts_with("amqps://") {
            (true, &uri["amqps://".len()..])
        } else {
            return Err("expected amqp:// or amqps://".into());
        };
        let (rest, query) = match rest.split_once('?') {
            Some((r, q)) => (r, Some(q)),
            None => (rest, None),
        };
        let (authority, vhost) = match rest.split_once('/') {
            Some((a, v)) if !v.is_empty() => (a, percent_decode(v)?),
            Some((a, _)) => (a, "/".to_string()),
            None => (rest, "/".to_string()),
        };
        let (userinfo, host_port) = match authority.rsplit_once('@') {
            Some((u, h)) => (Some(u), h),
            None => (None, authority),
        };
        let (user, password) = match userinfo {
            Some(u) => match u.split_once(':') {
                Some((n, p)) => (percent_decode(n)?, percent_decode(p)?),
                None => (percent_decode(u)?, String::new()),
            },
            None => ("guest".to_string(), "guest".to_string()),
        };
        let default_port = if tls {
            AMQPS_PORT_DEFAULT
        } else {
            AMQP_PORT_DEFAULT
        };
        let (host, port) = host_and_port(host_port, default_port)?;
        let mut u = AmqpUri {
            tls,
            host,
            port,
            user,
            password,
            vhost,
            ..AmqpUri::default()
        };
        for pair in query.unwrap_or("").split('&').filter(|p| !p.is_empty()) {
            let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
            let v = percent_decode(v)?;
            let number = |max: u64| {
                v.parse::<u64>()
                    .ok()
                    .filter(|n| *n <= max)
                    .ok_or_else(|| format!("{k} must be a number from 0 to {max}, not '{v}'"))
            };
            match k {
                "heartbeat" => u.heartbeat = Some(number(u64::from(u16::MAX))? as u16),
                "connection_timeout" => u.connection_timeout_ms = Some(number(u64::MAX)?),
                "cacertfile" => u.ca_file = Some(v.into()),
                "certfile" => u.cert_file = Some(v.into()),
                "keyfile" => u.key_file = Some(v.into()),
                "server_name_indication" if v != "disable" => u.server_name = Some(v),
                "server_name_indication" => {}
                "verify" if v == "verify_peer" => {}
                "verify" => {
                    return Err(format!(
                        "verify={v} is not supported: the server's certificate is always \
                         checked (verify_peer)"
                    ))
                }
                "channel_max" | "frame_max" | "auth_mechanism" => {}
                _ => return Err(format!("unknown URI parameter '{k}'")),
            }
        }
        Ok(u)
    }

    /// Whether the URI names the local broker (no host).
    pub fn is_local(&self) -> bool {
        self.host.is_none()
    }

    /// `HOST:PORT` to connect to (empty for the local broker).
    pub fn addr(&self) -> String {
        match &self.host {
            Some(h) => format!("{h}:{}", self.port),
            None => String::new(),
        }
    }
}

/// The host (`None` when empty: the local broker) and port of an authority.
///
/// # Errors
/// A port that is not 1–65535.
fn host_and_port(host_port: &str, default_port: u16) -> Result<(Option<String>, u16), String> {
    // A bracketed IPv6 host has colons of its own: the port follows "]:".
    let (host, port) = if let Some(after) = host_port.strip_prefix('[') {
        let (h, tail) = after
            .split_once(']')
            .ok_or_else(|| format!("'{host_port}': an IPv6 host needs its closing ']'"))?;
        (format!("[{h}]"), tail.strip_prefix(':'))
    } else {
        match host_port.rsplit_once(':') {
            Some((h, p)) => (h.to_string(), Some(p)),
            None => (host_port.to_string(), None),
        }
    };
    let port = match port {
        Some(p) => p
            .parse::<u16>()
            .ok()
            .filter(|p| *p != 0)
            .ok_or_else(|| format!("'{p}' is not a port (1-65535)"))?,
        None => default_port,
    };
    let host = (!host.is_empty() && host != "[]").then_some(host);
    Ok((host, port))
}

/// `uri` with its user and password left out, as RabbitMQ shows a shovel's URIs
/// (`amqp_uri:remove_credentials/1`): `amqp://bob:secret@host/vh` → `amqp://host/vh`.
/// Text that is not a URI comes back unchanged.
pub fn redact(uri: &str) -> String {
    let Some((scheme, rest)) = uri.split_once("://") else {
        return uri.to_string();
    };
    let end = rest.find(['/', '?']).unwrap_or(rest.len());
    match rest[..end].rfind('@') {
        Some(at) => format!("{scheme}://{}", &rest[at + 1..]),
        None => uri.to_string(),
    }
}

/// Decodes `%XX` escapes (RFC 3986), e.g. `%2F` → `/`.
///
/// # Errors
/// A `%` not followed by two hex digits, or bytes that are not UTF-8.
pub fn percent_decode(s: &str) -> Result<String, String> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = s
                .get(i + 1..i + 3)
                .and_then(|h| u8::from_str_radix(h, 16).ok())
                .ok_or_else(|| format!("bad percent-encoding at byte {i} of '{s}'"))?;
            out.push(hex);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).map_err(|_| format!("'{s}' does not decode to UTF-8"))
}

/// Encodes what a URI component cannot hold as is (`/`, `@`, `:`, `%`, spaces, …).
pub fn percent_encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn remote_uris_with_defaults_and_escapes() {
        let u = AmqpUri::parse("amqp://127.0.0.1").unwrap();
        assert_eq!(
            (u.addr().as_str(), u.vhost.as_str()),
            ("127.0.0.1:5672", "/")
        );
        assert_eq!((u.user.as_str(), u.password.as_str()), ("guest", "guest"));
        let u = AmqpUri::parse("AMQPS://bob:p%40ss@[::1]/v%2Fx?heartbeat=10").unwrap();
        assert!(u.tls);
        assert_eq!(u.addr(), "[::1]:5671");
        assert_eq!((u.password.as_str(), u.vhost.as_str()), ("p@ss", "v/x"));
        assert_eq!(u.heartbeat, Some(10));
        let u = AmqpUri::parse("amqp://h:5999/").unwrap();
        assert_eq!((u.port, u.vhost.as_str()), (5999, "/"));
        assert!(AmqpUri::parse("http://h").is_err());
        assert!(AmqpUri::parse("amqp://h:0").is_err());
        assert!(AmqpUri::parse("amqp://h:x").is_err());
        assert!(AmqpUri::parse("amqp://h?hearbeat=1")
            .unwrap_err()
            .contains("hearbeat"));
        assert!(AmqpUri::parse("amqp://h?verify=verify_none").is_err());
    }

    #[test]
    fn no_host_is_the_local_broker() {
        let u = AmqpUri::parse("amqp://").unwrap();
        assert!(u.is_local());
        assert_eq!(u.vhost, "/");
        let u = AmqpUri::parse("amqp:///other").unwrap();
        assert!(u.is_local());
        assert_eq!(u.vhost, "other");
        assert!(!AmqpUri::parse("amqp://x").unwrap().is_local());
    }

    #[test]
    fn credentials_are_redacted() {
        assert_eq!(
            redact("amqp://bob:secret@host:5672/%2F"),
            "amqp://host:5672/%2F"
        );
        assert_eq!(redact("amqp://a@b:c@host/x?y=z@"), "amqp://host/x?y=z@");
        assert_eq!(redact("amqp://host"), "amqp://host");
        assert_eq!(redact("amqp://"), "amqp://");
        assert_eq!(redact("not a uri"), "not a uri");
    }
}
