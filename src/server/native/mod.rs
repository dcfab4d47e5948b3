//! The native protocol's adapter: input parsing (the protocol header, frames joined and
//! decoded into [`event::NativeEvent`]s), the connection handler (the `connection.open`
//! handshake, each method → [`crate::broker::Session`] call → reply), the channel-0
//! administration requests and the sink that encodes the core's pushes as native frames.
//! The close handshakes are shared with AMQP 0-9-1 (`server/lifecycle.rs`); the codec
//! itself is [`crate::native`].

pub mod admin;
pub mod event;
pub mod handler;
pub mod input;
pub mod sink;
