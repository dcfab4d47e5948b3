//! Merging the sources of configuration: defaults, then the `--config` file, then
//! `RELAYMQ_SERVER_*` variables, then flags, each later one winning, with
//! where each value came from kept for `--print-config` and error messages.

use crate::config::settings::Settings;
use crate::config::table::{find, find_flag, ValueKind, SETTINGS};
use crate::config::ENV_PREFIX;
use crate::server::tls::TlsConfig;
use crate::server::ServerConfig;
use std::ffi::OsString;
use std::fmt;
use std::io::Read;
use std::path::{Path, PathBuf};

/// Largest `--config` file read, in bytes (1 MiB; a configuration is a few KiB, a bigger
/// file is a mistake, not a reason to read without bound).
pub const CONFIG_FILE_BYTES_MAX: u64 = 1024 * 1024;

/// Where a setting's value came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Origin {
    /// The built-in default.
    Default,
    /// The `--config` file at this path.
    File(PathBuf),
    /// This environment variable (`RELAYMQ_SERVER_…`).
    Env(String),
    /// This command-line flag (`--max-connections`, or an alias as given).
    Flag(String),
}

impl Origin {
    /// The source's kind as `--print-config` shows it: `default`, `file`, `env` or `flag`.
    pub fn kind(&self) -> &'static str {
        match self {
            Origin::Default => "default",
            Origin::File(_) => "file",
            Origin::Env(_) => "env",
            Origin::Flag(_) => "flag",
        }
    }
}

impl fmt::Display for Origin {
    /// `default`, `file /etc/relaymq/relaymq.toml`, `env RELAYMQ_SERVER_X`, `flag --x`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Origin::Default => f.write_str("default"),
            Origin::File(p) => write!(f, "file {}", p.display()),
            Origin::Env(v) => write!(f, "env {v}"),
            Origin::Flag(n) => write!(f, "flag {n}"),
        }
    }
}

/// A configuration that cannot be used: the message names the setting (or file, or
/// variable) and where it came from. `relaymq-server` exits 2 with it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    /// What is wrong, naming the key and its source.
    pub message: String,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for ConfigError {}

/// An error with `message`.
fn error(message: String) -> ConfigError {
    ConfigError { message }
}

/// The sources `relaymq-server` reads, other than its environment: the `--config` path
/// (nothing is read without one) and the setting flags in the order given.
#[derive(Debug, Clone, Default)]
pub struct Inputs {
    /// `--config FILE`.
    pub config_file: Option<PathBuf>,
    /// Setting flags as `(flag as given without "--", value)`; a repeated flag overrides.
    pub flags: Vec<(String, String)>,
}

/// Merged settings and where each came from (one [`Origin`] per entry of
/// [`SETTINGS`], same index).
#[derive(Debug, Clone)]
pub struct Layered {
    /// The merged values.
    pub settings: Settings,
    /// Where each value came from, indexed like [`SETTINGS`].
    pub origins: Vec<Origin>,
    /// The `--config` file read, if any.
    pub config_file: Option<PathBuf>,
}

impl Layered {
    /// The defaults, every origin [`Origin::Default`].
    pub fn defaults() -> Layered {
        Layered {
            settings: Settings::default(),
            origins: vec![Origin::Default; SETTINGS.len()],
            config_file: None,
        }
    }

    /// Where the setting `name` came from (`Default` for an unknown name).
    pub fn origin(&self, name: &str) -> &Origin {
        find(name)
            .and_then(|(i, _)| self.origins.get(i))
            .unwrap_or(&Origin::Default)
    }

    /// Whether `name` was set anywhere but the defaults.
    fn given(&self, name: &str) -> bool {
        *self.origin(name) != Origin::Default
    }

    /// Parses `text` into setting `index` and records `origin`.
    fn apply(&mut self, index: usize, text: &str, origin: Origin) -> Result<(), ConfigError> {
        let Some(setting) = SETTINGS.get(index) else {
            return Err(error(format!("no setting number {index}")));
        };
        (setting.set)(&mut self.settings, text).map_err(|e| {
            error(match &origin {
                Origin::Flag(flag) => format!("{flag}: {e}"),
                Origin::Env(var) => format!("{var}: {e}"),
                Origin::File(path) => format!("{}: {}: {e}", path.display(), setting.name),
                Origin::Default => format!("{}: {e}", setting.name),
            })
        })?;
        if let Some(o) = self.origins.get_mut(index) {
            *o = origin;
        }
        Ok(())
    }

