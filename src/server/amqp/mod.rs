//! The AMQP 0-9-1 adapter: input parsing (the protocol header, frames into methods with
//! their content, as [`event::AmqpEvent`]s), the connection handler (start, SASL,
//! tune and open, then each method → [`crate::broker::Session`] call, with RabbitMQ's
//! replies), transactions (`tx.*`) and the sink that encodes the core's pushes as AMQP
//! frames. The close handshakes are shared with the native protocol
//! (`server/lifecycle.rs`); the codec itself is [`crate::amqp`].

pub mod event;
pub mod handler;
pub mod input;
pub mod sink;
pub mod tx;
