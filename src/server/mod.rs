//! The server: a mio I/O thread, a fixed worker pool and per-connection outbound buffers
//! (docs/architecture.md §2), serving the native protocol and AMQP 0-9-1.
//!
//! What every protocol shares is here: the I/O thread ([`event_loop`]: accept, TLS, reads,
//! writes, timers, shutdown; it parses no protocol), a connection as the threads share it
//! ([`conn`]), its mailbox's events ([`event`]), its handler ([`handler`]), the contract
//! of input parsing ([`input`]), a connection's life and close handshakes, written once
//! for both protocols ([`lifecycle`]), the workers, outbound buffers, the notifier, TLS,
//! the publish gate, connection log lines and configuration. Each protocol adapter is a
//! folder: [`native`] and [`amqp`] (each with its `input`, `event`, `handler` and `sink`);
//! [`http`] is the metrics endpoint, on a thread of its own.
//!
//! [`start`] binds the listener and runs the I/O thread in the background; the returned
//! [`ServerHandle`] gives the bound address and a graceful [`ServerHandle::shutdown`].

pub mod amqp;
pub mod config;
pub mod conn;
pub mod conn_log;
pub mod event;
pub mod event_loop;
pub mod handler;
pub mod http;
pub mod input;
pub mod inspect;
pub mod lifecycle;
pub mod native;
pub mod notifier;
pub mod outbound;
pub mod publish_gate;
pub mod tls;
pub mod worker;

pub use config::ServerConfig;

use crate::alarm::monitor::AlarmMonitor;
use crate::broker::delayed::schedule::DelayTimer;
use crate::broker::housekeeping::Housekeeper;
use crate::broker::Broker;
use crate::limits::FdBudget;
use crate::limits::{CONNECTIONS_MAX, HANDSHAKES_PENDING_MAX};
use crate::storage::durability::Durability;
use crate::storage::{BudgetedBackend, FileBudget, OsBackend, StorageError, StoreConfig};
use event_loop::{EventLoop, WAKER};
use notifier::Notifier;
use std::io;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

/// A running server.
pub struct ServerHandle {
    addr: SocketAddr,
    amqp_addr: Option<SocketAddr>,
    /// Bound addresses of the TLS listeners (native, AMQP 0-9-1), when on.
    tls_addrs: (Option<SocketAddr>, Option<SocketAddr>),
    broker: Arc<Broker>,
    shutdown: Arc<AtomicBool>,
    notifier: Arc<Notifier>,
    io_thread: Option<JoinHandle<io::Result<()>>>,
    workers: Vec<JoinHandle<()>>,
    housekeeper: Housekeeper,
    /// Routes delayed messages and releases delayed retries at their due times.
    delay_timer: DelayTimer,
    alarm_monitor: AlarmMonitor,
    /// The Prometheus endpoint, when `metrics_listen` is on.
    metrics: Option<http::listener::MetricsServer>,
    /// The management HTTP API, when `http_listen` is on.
    http_api: Option<http::server::HttpServer>,
    /// The ready file written at start (`--ready-file`), removed once a graceful
    /// shutdown is done.
    ready_file: Option<std::path::PathBuf>,
}

impl ServerHandle {
    /// The address the native listener is bound to.
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// The address the AMQP 0-9-1 listener is bound to (`None`: it is off).
    pub fn amqp_addr(&self) -> Option<SocketAddr> {
        self.amqp_addr
    }

    /// The address the native protocol's TLS listener is bound to (`None`: TLS is off, or
    /// that listener is).
    pub fn tls_addr(&self) -> Option<SocketAddr> {
        self.tls_addrs.0
    }

    /// The address the AMQP 0-9-1 TLS listener (amqps) is bound to (`None`: TLS is off,
    /// or that listener is).
    pub fn amqp_tls_addr(&self) -> Option<SocketAddr> {
        self.tls_addrs.1
    }

    /// The address the Prometheus metrics endpoint is bound to (`None`: it is off).
    pub fn metrics_addr(&self) -> Option<SocketAddr> {
        self.metrics.as_ref().map(|m| m.local_addr())
    }