    /// The [`ServerConfig`] to start with: the limits checked and the TLS settings checked
    /// together (both certificate and key or neither; docs/security.md §4).
    ///
    /// # Errors
    /// A limit out of range or a TLS combination that cannot work, naming the setting and,
    /// when it did not come from a flag, where it came from.
    pub fn server_config(&self) -> Result<ServerConfig, ConfigError> {
        let mut config = self.settings.server.clone();
        config.broker.limits.validate().map_err(|e| {
            let name = e.flag.trim_start_matches('-');
            match self.origin(name) {
                Origin::Flag(_) => error(e.to_string()),
                // A file key or variable is named as the operator wrote it, not as a flag.
                other => error(format!("{name}: {} (from {other})", e.text)),
            }
        })?;
        config
            .broker
            .alarms
            .memory_high_watermark
            .validate()
            .map_err(|e| {
                error(format!(
                    "memory-high-watermark: {e} (from {})",
                    self.origin("memory-high-watermark")
                ))
            })?;
        config.tls = self.tls_config()?;
        distinct_listeners(&config)?;
        Ok(config)
    }

    /// The TLS settings, `None` without `tls-cert`/`tls-key`.
    fn tls_config(&self) -> Result<Option<TlsConfig>, ConfigError> {
        let t = &self.settings.tls;
        let (cert, key) = match (&t.cert, &t.key) {
            (Some(c), Some(k)) => (c.clone(), k.clone()),
            (Some(_), None) => {
                return Err(error(
                    "--tls-cert needs --tls-key (the certificate's private key)".into(),
                ))
            }
            (None, Some(_)) => {
                return Err(error(
                    "--tls-key needs --tls-cert (the server's certificate)".into(),
                ))
            }
            (None, None) => {
                if [
                    "tls-listen",
                    "amqp-tls-listen",
                    "https-listen",
                    "tls-client-ca",
                    "tls-client-auth",
                ]
                .iter()
                .any(|n| self.given(n))
                {
                    return Err(error(
                        "the --tls-* options need --tls-cert and --tls-key".into(),
                    ));
                }
                return Ok(None);
            }
        };
        if self.given("tls-client-auth") && t.client_ca.is_none() {
            return Err(error(
                "--tls-client-auth needs --tls-client-ca (the CA client certificates are checked against)"
                    .into(),
            ));
        }
        if t.listen.is_none() && t.amqp_listen.is_none() && t.https_listen.is_none() {
            return Err(error(
                "--tls-listen, --amqp-tls-listen and --https-listen are all off: TLS would serve nothing".into(),
            ));
        }
        let mut tls = TlsConfig::new(cert, key);
        tls.listen = t.listen;
        tls.amqp_listen = t.amqp_listen;
        tls.https_listen = t.https_listen;
        tls.client_ca_file = t.client_ca.clone();
        tls.client_auth = t.client_auth;
        Ok(Some(tls))
    }
}

/// Reads and parses the `--config` file (at most [`CONFIG_FILE_BYTES_MAX`] bytes).
fn read_file(path: &Path) -> Result<toml::Table, ConfigError> {
    let file = std::fs::File::open(path)
        .map_err(|e| error(format!("cannot read config file {}: {e}", path.display())))?;
    let mut text = String::new();
    file.take(CONFIG_FILE_BYTES_MAX + 1)
        .read_to_string(&mut text)
        .map_err(|e| error(format!("cannot read config file {}: {e}", path.display())))?;
    if text.len() as u64 > CONFIG_FILE_BYTES_MAX {
        return Err(error(format!(
            "config file {} is larger than {CONFIG_FILE_BYTES_MAX} bytes",
            path.display()
        )));
    }
    text.parse::<toml::Table>().map_err(|e| {
        // One line (a journal entry each): where, then what; not toml's multi-line caret
        // drawing.
        let at = e.span().map_or_else(String::new, |span| {
            let before = &text[..span.start.min(text.len())];
            let line = before.matches('\n').count() + 1;
            let column = before.len() - before.rfind('\n').map_or(0, |i| i + 1) + 1;
            format!(" at line {line}, column {column}")
        });
        error(format!(
            "config file {} is not valid TOML{at}: {}",
            path.display(),
            e.message().trim_end().replace('\n', "; ")
        ))
    })
}

