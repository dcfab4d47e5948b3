//! The channel in use: opening and closing it (AMQP 0-9-1 class `channel`, §1.5.2), and
//! the requests on it that declare, delete and bind exchanges and queues (classes
//! `exchange` §1.6.2 and `queue` §1.7.2, with RabbitMQ's `exchange.bind`).
//!
//! Each request waits for its `-ok`. A refusal closes the channel
//! ([`AmqpClientError::ChannelClosed`] with the server's code and text, the `close-ok`
//! already sent); [`Connection::open_channel`] then opens the next channel number.

use super::connection::{check_short_str, Connection};
use super::error::AmqpClientError;
use crate::amqp::AmqpMethod;
use crate::client::{ExchangeDeclareOptions, QueueDeclareOk, QueueDeclareOptions};
use crate::error::ReplyCode;
use crate::types::FieldTable;

impl Connection {
    /// Opens the next channel number (`channel.open`) and makes it the channel in use;
    /// returns its number. The previous channel is left as it is: the caller closes it
    /// first unless the server did. Confirm mode and a delivery in progress belong to
    /// the old channel and are forgotten.
    ///
    /// # Errors
    /// [`AmqpClientError::Usage`] when no channel number is left (the negotiated
    /// `channel_max`); else as [`Connection::call`].
    pub fn open_channel(&mut self) -> Result<u16, AmqpClientError> {
        if self.channel >= self.channel_max() {
            return Err(AmqpClientError::Usage(format!(
                "no channel left (channel_max {})",
                self.channel_max()
            )));
        }
        self.channel += 1;
        self.confirms = None;
        self.delivery.reset();
        self.call(&AmqpMethod::ChannelOpen {}, |m| {
            matches!(m, AmqpMethod::ChannelOpenOk {})
        })?;
        Ok(self.channel)
    }

    /// Closes the channel in use (`channel.close` 200, waits for `close-ok`).
    ///
    /// # Errors
    /// As [`Connection::call`]: e.g. the server's close of the channel for an earlier
    /// error ([`AmqpClientError::ChannelClosed`]).
    pub fn close_channel(&mut self) -> Result<(), AmqpClientError> {
        self.call(
            &AmqpMethod::ChannelClose {
                reply_code: ReplyCode::Success.as_u16(),
                reply_text: "bye".into(),
                class_id: 0,
                method_id: 0,
            },
            |m| matches!(m, AmqpMethod::ChannelCloseOk {}),
        )
        .map(|_| ())
    }

    /// Declares exchange `name` of type `kind` (`direct`, `fanout`, `topic`,
    /// `headers`, …; `exchange.declare`, AMQP 0-9-1 §1.6.2.1).
    ///
    /// # Errors
    /// [`AmqpClientError::Usage`] for a name or type longer than 255 bytes; else as
    /// [`Connection::call`] (406 when it exists with other flags, 404 passive and
    /// missing, 403 for an `amq.` name).
    pub fn exchange_declare(
        &mut self,
        name: &str,
        kind: &str,
        options: ExchangeDeclareOptions,
    ) -> Result<(), AmqpClientError> {
        check_short_str("exchange name", name)?;
        check_short_str("exchange type", kind)?;
        let m = AmqpMethod::ExchangeDeclare {
            exchange: name.into(),
            kind: kind.into(),
            passive: options.passive,
            durable: options.durable,
            auto_delete: options.auto_delete,
            internal: options.internal,
            no_wait: false,
            arguments: options.arguments,
        };
        self.call(&m, |r| matches!(r, AmqpMethod::ExchangeDeclareOk {}))
            .map(|_| ())
    }

    /// Deletes exchange `name` (`exchange.delete`, AMQP 0-9-1 §1.6.2.3); with
    /// `if_unused` only when nothing is bound to it.
    ///
    /// # Errors
    /// [`AmqpClientError::Usage`] for a name longer than 255 bytes; else as
    /// [`Connection::call`] (RabbitMQ answers a missing exchange with `delete-ok`;
    /// others with 404).
    pub fn exchange_delete(&mut self, name: &str, if_unused: bool) -> Result<(), AmqpClientError> {
        check_short_str("exchange name", name)?;
        let m = AmqpMethod::ExchangeDelete {
            exchange: name.into(),
            if_unused,
            no_wait: false,
        };
        self.call(&m, |r| matches!(r, AmqpMethod::ExchangeDeleteOk {}))
            .map(|_| ())
    }