    /// The address the management HTTP API is bound to (`None`: it is off).
    pub fn http_addr(&self) -> Option<SocketAddr> {
        self.http_api.as_ref().and_then(|h| h.local_addr())
    }

    /// The address the management HTTP API's HTTPS listener is bound to (`None`: off).
    pub fn https_addr(&self) -> Option<SocketAddr> {
        self.http_api.as_ref().and_then(|h| h.tls_addr())
    }

    /// The broker this server runs, for what changes while it serves (a configuration
    /// reload replaces its limits and alarm watermarks).
    pub fn broker(&self) -> &Arc<Broker> {
        &self.broker
    }

    /// Asks for a graceful shutdown (returns at once; see [`ServerHandle::join`]).
    pub fn shutdown(&self) {
        self.shutdown.store(true, Ordering::Release);
        self.notifier.wake();
    }

    /// A function that requests shutdown, for signal handlers on other threads.
    pub fn shutdown_trigger(&self) -> impl Fn() + Send + Sync + 'static {
        let flag = Arc::clone(&self.shutdown);
        let notifier = Arc::clone(&self.notifier);
        move || {
            flag.store(true, Ordering::Release);
            notifier.wake();
        }
    }

    /// Waits for the server to stop (after [`ServerHandle::shutdown`]): the I/O thread,
    /// the workers and the background threads are joined, the stores' stats written and
    /// synced, the ready file removed, and only then `shutdown complete` logged.
    ///
    /// # Errors
    /// The I/O thread's error, if it failed.
    pub fn join(mut self) -> io::Result<()> {
        self.join_threads()
    }

    fn join_threads(&mut self) -> io::Result<()> {
        let joined_io = self.io_thread.is_some();
        let result = match self.io_thread.take() {
            Some(t) => t
                .join()
                .unwrap_or_else(|_| Err(io::Error::other("the I/O thread panicked"))),
            None => Ok(()),
        };
        for w in self.workers.drain(..) {
            let _ = w.join();
        }
        if let Some(links) = crate::links::Links::of(&self.broker) {
            links.stop();
        }
        self.housekeeper.stop();
        self.delay_timer.stop();
        self.alarm_monitor.stop();
        if let Some(m) = &mut self.metrics {
            m.stop();
        }
        if let Some(h) = &mut self.http_api {
            h.stop();
        }
        if joined_io {
            // Every request has run: write the stores' stats and sync what is pending.
            self.broker.close_storage();
            // The file says "serving here": a stopped server must not leave it behind.
            if let Some(path) = self.ready_file.take() {
                if let Err(e) = std::fs::remove_file(&path) {
                    if e.kind() != io::ErrorKind::NotFound {
                        log::warn!("cannot remove ready file {}: {e}", path.display());
                    }
                }
            }
            if result.is_ok() {
                log::info!("shutdown complete");
            }
        }
        result
    }
}

impl Drop for ServerHandle {
    fn drop(&mut self) {
        if self.io_thread.is_some() {
            self.shutdown();
            let _ = self.join_threads();
        }
    }
}