/// Refuses two listeners on the same address (port 0 aside: each gets its own port)
/// before anything is touched, rather than at the second bind, after the data directory
/// was opened.
fn distinct_listeners(config: &ServerConfig) -> Result<(), ConfigError> {
    let mut listeners = vec![
        ("listen", Some(config.listen)),
        ("amqp-listen", config.amqp_listen),
    ];
    listeners.push(("metrics-listen", config.metrics_listen));
    listeners.push(("http-listen", config.http_listen));
    if let Some(t) = &config.tls {
        listeners.push(("tls-listen", t.listen));
        listeners.push(("amqp-tls-listen", t.amqp_listen));
        listeners.push(("https-listen", t.https_listen));
    }
    let bound: Vec<(&str, std::net::SocketAddr)> = listeners
        .into_iter()
        .filter_map(|(name, a)| a.filter(|a| a.port() != 0).map(|a| (name, a)))
        .collect();
    for (i, (name, addr)) in bound.iter().enumerate() {
        if let Some((other, _)) = bound[..i].iter().find(|(_, a)| {
            a.port() == addr.port()
                && (a.ip() == addr.ip() || a.ip().is_unspecified() || addr.ip().is_unspecified())
        }) {
            return Err(error(format!(
                "{other} and {name} both want {addr}: each listener needs its own address"
            )));
        }
    }
    Ok(())
}

/// The text of a file value for a setting of `kind`, or why its TOML type is wrong.
fn file_value_text(kind: ValueKind, value: &toml::Value) -> Result<String, String> {
    let expected = match kind {
        ValueKind::Text => "a string",
        ValueKind::Integer => "an integer",
        ValueKind::Size => "an integer of bytes or a string like \"8MiB\"",
        ValueKind::Watermark => "a fraction like 0.4 or a size like \"512MiB\"",
    };
    let text = match (kind, value) {
        (ValueKind::Text, toml::Value::String(s)) => Some(s.clone()),
        (ValueKind::Integer, toml::Value::Integer(i)) => Some(i.to_string()),
        (ValueKind::Size, toml::Value::Integer(i)) => Some(i.to_string()),
        (ValueKind::Size, toml::Value::String(s)) => Some(s.clone()),
        (ValueKind::Watermark, toml::Value::Integer(i)) => Some(i.to_string()),
        (ValueKind::Watermark, toml::Value::Float(f)) => Some(format!("{f:?}")),
        (ValueKind::Watermark, toml::Value::String(s)) => Some(s.clone()),
        _ => None,
    };
    text.ok_or_else(|| {
        let found = value.type_str();
        let article = if found.starts_with(['a', 'e', 'i', 'o', 'u']) {
            "an"
        } else {
            "a"
        };
        format!("expected {expected}, found {article} {found}")
    })
}

