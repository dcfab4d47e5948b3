//! The protocol-independent core, a module per concept: the broker node and its virtual
//! hosts, `queue/`, `exchange/` (one file per exchange type, bindings, routing),
//! `consumer`, `channel/` (acknowledgement state, confirms, consumer timeouts), `session`
//! (one client connection), `direct_reply` (RabbitMQ's direct reply-to), `delayed/`
//! (delayed delivery and its timer), `message/`,
//! `dead_letter/`, `policy/`, `definitions/` (RabbitMQ's definitions file), `access/`
//! (logins, users, permissions), `limits` (RabbitMQ's vhost and user limits), the
//! housekeeping thread and message rates.
//!
//! Protocol adapters drive it through [`Session`] (one per client connection) and receive
//! pushes through [`ClientSink`]. Nothing here sees wire bytes.

pub mod access;
pub mod channel;
pub mod consumer;
pub mod dead_letter;
pub mod definitions;
pub mod delayed;
pub mod direct_reply;
pub mod exchange;
pub mod federation_upstream;
pub mod housekeeping;
pub mod limits;
pub mod links;
pub mod listing;
pub mod message;
pub mod names;
pub mod node;
pub mod parameters;
pub mod policy;
pub mod queue;
pub mod queue_tools;
pub mod rates;
pub mod session;
pub mod shovel_definition;
pub mod sink;
pub mod topology;
pub mod vhost;

pub use message::body::MessageBody;
pub use message::{Message, RouteNames};
pub use node::{
    Broker, BrokerConfig, ConnectionInfo, RecoveredMessages, VhostDeleted, DEFAULT_VHOST,
};
pub use session::{GetResult, Session};
pub use sink::{CancelReason, ClientSink};
pub use vhost::{ExchangeSpec, QueueDeclared, QueueSpec, VirtualHost};
