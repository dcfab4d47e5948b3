//! [`Settings`]: every value `relaymq-server` can be configured with, before the TLS
//! cross-checks turn them into a [`ServerConfig`] ([`crate::config::Layered::server_config`]).

use crate::server::tls::{ClientAuth, AMQP_TLS_LISTEN_DEFAULT, TLS_LISTEN_DEFAULT};
use crate::server::ServerConfig;
use std::net::SocketAddr;
use std::path::PathBuf;

/// Accepted values of `log-level`, least to most verbose (env_logger's level names).
pub const LOG_LEVELS: [&str; 6] = ["off", "error", "warn", "info", "debug", "trace"];

/// Default `log-level` (start-up, listeners, connections at info).
pub const LOG_LEVEL_DEFAULT: log::LevelFilter = log::LevelFilter::Info;

/// The TLS settings as configured, checked together by
/// [`crate::config::Layered::server_config`] (both `tls-cert` and `tls-key` or neither;
/// docs/security.md §4).
#[derive(Debug, Clone, PartialEq)]
pub struct TlsSettings {
    /// `tls-cert`: PEM certificate chain, server certificate first.
    pub cert: Option<PathBuf>,
    /// `tls-key`: PEM private key of `tls-cert`.
    pub key: Option<PathBuf>,
    /// `tls-listen`: native protocol over TLS (`None` = off).
    pub listen: Option<SocketAddr>,
    /// `amqp-tls-listen`: AMQP 0-9-1 over TLS (`None` = off).
    pub amqp_listen: Option<SocketAddr>,
    /// `https-listen`: the management HTTP API over TLS (`None` = off, the default).
    pub https_listen: Option<SocketAddr>,
    /// `tls-client-ca`: PEM CA(s) client certificates must chain to.
    pub client_ca: Option<PathBuf>,
    /// `tls-client-auth`: whether a client without a certificate is refused.
    pub client_auth: ClientAuth,
}

impl Default for TlsSettings {
    fn default() -> TlsSettings {
        TlsSettings {
            cert: None,
            key: None,
            listen: TLS_LISTEN_DEFAULT.parse().ok(),
            amqp_listen: AMQP_TLS_LISTEN_DEFAULT.parse().ok(),
            https_listen: None,
            client_ca: None,
            client_auth: ClientAuth::Required,
        }
    }
}

/// Every configurable value of the server: what the flags, `RELAYMQ_SERVER_*` variables
/// and the `--config` file set (one entry each in [`crate::config::table::SETTINGS`]).
#[derive(Debug, Clone)]
pub struct Settings {
    /// The server's settings; its `tls` stays `None` here (see [`Settings::tls`]).
    pub server: ServerConfig,
    /// `log-level`: the most verbose level logged (changeable live, `log::set_max_level`).
    pub log_level: log::LevelFilter,
    /// The TLS settings as configured.
    pub tls: TlsSettings,
}

impl Default for Settings {
    fn default() -> Settings {
        Settings {
            server: ServerConfig::default(),
            log_level: LOG_LEVEL_DEFAULT,
            tls: TlsSettings::default(),
        }
    }
}

/// Parses a `log-level` value: one of [`LOG_LEVELS`], exactly.
///
/// # Errors
/// A message listing the accepted values.
pub fn parse_log_level(text: &str) -> Result<log::LevelFilter, String> {
    if !LOG_LEVELS.contains(&text) {
        return Err(format!(
            "must be one of {}, not '{text}'",
            LOG_LEVELS.join(", ")
        ));
    }
    text.parse()
        .map_err(|_| format!("must be one of {}", LOG_LEVELS.join(", ")))
}

/// The `log-level` text of a level (`info`), the form [`parse_log_level`] reads back.
pub fn log_level_name(level: log::LevelFilter) -> String {
    level.to_string().to_ascii_lowercase()
}