/// Merges defaults, the file of `inputs`, the `RELAYMQ_SERVER_*` entries of `env` and the
/// flags of `inputs`, in that order (flags > env > file > defaults).
///
/// # Errors
/// The file cannot be read or is not TOML; an unknown key or unknown `RELAYMQ_SERVER_*`
/// variable (typo safety); a value of the wrong TOML type or that does not parse. Each
/// message names the key and where it came from. Cross-checks run later, in
/// [`Layered::server_config`].
pub fn load(
    inputs: &Inputs,
    env: impl IntoIterator<Item = (OsString, OsString)>,
) -> Result<Layered, ConfigError> {
    let mut layered = Layered::defaults();
    if let Some(path) = &inputs.config_file {
        layered.config_file = Some(path.clone());
        for (key, value) in read_file(path)? {
            let Some((index, setting)) = find(&key) else {
                return Err(error(format!(
                    "{}: unknown key '{key}' (keys are the flag names without --, see relaymq-server --help)",
                    path.display()
                )));
            };
            let text = file_value_text(setting.kind, &value)
                .map_err(|e| error(format!("{}: {key}: {e}", path.display())))?;
            layered.apply(index, &text, Origin::File(path.clone()))?;
        }
    }
    let mut vars: Vec<(String, String)> = Vec::new();
    for (name, value) in env {
        let Some(name) = name.to_str() else { continue };
        if !name.starts_with(ENV_PREFIX) {
            continue;
        }
        let value = value
            .into_string()
            .map_err(|_| error(format!("{name}: the value is not valid UTF-8")))?;
        vars.push((name.to_string(), value));
    }
    vars.sort();
    for (name, value) in vars {
        let Some(index) = SETTINGS.iter().position(|s| s.env_name() == name) else {
            return Err(error(format!(
                "unknown environment variable {name} ({ENV_PREFIX}* variables name settings, \
                 e.g. {ENV_PREFIX}MAX_CONNECTIONS; see relaymq-server --help)"
            )));
        };
        layered.apply(index, &value, Origin::Env(name))?;
    }
    for (flag, value) in &inputs.flags {
        let Some((index, _)) = find_flag(flag) else {
            return Err(error(format!("unknown setting flag --{flag}")));
        };
        layered.apply(index, value, Origin::Flag(format!("--{flag}")))?;
    }
    Ok(layered)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn env(vars: &[(&str, &str)]) -> Vec<(OsString, OsString)> {
        vars.iter().map(|(k, v)| (k.into(), v.into())).collect()
    }

    fn file(text: &str) -> tempfile::NamedTempFile {
        let mut f = tempfile::NamedTempFile::new().unwrap();
        f.write_all(text.as_bytes()).unwrap();
        f
    }

    fn inputs(f: &tempfile::NamedTempFile, flags: &[(&str, &str)]) -> Inputs {
        Inputs {
            config_file: Some(f.path().to_path_buf()),
            flags: flags
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        }
    }

    #[test]
    fn flags_beat_env_beat_file_beat_defaults() {
        let f = file("max-connections = 10\nmax-queues-per-vhost = 11\nheartbeat = 12\n");
        let l = load(
            &inputs(&f, &[("max-connections", "30")]),
            env(&[
                ("RELAYMQ_SERVER_MAX_CONNECTIONS", "20"),
                ("RELAYMQ_SERVER_MAX_QUEUES_PER_VHOST", "21"),
                ("PATH", "/bin"),
                ("RELAYMQ_ADDR", "elsewhere"),
            ]),
        )
        .unwrap();
        let limits = l.settings.server.broker.limits;
        assert_eq!(limits.connections_max, 30);
        assert_eq!(limits.queues_per_vhost_max, 21);
        assert_eq!(limits.heartbeat_s, 12);
        assert_eq!(l.origin("max-connections").kind(), "flag");
        assert_eq!(l.origin("max-queues-per-vhost").kind(), "env");
        assert_eq!(l.origin("heartbeat").kind(), "file");
        assert_eq!(l.origin("frame-max").kind(), "default");
    }

    #[test]
    fn errors_name_the_key_and_its_source() {
        let f = file("max-conections = 10\n");
        let e = load(&inputs(&f, &[]), env(&[])).unwrap_err().message;
        assert!(
            e.contains("max-conections") && e.contains(&f.path().display().to_string()),
            "{e}"
        );
        let f = file("max-connections = \"10\"\n");
        let e = load(&inputs(&f, &[]), env(&[])).unwrap_err().message;
        assert!(e.contains("max-connections: expected an integer"), "{e}");
        let f = file("listen = \"nowhere\"\n");
        let e = load(&inputs(&f, &[]), env(&[])).unwrap_err().message;
        assert!(e.contains("listen: 'nowhere'"), "{e}");
        let f = file("");
        let e = load(
            &inputs(&f, &[]),
            env(&[("RELAYMQ_SERVER_MAX_CONECTIONS", "1")]),
        )
        .unwrap_err()
        .message;
        assert!(e.contains("RELAYMQ_SERVER_MAX_CONECTIONS"), "{e}");
        let e = load(&inputs(&f, &[]), env(&[("RELAYMQ_SERVER_WORKERS", "0")]))
            .unwrap_err()
            .message;
        assert!(
            e.starts_with("RELAYMQ_SERVER_WORKERS: must be from 1 to 1024"),
            "{e}"
        );
        let f = file("max-connections = 0\n");
        let l = load(&inputs(&f, &[]), env(&[])).unwrap();
        let e = l.server_config().unwrap_err().message;
        assert!(
            e.starts_with("max-connections: 0 is out of range") && e.contains("from file"),
            "{e}"
        );
        let f = file("not toml [");
        let e = load(&inputs(&f, &[]), env(&[])).unwrap_err().message;
        assert!(e.contains("not valid TOML"), "{e}");
    }

    #[test]
    fn two_listeners_on_one_address_are_refused_before_start() {
        let f = file("metrics-listen = \"127.0.0.1:7000\"\n");
        let l = load(&inputs(&f, &[("listen", "127.0.0.1:7000")]), env(&[])).unwrap();
        let e = l.server_config().unwrap_err().message;
        assert!(
            e.contains("listen and metrics-listen both want 127.0.0.1:7000"),
            "{e}"
        );
        let f = file("amqp-listen = \"0.0.0.0:7001\"\n");
        let l = load(&inputs(&f, &[("listen", "127.0.0.1:7001")]), env(&[])).unwrap();
        assert!(l.server_config().is_err(), "0.0.0.0 covers 127.0.0.1");
        // Port 0 gives each listener a port of its own; other ports are fine.
        let f = file("amqp-listen = \"127.0.0.1:0\"\nmetrics-listen = \"127.0.0.1:0\"\n");
        let l = load(&inputs(&f, &[("listen", "127.0.0.1:0")]), env(&[])).unwrap();
        l.server_config().unwrap();
    }

    #[test]
    fn file_types_follow_the_setting_kind() {
        let f = file(
            "segment-bytes = \"64KiB\"\nqueue-memory-bytes = 1048576\nmemory-high-watermark = 0.5\n\
             disk-free-limit = \"2GiB\"\nlog-level = \"debug\"\namqp-listen = \"off\"\n",
        );
        let l = load(&inputs(&f, &[]), env(&[])).unwrap();
        let s = &l.settings;
        assert_eq!(s.server.segment_bytes, 64 * 1024);
        assert_eq!(s.server.broker.queue_memory_bytes, 1 << 20);
        assert_eq!(
            s.server.broker.alarms.memory_high_watermark,
            crate::alarm::MemoryWatermark::Relative(0.5)
        );
        assert_eq!(s.server.broker.alarms.disk_free_limit_bytes, 2 << 30);
        assert_eq!(s.log_level, log::LevelFilter::Debug);
        assert_eq!(s.server.amqp_listen, None);
        let f = file("memory-high-watermark = 1.0\n");
        let l = load(&inputs(&f, &[]), env(&[])).unwrap();
        assert_eq!(
            l.settings.server.broker.alarms.memory_high_watermark,
            crate::alarm::MemoryWatermark::Relative(1.0)
        );
    }

    #[test]
    fn tls_cross_checks_apply_to_the_merged_result() {
        let f = file("tls-cert = \"/c.pem\"\n");
        let l = load(&inputs(&f, &[]), env(&[])).unwrap();
        assert!(l.server_config().unwrap_err().message.contains("--tls-key"));
        let l = load(&inputs(&f, &[("tls-key", "/k.pem")]), env(&[])).unwrap();
        let tls = l.server_config().unwrap().tls.unwrap();
        assert_eq!(tls.key_file, PathBuf::from("/k.pem"));
        let l = load(
            &Inputs::default(),
            env(&[("RELAYMQ_SERVER_TLS_LISTEN", "off")]),
        )
        .unwrap();
        assert!(l.server_config().is_err());
        assert!(load(&Inputs::default(), env(&[]))
            .unwrap()
            .server_config()
            .unwrap()
            .tls
            .is_none());
    }

    #[test]
    fn https_listen_is_off_by_default_and_needs_the_tls_files() {
        let empty = file("");
        let l = load(
            &inputs(&empty, &[("https-listen", "127.0.0.1:15671")]),
            env(&[]),
        )
        .unwrap();
        let e = l.server_config().unwrap_err().message;
        assert!(e.contains("--tls-cert and --tls-key"), "{e}");
        let f = file("tls-cert = \"/c.pem\"\ntls-key = \"/k.pem\"\n");
        let l = load(&inputs(&f, &[]), env(&[])).unwrap();
        assert_eq!(l.server_config().unwrap().tls.unwrap().https_listen, None);
        // HTTPS alone is a use of TLS.
        let l = load(
            &inputs(
                &f,
                &[
                    ("tls-listen", "off"),
                    ("amqp-tls-listen", "off"),
                    ("https-listen", "127.0.0.1:15671"),
                ],
            ),
            env(&[]),
        )
        .unwrap();
        let tls = l.server_config().unwrap().tls.unwrap();
        assert_eq!(tls.https_listen, Some("127.0.0.1:15671".parse().unwrap()));
        let l = load(
            &inputs(&f, &[("https-listen", "127.0.0.1:15672")]),
            env(&[]),
        )
        .unwrap();
        let e = l.server_config().unwrap_err().message;
        assert!(e.contains("http-listen and https-listen"), "{e}");
    }
}
