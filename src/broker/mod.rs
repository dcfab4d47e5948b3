//! The protocol-independent core: virtual hosts, exchanges, queues, bindings, routing,
//! consumers and the per-channel acknowledgement state.
//!
//! Protocol adapters drive it through [`Session`] (one per client connection) and receive
//! pushes through [`ClientSink`]. Nothing here sees wire bytes.

pub mod access;
#[allow(clippy::module_inception)]
pub mod broker;
pub mod channel;
pub mod channel_hasher;
pub(crate) mod chunked_deque;
pub mod confirm;
pub mod consumer;
pub mod consumer_timeout;
pub mod dead_letter;
pub mod dead_lettering;
pub mod definitions;
pub mod exchange;
pub mod expiry;
pub mod header_routes;
pub mod housekeeping;
pub mod length_limit;
pub mod listing;
pub mod login_checker;
pub mod message;
pub mod message_body;
pub mod names;
pub mod policy;
pub mod policy_admin;
pub mod queue;
pub mod queue_args;
pub mod queue_settings;
pub mod queue_storage;
pub mod rates;
pub mod ready;
pub mod router;
pub mod session;
pub mod session_access;
pub mod sink;
pub mod stoppable_thread;
pub mod topology;
pub mod vhost;
pub mod vhost_policies;

pub use broker::{
    Broker, BrokerConfig, ConnectionInfo, RecoveredMessages, VhostDeleted, DEFAULT_VHOST,
};
pub use message::{Message, RouteNames};
pub use message_body::MessageBody;
pub use session::{GetResult, Session};
pub use sink::{CancelReason, ClientSink};
pub use vhost::{ExchangeSpec, QueueDeclared, QueueSpec, VirtualHost};
