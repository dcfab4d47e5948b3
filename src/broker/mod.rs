//! The protocol-independent core: virtual hosts, exchanges, queues, bindings, routing,
//! consumers and the per-channel acknowledgement state.

pub mod router;
