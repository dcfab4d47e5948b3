//! The native protocol's adapter: the connection handler (handshake, dispatch of each
//! method to the [`crate::broker::Session`], close handshakes), the methods' handlers, the
//! channel-0 administration requests and the sink that encodes the core's pushes as
//! native frames. The codec itself is [`crate::native`].

pub mod admin;
pub mod handler;
pub mod methods;
pub mod sink;
