//! The AMQP 0-9-1 adapter: input parsing (frames into methods with their content), the
//! connection handler (handshake, dispatch to the [`crate::broker::Session`], close
//! handshakes), transactions (`tx.*`) and the sink that encodes the core's pushes as AMQP
//! frames. The codec itself is [`crate::amqp`].

pub mod handler;
pub mod input;
pub mod sink;
pub mod tx;