/// Binds the listener, starts the worker pool and the I/O thread, and writes the ready
/// file.
///
/// # Errors
/// A limit is out of range (`InvalidInput`, [`crate::limits::Limits::validate`]), the TLS
/// certificate, key or client CA file cannot be used (kind `InvalidInput`, the message
/// names the file; checked first, before the data directory is touched), the data
/// directory cannot be created, an address cannot be bound, or a thread cannot be
/// started.
pub fn start(mut config: ServerConfig) -> io::Result<ServerHandle> {
    config
        .broker
        .limits
        .validate()
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e.to_string()))?;
    let tls_config = match &config.tls {
        Some(t) => Some(
            tls::server_config(t)
                .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, format!("TLS: {e}")))?,
        ),
        None => None,
    };
    log::info!(
        "RelayMQ {} starting: pid {}, data directory {}, fsync {}, {} workers",
        env!("CARGO_PKG_VERSION"),
        std::process::id(),
        config.data_dir.display(),
        config.fsync,
        config.workers
    );
    std::fs::create_dir_all(&config.data_dir).map_err(|e| {
        io::Error::new(
            e.kind(),
            format!(
                "cannot create data directory {}: {e}",
                config.data_dir.display()
            ),
        )
    })?;
    // File descriptors: the soft limit raised to the hard one, then shared between the
    // process, HTTP connections, the store's files and client sockets.
    let fd_budget = FdBudget::raise_and_split()
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e.to_string()))?;
    log::info!("file descriptors: {fd_budget}");
    config.broker.fd_budget = Some(fd_budget);
    let store_config = StoreConfig {
        segment_bytes: config.segment_bytes,
    };
    let recovery_started = std::time::Instant::now();
    let (durability, definitions) = Durability::open(
        &config.data_dir,
        config.fsync,
        store_config,
        Arc::new(BudgetedBackend::new(
            Arc::new(OsBackend),
            FileBudget::new(fd_budget.store),
        )),
    )
    .map_err(|e| {
        let kind = match &e {
            StorageError::Io { source, .. } => source.kind(),
            _ => io::ErrorKind::Other,
        };
        io::Error::new(kind, e.to_string())
    })?;
    // The data directory is locked now (so this is not a running server's file): a ready
    // file left by a crashed run goes before the queues are recovered, so nobody waiting
    // for it proceeds while connections are still refused.
    if let Some(path) = &config.ready_file {
        remove_stale_ready_file(path)?;
    }
    log::info!(
        "recovered {} vhosts, {} durable exchanges, {} durable queues, {} bindings from {}",
        definitions.vhosts.len(),
        definitions.exchanges.len(),
        definitions.queues.len(),
        definitions.bindings.len(),
        config.data_dir.display()
    );
    let durable_queues = definitions.queues.len();
    let broker = Arc::new(Broker::open(config.broker.clone(), durability, definitions));
    let restored = broker.recovered_messages();
    log::info!(
        "recovery done in {} ms: {} persistent messages in {} of {durable_queues} durable queues{}",
        recovery_started.elapsed().as_millis(),
        restored.messages,
        restored.queues,
        recovery_notes_suffix(&restored),
    );
    broker
        .load_access()
        .map_err(|e| io::Error::other(format!("cannot load users: {}", e.text)))?;
    broker.start_login_checker()?;
    let housekeeper = Housekeeper::start(Arc::clone(&broker))?;
    let delay_timer = DelayTimer::start(Arc::clone(&broker))?;
    let poll = mio::Poll::new()?;
    let waker = mio::Waker::new(poll.registry(), WAKER)?;
    let notifier = Arc::new(Notifier::new(waker));
    // The first check runs here, before the listeners accept: a server started above a
    // watermark blocks its very first publisher.
    let wake = Arc::clone(&notifier);
    let alarm_monitor = AlarmMonitor::start(
        Arc::clone(broker.alarms()),
        config.data_dir.clone(),
        Box::new(move || wake.wake()),
    )?;
    let listener = mio::net::TcpListener::bind(config.listen).map_err(|e| {
        io::Error::new(
            e.kind(),
            format!("cannot listen on {} (native protocol): {e}", config.listen),
        )
    })?;
    let addr = listener.local_addr()?;
    let amqp_listener = match config.amqp_listen {
        Some(a) => Some(mio::net::TcpListener::bind(a).map_err(|e| {
            io::Error::new(e.kind(), format!("cannot listen on {a} (AMQP 0-9-1): {e}"))
        })?),
        None => None,
    };
    let amqp_addr = match &amqp_listener {
        Some(l) => Some(l.local_addr()?),
        None => None,
    };
    let tls_listeners = match (&config.tls, tls_config.clone()) {
        (Some(t), Some(server_config)) => Some(bind_tls(t, server_config)?),
        _ => None,
    };
    let tls_addrs = match &tls_listeners {
        Some(t) => (t.native_addr()?, t.amqp_addr()?),
        None => (None, None),
    };
    broker.rates().set_enabled(config.stats_collection);
    let (metrics_slots, api_slots) =
        http::split_connections(fd_budget.http, config.metrics_listen.is_some());
    let metrics = match config.metrics_listen {
        Some(a) => Some(http::listener::MetricsServer::start(
            a,
            Arc::clone(&broker),
            metrics_slots,
        )?),
        None => None,
    };
    let metrics_addr = metrics.as_ref().map(|m| m.local_addr());
    let https_listen = config.tls.as_ref().and_then(|t| t.https_listen);
    let http_api = match (config.http_listen, https_listen) {
        (None, None) => None,
        (plain, https) => {
            // The listeners the API reports (`/api/overview`, the port-listener check),
            // with RabbitMQ's protocol names where it has them.
            let mut listeners = Vec::new();
            if let Some(x) = amqp_addr {
                listeners.push(("amqp", x));
            }
            if let Some(x) = tls_addrs.1 {
                listeners.push(("amqp/ssl", x));
            }
            listeners.push(("relaymq", addr));
            if let Some(x) = tls_addrs.0 {
                listeners.push(("relaymq/ssl", x));
            }
            if let Some(x) = metrics_addr {
                listeners.push(("prometheus", x));
            }
            let listen = http::server::HttpListen {
                plain,
                tls: match (https, &tls_config) {
                    (Some(a), Some(c)) => Some((a, Arc::clone(c))),
                    _ => None,
                },
            };
            Some(http::api::start(
                listen,
                Arc::clone(&broker),
                api_slots,
                listeners,
            )?)
        }
    };
    let http_addrs = (
        http_api.as_ref().and_then(|h| h.local_addr()),
        http_api.as_ref().and_then(|h| h.tls_addr()),
    );
    // Each connection is queued at most once, and the I/O thread holds at most
    // `max_connections + HANDSHAKES_PENDING_MAX` of them: sends never block.
    let (tx, rx) = crossbeam_channel::bounded(CONNECTIONS_MAX + HANDSHAKES_PENDING_MAX);
    let workers = worker::start(config.workers, rx, Arc::clone(&notifier))?;
    let shutdown = Arc::new(AtomicBool::new(false));
    let config = Arc::new(config);
    let event_loop = EventLoop::new(
        poll,
        listener,
        amqp_listener,
        tls_listeners,
        Arc::clone(&notifier),
        Arc::clone(&broker),
        Arc::clone(&config),
        tx,
        Arc::clone(&shutdown),
    )?;
    let io_thread = std::thread::Builder::new()
        .name("relaymq-io".into())
        .spawn(move || event_loop.run())?;
    log::info!(
        "listening on {addr} (native protocol), {} workers",
        config.workers
    );
    if let Some(a) = amqp_addr {
        log::info!("listening on {a} (AMQP 0-9-1)");
    }
    if let Some(a) = tls_addrs.0 {
        log::info!("listening on {a} (native protocol over TLS)");
    }
    if let Some(a) = tls_addrs.1 {
        log::info!("listening on {a} (AMQP 0-9-1 over TLS, amqps)");
    }
    if let Some(a) = metrics_addr {
        log::info!(
            "listening on {a} (Prometheus metrics, {})",
            http::listener::METRICS_PATH
        );
    }
    if let Some(path) = &config.ready_file {
        write_ready_file(path, addr, amqp_addr, tls_addrs, (metrics_addr, http_addrs)).map_err(
            |e| {
                io::Error::new(
                    e.kind(),
                    format!("cannot write ready file {}: {e}", path.display()),
                )
            },
        )?;
    }
    // Shovels start last: one whose end is this server's own listener finds it open.
    let outbound_tls = config.tls.as_ref().and_then(|t| {
        t.client_ca_file
            .as_ref()
            .map(|ca| crate::client::TlsOptions {
                ca_file: ca.clone(),
                cert_file: Some(t.cert_file.clone()),
                key_file: Some(t.key_file.clone()),
                server_name: None,
            })
    });
    crate::links::Links::start(
        &broker,
        &http::api::node::node_name(),
        outbound_tls,
        fd_budget.sockets / crate::limits::fds::FD_OUTBOUND_DIVISOR,
    )?;
    Ok(ServerHandle {
        addr,
        amqp_addr,
        tls_addrs,
        broker,
        shutdown,
        notifier,
        io_thread: Some(io_thread),
        workers,
        housekeeper,
        delay_timer,
        alarm_monitor,
        metrics,
        http_api,
        ready_file: config.ready_file.clone(),
    })
}

