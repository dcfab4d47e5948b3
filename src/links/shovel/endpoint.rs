//! A shovel's two ends, whatever carries them: [`Source`] (consumes, acks) and [`Dest`]
//! (publishes, confirms). [`remote`] carries them over AMQP 0-9-1 connections (the
//! library's client), [`super::local`] through an in-process session of this broker.

use crate::amqp_client::{AmqpClientError, Confirm, Connection, DeliveryEvent};
use crate::client::{ConsumeOptions, QueueDeclareOptions};
use crate::error::ReplyCode;
use crate::types::{BasicProperties, FieldTable};
use std::time::Duration;

/// One message taken from the source, whole.
#[derive(Debug, Clone, Default)]
pub struct Shovelled {
    /// The source's delivery tag.
    pub tag: u64,
    /// The source delivered it before.
    pub redelivered: bool,
    /// The exchange it was published to.
    pub exchange: String,
    /// Its routing key.
    pub routing_key: String,
    /// Its properties.
    pub properties: BasicProperties,
    /// Its body.
    pub body: Vec<u8>,
}

/// The consuming end.
pub trait Source: Send {
    /// Waits at most `timeout` for deliveries and appends those that came to `out`.
    ///
    /// # Errors
    /// The connection or channel failed, or the server cancelled the consumer (its queue
    /// was deleted): a readable reason.
    fn poll(&mut self, timeout: Duration, out: &mut Vec<Shovelled>) -> Result<(), String>;
    /// Acks `tag` (and every earlier one with `multiple`).
    ///
    /// # Errors
    /// As [`Source::poll`].
    fn ack(&mut self, tag: u64, multiple: bool) -> Result<(), String>;
    /// Nacks `tag` with requeue (RabbitMQ's shovel, for a publish the destination
    /// nacked).
    ///
    /// # Errors
    /// As [`Source::poll`].
    fn nack(&mut self, tag: u64) -> Result<(), String>;
    /// Writes what is buffered (acks) and keeps the heartbeat.
    ///
    /// # Errors
    /// As [`Source::poll`].
    fn flush(&mut self) -> Result<(), String>;
    /// Messages ready in the source queue now, when this end can tell cheaply (the
    /// local broker); `None` for a remote one.
    fn backlog(&self) -> Option<u64>;
}

/// The publishing end.
pub trait Dest: Send {
    /// Publishes one message (buffered until [`Dest::flush`]).
    ///
    /// # Errors
    /// As [`Source::poll`]; a refusal of the destination (404 exchange).
    fn publish(
        &mut self,
        exchange: &str,
        routing_key: &str,
        properties: &BasicProperties,
        body: &[u8],
    ) -> Result<(), String>;
    /// Writes what is buffered and keeps the heartbeat.
    ///
    /// # Errors
    /// As [`Dest::publish`].
    fn flush(&mut self) -> Result<(), String>;
    /// Waits at most `timeout` for publisher confirms (returning as soon as one came)
    /// and appends them to `out`.
    ///
    /// # Errors
    /// As [`Dest::publish`].
    fn poll_confirms(&mut self, timeout: Duration, out: &mut Vec<Confirm>) -> Result<(), String>;
    /// Whether the destination blocks publishers now (`connection.blocked`; the local
    /// broker's resource alarm).
    fn is_blocked(&self) -> bool;
}

/// A readable reason for a client error.
pub(crate) fn reason(e: &AmqpClientError) -> String {
    match e {
        AmqpClientError::ConnectionClosed { code, text }
        | AmqpClientError::ChannelClosed { code, text } => {
            let name = ReplyCode::from_u16(*code).map_or("", |c| c.name());
            let text = text.strip_prefix(&format!("{name} - ")).unwrap_or(text);
            format!("{code} {name} - {text}")
        }
        e => e.to_string(),
    }
}

/// Whether `e` is the server's 404 (a passive declare of a missing queue).
pub(super) fn is_not_found(e: &AmqpClientError) -> bool {
    e.reply_code() == Some(ReplyCode::NotFound.as_u16())
}

/// The remote (AMQP 0-9-1) ends.
pub mod remote {
    use super::*;

    /// Declares queue `name` durable with `args` when it does not exist (a passive
    /// declare first, as RabbitMQ's `ensure_queue`); with `predeclared` only checks that
    /// it exists. Returns its ready messages.
    ///
    /// # Errors
    /// The refusal (404 with `predeclared`, 406 for other arguments, 403).
    pub fn ensure_queue(
        c: &mut Connection,
        name: &str,
        args: &FieldTable,
        predeclared: bool,
    ) -> Result<u32, AmqpClientError> {
        let passive = QueueDeclareOptions {
            passive: true,
            ..QueueDeclareOptions::default()
        };
        match c.queue_declare(name, passive) {
            Ok(ok) => Ok(ok.message_count),
            Err(e) if is_not_found(&e) && !predeclared => {
                c.open_channel()?;
                let opts = QueueDeclareOptions {
                    durable: true,
                    arguments: args.clone(),
                    ..QueueDeclareOptions::default()
                };
                c.queue_declare(name, opts).map(|ok| ok.message_count)
            }
            Err(e) => Err(e),
        }
    }

