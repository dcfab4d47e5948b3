//! The sessions of an `amqp://` run, on the library's AMQP 0-9-1 client
//! (`relaymq::amqp_client`): one connection per thread, no reader thread. A producer
//! prepares each route's frames once and stamps the bodies; a consumer keeps only each
//! delivery's size and the send time in its first 8 bytes.

use super::args::Options;
use super::session::{
    fill_body, AdminSession, Batch, ConsumerSession, DeliveryInfo, ProducerSession, Route,
    BODY_STAMP_BYTES,
};
use relaymq::amqp_client::{
    AmqpClientError, ConnectOptions, Connection, DeliveryEvent, PreparedPublish,
};
use relaymq::client::{ConsumeOptions, ExchangeDeclareOptions, QueueDeclareOptions};
use relaymq::types::FieldTable;
use std::time::{Duration, Instant};

/// Read buffer of a consumer beyond one frame, bytes: many deliveries per `read()`.
const READ_BUFFER_CONSUMER_BYTES: usize = 1 << 20;

/// How often a producer without confirms looks for what the server sent (a
/// `channel.close` after a refused publish), without blocking.
const PRODUCER_CHECK_INTERVAL: Duration = Duration::from_millis(100);

/// Reply code of a missing queue or exchange (AMQP 0-9-1 `not-found`).
const NOT_FOUND: u16 = 404;

/// Connects as `relaymq-bench ROLE` with a read buffer of `read_buffer_bytes`.
fn connect(
    opts: &Options,
    role: &str,
    read_buffer_bytes: usize,
) -> Result<Connection, AmqpClientError> {
    let t = &opts.target;
    Connection::connect(&ConnectOptions {
        user: t.user.clone(),
        password: t.password.clone(),
        vhost: t.vhost.clone(),
        connection_name: format!("relaymq-bench {role}"),
        read_buffer_bytes,
        ..ConnectOptions::new(t.addr.clone())
    })
}

/// Maps an error to the run's text.
fn text(e: AmqpClientError) -> String {
    e.to_string()
}

/// The setup session: one connection, a fresh channel after the server closed one.
pub struct Admin {
    conn: Connection,
}

impl Admin {
    /// Connects.
    ///
    /// # Errors
    /// The connection or handshake failed.
    pub fn connect(opts: &Options) -> Result<Box<dyn AdminSession>, String> {
        let conn = connect(
            opts,
            "setup",
            relaymq::amqp_client::READ_BUFFER_BYTES_DEFAULT,
        )
        .map_err(text)?;
        Ok(Box::new(Admin { conn }))
    }

    /// Runs `f`, reopening the channel after the server closed it; a 404 counts as
    /// success with `missing_ok`.
    fn on_channel<T>(
        &mut self,
        missing_ok: Option<T>,
        f: impl FnOnce(&mut Connection) -> Result<T, AmqpClientError>,
    ) -> Result<T, String> {
        match f(&mut self.conn) {
            Ok(v) => Ok(v),
            Err(e @ AmqpClientError::ChannelClosed { .. }) => {
                self.conn.open_channel().map_err(text)?;
                match missing_ok {
                    Some(v) if e.reply_code() == Some(NOT_FOUND) => Ok(v),
                    _ => Err(text(e)),
                }
            }
            Err(e) => Err(text(e)),
        }
    }
}

impl AdminSession for Admin {
    fn queue_declare(&mut self, name: &str, durable: bool) -> Result<(), String> {
        let options = QueueDeclareOptions {
            durable,
            ..QueueDeclareOptions::default()
        };
        self.on_channel(None, |c| c.queue_declare(name, options).map(|_| ()))
    }

    fn message_count(&mut self, name: &str) -> Result<u64, String> {
        let options = QueueDeclareOptions {
            passive: true,
            ..QueueDeclareOptions::default()
        };
        self.on_channel(None, |c| {
            c.queue_declare(name, options)
                .map(|ok| u64::from(ok.message_count))
        })
    }

    fn queue_delete(&mut self, name: &str) -> Result<(), String> {
        self.on_channel(Some(()), |c| c.queue_delete(name, false, false).map(|_| ()))
    }

    fn exchange_declare(&mut self, name: &str, kind: &str, durable: bool) -> Result<(), String> {
        let options = ExchangeDeclareOptions {
            durable,
            ..ExchangeDeclareOptions::default()
        };
        self.on_channel(None, |c| c.exchange_declare(name, kind, options))
    }

    fn exchange_delete(&mut self, name: &str) -> Result<(), String> {
        self.on_channel(Some(()), |c| c.exchange_delete(name, false))
    }

    fn queue_bind(
        &mut self,
        queue: &str,
        exchange: &str,
        key: &str,
        args: FieldTable,
    ) -> Result<(), String> {
        self.on_channel(None, |c| c.queue_bind(queue, exchange, key, args))
    }

    fn exchange_bind(
        &mut self,
        destination: &str,
        source: &str,
        key: &str,
        args: FieldTable,
    ) -> Result<(), String> {
        self.on_channel(None, |c| c.exchange_bind(destination, source, key, args))
    }

    fn close(self: Box<Self>) -> Result<(), String> {
        let mut conn = self.conn;
        conn.close_channel().map_err(text)?;
        conn.close().map_err(text)
    }
}

/// A producer: each route's frames prepared once, one body of `--size` bytes stamped
/// per message.
pub struct Producer {
    conn: Connection,
    /// Per route: its prepared publish.
    routes: Vec<PreparedPublish>,
    /// The body: zero but for the stamp.
    body: Vec<u8>,
    /// In confirm mode (`--confirm`).
    confirms: bool,
    /// When the producer last looked for what the server sent.
    last_check: Instant,
}