    /// Binds exchange `destination` to exchange `source` with `routing_key` and
    /// `arguments` (`exchange.bind`, RabbitMQ's extension "Exchange to Exchange
    /// Bindings").
    ///
    /// # Errors
    /// [`AmqpClientError::Usage`] for a name or key longer than 255 bytes; else as
    /// [`Connection::call`] (404 for a missing exchange).
    pub fn exchange_bind(
        &mut self,
        destination: &str,
        source: &str,
        routing_key: &str,
        arguments: FieldTable,
    ) -> Result<(), AmqpClientError> {
        check_short_str("destination exchange name", destination)?;
        check_short_str("source exchange name", source)?;
        check_short_str("routing key", routing_key)?;
        let m = AmqpMethod::ExchangeBind {
            destination: destination.into(),
            source: source.into(),
            routing_key: routing_key.into(),
            no_wait: false,
            arguments,
        };
        self.call(&m, |r| matches!(r, AmqpMethod::ExchangeBindOk {}))
            .map(|_| ())
    }

    /// Declares queue `name` (`queue.declare`, AMQP 0-9-1 §1.7.2.1; empty: the server
    /// names it) and returns its name and counts; with
    /// [`QueueDeclareOptions::passive`], only looks it up (its ready message count).
    ///
    /// # Errors
    /// [`AmqpClientError::Usage`] for a name longer than 255 bytes; else as
    /// [`Connection::call`] (404 passive and missing, 406 when it exists with other
    /// flags, 405 for another connection's exclusive queue).
    pub fn queue_declare(
        &mut self,
        name: &str,
        options: QueueDeclareOptions,
    ) -> Result<QueueDeclareOk, AmqpClientError> {
        check_short_str("queue name", name)?;
        let m = AmqpMethod::QueueDeclare {
            queue: name.into(),
            passive: options.passive,
            durable: options.durable,
            exclusive: options.exclusive,
            auto_delete: options.auto_delete,
            no_wait: false,
            arguments: options.arguments,
        };
        match self.call(&m, |r| matches!(r, AmqpMethod::QueueDeclareOk { .. }))? {
            AmqpMethod::QueueDeclareOk {
                queue,
                message_count,
                consumer_count,
            } => Ok(QueueDeclareOk {
                queue,
                message_count,
                consumer_count,
            }),
            r => Err(super::connection::unexpected(
                "queue.declare-ok",
                self.channel,
                &r,
            )),
        }
    }

    /// Deletes queue `name` (`queue.delete`, AMQP 0-9-1 §1.7.2.9), with `if_unused` only
    /// without consumers, with `if_empty` only without messages; returns the messages it
    /// held.
    ///
    /// # Errors
    /// [`AmqpClientError::Usage`] for a name longer than 255 bytes; else as
    /// [`Connection::call`] (RabbitMQ answers a missing queue with `delete-ok` 0; others
    /// with 404; 406 when `if_unused`/`if_empty` do not hold).
    pub fn queue_delete(
        &mut self,
        name: &str,
        if_unused: bool,
        if_empty: bool,
    ) -> Result<u32, AmqpClientError> {
        check_short_str("queue name", name)?;
        let m = AmqpMethod::QueueDelete {
            queue: name.into(),
            if_unused,
            if_empty,
            no_wait: false,
        };
        match self.call(&m, |r| matches!(r, AmqpMethod::QueueDeleteOk { .. }))? {
            AmqpMethod::QueueDeleteOk { message_count } => Ok(message_count),
            r => Err(super::connection::unexpected(
                "queue.delete-ok",
                self.channel,
                &r,
            )),
        }
    }

    /// Binds queue `queue` to exchange `exchange` with `routing_key` and `arguments`
    /// (`queue.bind`, AMQP 0-9-1 §1.7.2.3; a headers exchange reads `x-match` and the
    /// headers to match from `arguments`).
    ///
    /// # Errors
    /// [`AmqpClientError::Usage`] for a name or key longer than 255 bytes; else as
    /// [`Connection::call`] (404 for a missing queue or exchange).
    pub fn queue_bind(
        &mut self,
        queue: &str,
        exchange: &str,
        routing_key: &str,
        arguments: FieldTable,
    ) -> Result<(), AmqpClientError> {
        check_short_str("queue name", queue)?;
        check_short_str("exchange name", exchange)?;
        check_short_str("routing key", routing_key)?;
        let m = AmqpMethod::QueueBind {
            queue: queue.into(),
            exchange: exchange.into(),
            routing_key: routing_key.into(),
            no_wait: false,
            arguments,
        };
        self.call(&m, |r| matches!(r, AmqpMethod::QueueBindOk {}))
            .map(|_| ())
    }
}
