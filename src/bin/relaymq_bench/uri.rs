//! Server URIs: `relaymq://` (the native protocol) and `amqp://` (AMQP 0-9-1), both
//! `SCHEME://[USER:PASS@]HOST:PORT[/VHOST]` as RabbitMQ writes its URIs: user, password
//! and vhost are percent-encoded (vhost `/` is `%2F`); the defaults are guest/guest and
//! vhost `/`. `amqp://` may leave out the port (5672).

use super::BenchError;
use relaymq::amqp_client::uri::{percent_encode, AmqpUri};

/// The protocol a URI speaks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Protocol {
    /// `relaymq://`: RelayMQ's native protocol, through `relaymq::client`.
    Native,
    /// `amqp://`: AMQP 0-9-1, through the library's client (`relaymq::amqp_client`).
    Amqp,
}

impl Protocol {
    /// The URI scheme, without `://`.
    pub fn scheme(self) -> &'static str {
        match self {
            Protocol::Native => "relaymq",
            Protocol::Amqp => "amqp",
        }
    }
}

/// Where to connect, from `--uri` (or a `compare` argument).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Target {
    /// The protocol.
    pub protocol: Protocol,
    /// `HOST:PORT`.
    pub addr: String,
    /// User name (decoded).
    pub user: String,
    /// Password (decoded).
    pub password: String,
    /// Virtual host (decoded: `/`, not `%2F`).
    pub vhost: String,
}

impl Target {
    /// The URI to show in reports: scheme, user, address and vhost, the password left out
    /// (`amqp://guest@127.0.0.1:5672/%2F`).
    pub fn display_uri(&self) -> String {
        format!(
            "{}://{}@{}/{}",
            self.protocol.scheme(),
            percent_encode(&self.user),
            self.addr,
            percent_encode(&self.vhost)
        )
    }
}

/// Parses a server URI.
///
/// # Errors
/// [`BenchError::Usage`] for another scheme (`amqps://`: TLS is not supported), a missing
/// or bad port, or a bad percent-encoding.
pub fn parse_uri(uri: &str) -> Result<Target, BenchError> {
    let bad = |why: &str| BenchError::Usage(format!("URI {uri}: {why}"));
    let lower = uri.to_ascii_lowercase();
    // Both schemes have the syntax of RabbitMQ's AMQP URIs: the library's parser reads
    // them, `relaymq://` read as an `amqp://` that must name its port.
    let (protocol, amqp_text) = if lower.starts_with("amqp://") {
        (Protocol::Amqp, uri.to_string())
    } else if lower.starts_with("relaymq://") {
        (
            Protocol::Native,
            format!("amqp://{}", &uri["relaymq://".len()..]),
        )
    } else if lower.starts_with("amqps://") {
        return Err(bad("amqps:// (TLS) is not supported; use amqp://"));
    } else {
        return Err(bad("expected relaymq://HOST:PORT or amqp://HOST[:PORT] \
             (like relaymq://127.0.0.1:5673 or amqp://127.0.0.1:5672)"));
    };
    let parsed = AmqpUri::parse(&amqp_text).map_err(|e| bad(&e))?;
    let authority = amqp_text["amqp://".len()..]
        .split(['/', '?'])
        .next()
        .unwrap_or_default();
    let port_given = authority
        .rsplit_once('@')
        .map_or(authority, |(_, h)| h)
        .rsplit_once(':')
        .is_some_and(|(h, _)| !h.ends_with('[') && !h.is_empty());
    if parsed.host.is_none() || (protocol == Protocol::Native && !port_given) {
        return Err(bad(match protocol {
            Protocol::Native => {
                "expected HOST:PORT after relaymq:// (like relaymq://127.0.0.1:5673)"
            }
            Protocol::Amqp => "expected HOST[:PORT] after amqp:// (like amqp://127.0.0.1:5672)",
        }));
    }
    Ok(Target {
        protocol,
        addr: parsed.addr(),
        user: parsed.user,
        password: parsed.password,
        vhost: parsed.vhost,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn native_uris() {
        let t = parse_uri("relaymq://127.0.0.1:5673").unwrap();
        assert_eq!((t.addr.as_str(), t.vhost.as_str()), ("127.0.0.1:5673", "/"));
        assert_eq!(t.protocol, Protocol::Native);
        let t = parse_uri("relaymq://u:p@localhost:1/v%2Fx").unwrap();
        assert_eq!(
            (t.user.as_str(), t.password.as_str(), t.vhost.as_str()),
            ("u", "p", "v/x")
        );
        assert!(parse_uri("relaymq://localhost").is_err());
        assert!(parse_uri("http://localhost:1").is_err());
    }

    #[test]
    fn amqp_uris() {
        let t = parse_uri("amqp://127.0.0.1").unwrap();
        assert_eq!(t.protocol, Protocol::Amqp);
        assert_eq!(t.addr, "127.0.0.1:5672");
        assert_eq!(
            (t.user.as_str(), t.password.as_str(), t.vhost.as_str()),
            ("guest", "guest", "/")
        );
        let t = parse_uri("AMQP://bob:p%40ss@host:5682/%2F").unwrap();
        assert_eq!(
            (t.addr.as_str(), t.user.as_str(), t.password.as_str()),
            ("host:5682", "bob", "p@ss")
        );
        assert_eq!(t.vhost, "/");
        assert_eq!(parse_uri("amqp://h:1/prod").unwrap().vhost, "prod");
        assert_eq!(parse_uri("amqp://[::1]").unwrap().addr, "[::1]:5672");
        assert_eq!(parse_uri("amqp://[::1]:7").unwrap().addr, "[::1]:7");
        for bad in [
            "amqp://",
            "amqp://:5672",
            "amqp://h:0",
            "amqp://h:99999",
            "amqp://h:x",
            "amqp://h/%zz",
            "amqps://h:5671",
        ] {
            assert!(matches!(parse_uri(bad), Err(BenchError::Usage(_))), "{bad}");
        }
    }

    #[test]
    fn display_hides_the_password() {
        let t = parse_uri("amqp://bob:secret@h:1/%2F").unwrap();
        assert_eq!(t.display_uri(), "amqp://bob@h:1/%2F");
    }
}
