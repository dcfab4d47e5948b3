//! The sessions of a `relaymq://` run, on `relaymq::client` (the native protocol): the
//! client's own reader thread per connection, `publish_batch` for a whole batch in one
//! write, and its confirm window.

use super::args::Options;
use super::session::{
    fill_body, sent_ns_of, AdminSession, Batch, ConsumerSession, DeliveryInfo, ProducerSession,
    Route,
};
use relaymq::client::{
    Channel, ClientError, ConnectOptions, Connection, ConsumeOptions, ConsumerEvent,
    ExchangeDeclareOptions, PublishMessage, QueueDeclareOptions,
};
use relaymq::types::FieldTable;
use std::time::Duration;

/// Reply code of a missing queue or exchange (AMQP 0-9-1 404 NOT_FOUND).
const NOT_FOUND: u16 = 404;

/// Opens a connection named `relaymq-bench ROLE`.
fn connect(opts: &Options, role: &str) -> Result<Connection, String> {
    let t = &opts.target;
    Connection::connect_with(ConnectOptions {
        addr: t.addr.clone(),
        user: t.user.clone(),
        password: t.password.clone(),
        vhost: t.vhost.clone(),
        client_name: format!("relaymq-bench {role}"),
        ..ConnectOptions::default()
    })
    // The client's error names the address already.
    .map_err(|e| e.to_string())
}

fn text(e: ClientError) -> String {
    e.to_string()
}

/// The setup session: a connection and a channel, reopened after a refusal closed it.
pub struct Admin {
    conn: Connection,
    ch: Channel,
}

impl Admin {
    /// Connects and opens a channel.
    ///
    /// # Errors
    /// The connection, handshake or `channel.open` failed.
    pub fn connect(opts: &Options) -> Result<Box<dyn AdminSession>, String> {
        let conn = connect(opts, "setup")?;
        let ch = conn.open_channel().map_err(text)?;
        Ok(Box::new(Admin { conn, ch }))
    }

    /// Runs `f` on the channel, opening a fresh one after a server refusal closed it.
    fn on_channel<T>(
        &mut self,
        f: impl FnOnce(&Channel) -> Result<T, ClientError>,
    ) -> Result<T, ClientError> {
        let r = f(&self.ch);
        if !self.ch.is_open() {
            self.ch = self.conn.open_channel()?;
        }
        r
    }

    /// As `on_channel`, a 404 counting as done.
    fn unless_missing(
        &mut self,
        f: impl FnOnce(&Channel) -> Result<(), ClientError>,
    ) -> Result<(), String> {
        match self.on_channel(f) {
            Err(e) if e.reply_code() != Some(NOT_FOUND) => Err(text(e)),
            _ => Ok(()),
        }
    }
}

impl AdminSession for Admin {
    fn queue_declare(&mut self, name: &str, durable: bool) -> Result<(), String> {
        let opts = QueueDeclareOptions {
            durable,
            ..Default::default()
        };
        self.on_channel(|c| c.queue_declare(name, opts).map(|_| ()))
            .map_err(text)
    }

    fn message_count(&mut self, name: &str) -> Result<u64, String> {
        let opts = QueueDeclareOptions {
            passive: true,
            ..Default::default()
        };
        self.on_channel(|c| c.queue_declare(name, opts))
            .map(|ok| u64::from(ok.message_count))
            .map_err(text)
    }

    fn queue_delete(&mut self, name: &str) -> Result<(), String> {
        self.unless_missing(|c| c.queue_delete(name, false, false).map(|_| ()))
    }

    fn exchange_declare(&mut self, name: &str, kind: &str, durable: bool) -> Result<(), String> {
        let opts = ExchangeDeclareOptions {
            durable,
            ..Default::default()
        };
        self.on_channel(|c| c.exchange_declare(name, kind, opts))
            .map_err(text)
    }

    fn exchange_delete(&mut self, name: &str) -> Result<(), String> {
        self.unless_missing(|c| c.exchange_delete(name, false))
    }

    fn queue_bind(
        &mut self,
        queue: &str,
        exchange: &str,
        key: &str,
        args: FieldTable,
    ) -> Result<(), String> {
        self.on_channel(|c| c.queue_bind(queue, exchange, key, args))
            .map_err(text)
    }

    fn exchange_bind(
        &mut self,
        destination: &str,
        source: &str,
        key: &str,
        args: FieldTable,
    ) -> Result<(), String> {
        self.on_channel(|c| c.exchange_bind(destination, source, key, args))
            .map_err(text)
    }

