//! Users, passwords, permissions and login throttling (RabbitMQ's access-control
//! model: docs/security.md).

pub mod argon;
pub mod password;
pub mod permission;
pub mod throttle;
pub mod users;

pub use password::StoredHash;
pub use permission::{Access, PermissionDef, Permissions, Resource};
pub use throttle::LoginThrottle;
pub use users::{User, UserRegistry};