    /// A source over an AMQP 0-9-1 connection, consuming.
    pub struct RemoteSource {
        /// The connection (its channel in use carries the consumer).
        pub conn: Connection,
        /// The message being received.
        partial: Shovelled,
    }

    impl RemoteSource {
        /// Starts consuming `queue` on `conn` with `prefetch` (none with `no_ack`).
        ///
        /// # Errors
        /// The server's refusal.
        pub fn consume(
            mut conn: Connection,
            queue: &str,
            prefetch: u16,
            no_ack: bool,
            consumer_tag: &str,
            args: &FieldTable,
        ) -> Result<RemoteSource, AmqpClientError> {
            if !no_ack {
                conn.basic_qos(prefetch, false)?;
            }
            conn.basic_consume(
                queue,
                ConsumeOptions {
                    consumer_tag: consumer_tag.to_string(),
                    no_ack,
                    exclusive: false,
                    arguments: args.clone(),
                },
            )?;
            Ok(RemoteSource {
                conn,
                partial: Shovelled::default(),
            })
        }
    }

    impl Source for RemoteSource {
        fn poll(&mut self, timeout: Duration, out: &mut Vec<Shovelled>) -> Result<(), String> {
            let partial = &mut self.partial;
            let mut bad: Option<String> = None;
            self.conn
                .poll_deliveries(timeout, |e| match e {
                    DeliveryEvent::Start { head, header } => {
                        partial.tag = head.delivery_tag;
                        partial.redelivered = head.redelivered;
                        partial.exchange.clone_from(&head.exchange);
                        partial.routing_key.clone_from(&head.routing_key);
                        partial.body.clear();
                        partial.body.reserve(head.body_bytes as usize);
                        match header.properties() {
                            Ok(p) => partial.properties = p,
                            Err(e) => bad = Some(e.to_string()),
                        }
                    }
                    DeliveryEvent::Body { chunk, .. } => partial.body.extend_from_slice(chunk),
                    DeliveryEvent::End { .. } => out.push(std::mem::take(partial)),
                })
                .map_err(|e| reason(&e))?;
            match bad {
                Some(why) => Err(why),
                None => Ok(()),
            }
        }

        fn ack(&mut self, tag: u64, multiple: bool) -> Result<(), String> {
            self.conn.ack(tag, multiple);
            Ok(())
        }

        fn nack(&mut self, tag: u64) -> Result<(), String> {
            self.conn.nack(tag, false, true);
            Ok(())
        }

        fn flush(&mut self) -> Result<(), String> {
            self.conn.heartbeat_tick().map_err(|e| reason(&e))?;
            self.conn.flush().map_err(|e| reason(&e))
        }

        fn backlog(&self) -> Option<u64> {
            None
        }
    }

    /// A destination over an AMQP 0-9-1 connection, publishing.
    pub struct RemoteDest {
        /// The connection.
        pub conn: Connection,
    }

    impl Dest for RemoteDest {
        fn publish(
            &mut self,
            exchange: &str,
            routing_key: &str,
            properties: &BasicProperties,
            body: &[u8],
        ) -> Result<(), String> {
            let p = self
                .conn
                .prepare_publish(exchange, routing_key, properties)
                .map_err(|e| reason(&e))?;
            self.conn.publish(&p, body).map_err(|e| reason(&e))
        }

        fn flush(&mut self) -> Result<(), String> {
            self.conn.flush().map_err(|e| reason(&e))?;
            // An idle destination is read nowhere else: this reads its heartbeats.
            self.conn.keep_alive().map_err(|e| reason(&e))
        }

        fn poll_confirms(
            &mut self,
            timeout: Duration,
            out: &mut Vec<Confirm>,
        ) -> Result<(), String> {
            if self.conn.unconfirmed() == 0 {
                // Nothing to wait for: read what came (an unblock), then wait.
                self.conn.check_incoming().map_err(|e| reason(&e))?;
                std::thread::sleep(timeout);
            } else {
                self.conn.poll_confirms(timeout).map_err(|e| reason(&e))?;
            }
            self.conn.take_confirms(out);
            Ok(())
        }

        fn is_blocked(&self) -> bool {
            self.conn.is_blocked()
        }
    }
}