/// The end of the `recovery done …` line counting the per-queue housekeeping notes logged
/// at debug: `; 1800 queue_stat files were stale or missing (normal after
/// a crash) and recounted; 3 other recovery notes at debug level`, each part only when its
/// count is not zero; empty after a clean stop.
fn recovery_notes_suffix(restored: &crate::broker::RecoveredMessages) -> String {
    let mut out = String::new();
    if restored.stats_rebuilt > 0 {
        out.push_str(&format!(
            "; {} queue_stat files were stale or missing (normal after a crash) and recounted",
            restored.stats_rebuilt
        ));
    }
    if restored.other_notes > 0 {
        out.push_str(&format!(
            "; {} other recovery notes at debug level",
            restored.other_notes
        ));
    }
    out
}

/// Binds the TLS listeners that are on.
fn bind_tls(
    t: &tls::TlsConfig,
    server_config: Arc<rustls::ServerConfig>,
) -> io::Result<event_loop::TlsListeners> {
    let bind = |addr: Option<SocketAddr>, what: &str| -> io::Result<_> {
        match addr {
            Some(a) => Some(mio::net::TcpListener::bind(a).map_err(|e| {
                io::Error::new(
                    e.kind(),
                    format!("cannot listen on {a} ({what} over TLS): {e}"),
                )
            }))
            .transpose(),
            None => Ok(None),
        }
    };
    Ok(event_loop::TlsListeners {
        config: server_config,
        native: bind(t.listen, "native protocol")?,
        amqp: bind(t.amqp_listen, "AMQP 0-9-1")?,
    })
}