impl Producer {
    /// Connects, selects confirms with `--confirm` and prepares each route.
    ///
    /// # Errors
    /// The connection, handshake or `confirm.select` failed.
    pub fn connect(
        opts: &Options,
        role: &str,
        routes: Vec<Route>,
    ) -> Result<Box<dyn ProducerSession>, String> {
        let mut conn =
            connect(opts, role, relaymq::amqp_client::READ_BUFFER_BYTES_DEFAULT).map_err(text)?;
        let confirms = opts.confirm.is_some();
        if confirms {
            conn.confirm_select().map_err(text)?;
        }
        let routes = routes
            .iter()
            .map(|r| conn.prepare_publish(&r.exchange, &r.routing_key, &r.properties))
            .collect::<Result<_, _>>()
            .map_err(text)?;
        Ok(Box::new(Producer {
            conn,
            routes,
            body: vec![0; opts.size.max(BODY_STAMP_BYTES)],
            confirms,
            last_check: Instant::now(),
        }))
    }

    /// The run's error for publishes the server nacked.
    fn check_nacks(&self) -> Result<(), String> {
        match self.conn.nacked() {
            0 => Ok(()),
            n => Err(format!("the server nacked {n} publishes")),
        }
    }
}

impl ProducerSession for Producer {
    fn publish(&mut self, batch: &Batch<'_>) -> Result<(), String> {
        for (k, &r) in batch.routes.iter().enumerate() {
            fill_body(
                &mut self.body[..BODY_STAMP_BYTES],
                batch.sent_ns,
                batch.first_seq + k as u64,
            );
            let route = self.routes.get(r).ok_or_else(|| format!("no route {r}"))?;
            self.conn.publish(route, &self.body).map_err(text)?;
        }
        self.conn.flush().map_err(text)?;
        if !self.confirms && self.last_check.elapsed() >= PRODUCER_CHECK_INTERVAL {
            self.last_check = Instant::now();
            self.conn.check_incoming().map_err(text)?;
        }
        Ok(())
    }

    fn wait_confirms_at_most(&mut self, limit: usize, timeout: Duration) -> Result<usize, String> {
        if !self.confirms {
            return Err("waiting for confirms without --confirm".into());
        }
        self.check_nacks()?;
        let unconfirmed = self
            .conn
            .wait_confirms_at_most(limit, timeout)
            .map_err(text)?;
        self.check_nacks()?;
        Ok(unconfirmed)
    }

    fn close(self: Box<Self>) -> Result<(), String> {
        let mut conn = self.conn;
        conn.close_channel().map_err(text)?;
        conn.close().map_err(text)
    }
}

/// A consumer: deliveries read straight from the read buffer, only their size and send
/// time kept.
pub struct Consumer {
    conn: Connection,
    /// The consumer tag the server gave.
    tag: String,
    /// The first 8 bytes of the body being received (the send time); they may come in
    /// several body frames, and over two polls.
    stamp: [u8; 8],
}

impl Consumer {
    /// Connects, sets the prefetch and starts consuming `queue`.
    ///
    /// # Errors
    /// The connection, handshake, `basic.qos` or `basic.consume` failed.
    pub fn connect(
        opts: &Options,
        role: &str,
        queue: &str,
    ) -> Result<Box<dyn ConsumerSession>, String> {
        let mut conn = connect(opts, role, READ_BUFFER_CONSUMER_BYTES).map_err(text)?;
        if opts.prefetch > 0 && !opts.no_ack {
            conn.basic_qos(opts.prefetch, false).map_err(text)?;
        }
        let options = ConsumeOptions {
            no_ack: opts.no_ack,
            ..ConsumeOptions::default()
        };
        let tag = conn.basic_consume(queue, options).map_err(text)?;
        Ok(Box::new(Consumer {
            conn,
            tag,
            stamp: [0; 8],
        }))
    }
}

impl ConsumerSession for Consumer {
    fn poll(&mut self, timeout: Duration, out: &mut Vec<DeliveryInfo>) -> Result<(), String> {
        let Consumer { conn, stamp, .. } = self;
        conn.poll_deliveries(timeout, |e| match e {
            DeliveryEvent::Start { .. } => *stamp = [0; 8],
            DeliveryEvent::Body { offset, chunk, .. } => {
                if offset < stamp.len() as u64 {
                    let from = offset as usize;
                    let n = chunk.len().min(stamp.len() - from);
                    stamp[from..from + n].copy_from_slice(&chunk[..n]);
                }
            }
            DeliveryEvent::End { head } => out.push(DeliveryInfo {
                delivery_tag: head.delivery_tag,
                redelivered: head.redelivered,
                body_bytes: head.body_bytes,
                sent_ns: if head.body_bytes >= stamp.len() as u64 {
                    u64::from_be_bytes(*stamp)
                } else {
                    0
                },
            }),
        })
        .map(|_| ())
        .map_err(text)
    }

    fn ack(&mut self, delivery_tag: u64, multiple: bool) -> Result<(), String> {
        self.conn.ack(delivery_tag, multiple);
        Ok(())
    }

    fn close(self: Box<Self>) -> Result<(), String> {
        let Consumer { mut conn, tag, .. } = *self;
        conn.basic_cancel(&tag).map_err(text)?;
        conn.close_channel().map_err(text)?;
        conn.close().map_err(text)
    }
}