    fn close(self: Box<Self>) -> Result<(), String> {
        let Admin { conn, ch } = *self;
        ch.close().map_err(text)?;
        conn.close().map_err(text)
    }
}

/// A producer: `publish_batch` of owned messages, the client's confirm window.
pub struct Producer {
    conn: Connection,
    ch: Channel,
    routes: Vec<Route>,
    /// Body size, bytes.
    size: usize,
    /// The messages of the batch being sent (reused).
    batch: Vec<PublishMessage>,
}

impl Producer {
    /// Connects, opens a channel, selects confirms with `--confirm`.
    ///
    /// # Errors
    /// The connection, handshake, `channel.open` or `confirm.select` failed.
    pub fn connect(
        opts: &Options,
        role: &str,
        routes: Vec<Route>,
    ) -> Result<Box<dyn ProducerSession>, String> {
        let conn = connect(opts, role)?;
        let ch = conn.open_channel().map_err(text)?;
        if opts.confirm.is_some() {
            ch.confirm_select().map_err(text)?;
        }
        Ok(Box::new(Producer {
            conn,
            ch,
            routes,
            size: opts.size,
            batch: Vec::new(),
        }))
    }
}

impl ProducerSession for Producer {
    fn publish(&mut self, batch: &Batch<'_>) -> Result<(), String> {
        self.batch.clear();
        for (k, &r) in batch.routes.iter().enumerate() {
            let route = &self.routes[r];
            let mut body = vec![0u8; self.size];
            fill_body(&mut body, batch.sent_ns, batch.first_seq + k as u64);
            self.batch.push(PublishMessage {
                exchange: route.exchange.clone(),
                routing_key: route.routing_key.clone(),
                mandatory: false,
                properties: route.properties.clone(),
                body,
            });
        }
        self.ch.publish_batch(&self.batch).map_err(text)
    }

    fn wait_confirms_at_most(&mut self, limit: usize, timeout: Duration) -> Result<usize, String> {
        let (unconfirmed, all_acked) = self
            .ch
            .wait_for_confirms_at_most(limit, timeout)
            .map_err(text)?;
        if !all_acked {
            return Err("the server nacked a publish".into());
        }
        Ok(unconfirmed)
    }

    fn close(self: Box<Self>) -> Result<(), String> {
        let Producer { conn, ch, .. } = *self;
        ch.close().map_err(text)?;
        conn.close().map_err(text)
    }
}

/// A consumer: the client's consumer stream, one delivery per poll.
pub struct Consumer {
    conn: Connection,
    ch: Channel,
    consumer: relaymq::client::Consumer,
}

impl Consumer {
    /// Connects, opens a channel, sets the prefetch and starts consuming `queue`.
    ///
    /// # Errors
    /// The connection, handshake, `channel.open`, `basic.qos` or `basic.consume` failed.
    pub fn connect(
        opts: &Options,
        role: &str,
        queue: &str,
    ) -> Result<Box<dyn ConsumerSession>, String> {
        let conn = connect(opts, role)?;
        let ch = conn.open_channel().map_err(text)?;
        if opts.prefetch > 0 && !opts.no_ack {
            ch.basic_qos(opts.prefetch, false).map_err(text)?;
        }
        let consumer = ch
            .basic_consume(
                queue,
                ConsumeOptions {
                    no_ack: opts.no_ack,
                    ..Default::default()
                },
            )
            .map_err(text)?;
        Ok(Box::new(Consumer { conn, ch, consumer }))
    }
}

impl ConsumerSession for Consumer {
    fn poll(&mut self, timeout: Duration, out: &mut Vec<DeliveryInfo>) -> Result<(), String> {
        match self.consumer.recv_timeout(timeout) {
            Ok(ConsumerEvent::Delivery(d)) => {
                out.push(DeliveryInfo {
                    delivery_tag: d.delivery_tag,
                    redelivered: d.redelivered,
                    body_bytes: d.body.len() as u64,
                    sent_ns: sent_ns_of(&d.body),
                });
                Ok(())
            }
            Ok(ConsumerEvent::Cancelled) => Err("the server cancelled the consumer".into()),
            Err(ClientError::Timeout) => Ok(()),
            Err(e) => Err(text(e)),
        }
    }

    fn ack(&mut self, delivery_tag: u64, multiple: bool) -> Result<(), String> {
        self.ch.basic_ack(delivery_tag, multiple).map_err(text)
    }

    fn close(self: Box<Self>) -> Result<(), String> {
        let Consumer { conn, ch, consumer } = *self;
        consumer.cancel().map_err(text)?;
        drop(consumer);
        ch.close().map_err(text)?;
        conn.close().map_err(text)
    }
}