/// Removes the ready file a previous run left (killed, it could not remove it), logging
/// it; nothing when there is none (the file appears only once this run is
/// ready).
///
/// # Errors
/// The I/O error other than "not found", naming the file.
fn remove_stale_ready_file(path: &Path) -> io::Result<()> {
    match std::fs::remove_file(path) {
        Ok(()) => {
            log::info!(
                "removed the ready file {} left by a previous run; it is written again once recovery is done and the listeners are up",
                path.display()
            );
            Ok(())
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(io::Error::new(
            e.kind(),
            format!("cannot remove stale ready file {}: {e}", path.display()),
        )),
    }
}

/// Writes `{"listen": "HOST:PORT", "amqp_listen": "HOST:PORT"}` atomically (temp file +
/// rename); `amqp_listen` only when the AMQP listener is on, `tls_listen`,
/// `amqp_tls_listen`, `metrics_listen`, `http_listen` and `https_listen` only when those
/// are.
fn write_ready_file(
    path: &Path,
    addr: SocketAddr,
    amqp: Option<SocketAddr>,
    tls: (Option<SocketAddr>, Option<SocketAddr>),
    (metrics, (http, https)): (Option<SocketAddr>, (Option<SocketAddr>, Option<SocketAddr>)),
) -> io::Result<()> {
    let mut body = serde_json::json!({ "listen": addr.to_string() });
    for (key, a) in [
        ("amqp_listen", amqp),
        ("tls_listen", tls.0),
        ("amqp_tls_listen", tls.1),
        ("metrics_listen", metrics),
        ("http_listen", http),
        ("https_listen", https),
    ] {
        if let Some(a) = a {
            body[key] = serde_json::Value::String(a.to_string());
        }
    }
    let body = body.to_string();
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, body)?;
    std::fs::rename(&tmp, path)
}
