//! The unacked browser: the deliveries of one queue that await their ack, on every
//! channel of its vhost, oldest first (docs/http-api.md §3.5, "Unacked deliveries").
//!
//! Each channel keeps its unacked deliveries in tag order with the time each was recorded
//! ([`super::Unacked::delivered_at_ms`]). A listing takes the vhost's channels from the
//! broker's [`super::timeout::ChannelRegistry`] (its lock released at once), then copies
//! at most `limit` entries of the queue from each channel under that channel's lock alone,
//! one channel at a time; the copies are merged by age outside any lock. Nothing is
//! rendered under a lock, and the deliveries are not touched.

use crate::broker::message::Message;
use crate::broker::node::Broker;
use crate::broker::queue::Queue;
use crate::broker::vhost::VirtualHost;
use std::sync::Arc;

/// Most deliveries one listing returns (a `limit` above it is refused): bounds the copy
/// held per channel and the answer, in deliveries.
pub const UNACKED_LIST_MAX: usize = 1000;

/// Deliveries a listing returns when the request names no `limit`.
pub const UNACKED_LIST_DEFAULT: usize = 100;

/// One delivery awaiting its ack, as copied from its channel.
#[derive(Debug, Clone)]
pub struct UnackedDelivery {
    /// The id of the connection of its channel.
    pub connection_id: u64,
    /// Its channel's number on that connection.
    pub channel: u16,
    /// Its delivery tag on that channel.
    pub delivery_tag: u64,
    /// The consumer it went to; `None` for a `basic.get` awaiting its ack.
    pub consumer_tag: Option<Arc<str>>,
    /// The message delivered.
    pub message: Arc<Message>,
    /// The delivery carried the redelivered flag.
    pub redelivered: bool,
    /// Deliveries of the message so far, this one included.
    pub delivery_count: u32,
    /// When it was delivered, ms since the Unix epoch.
    pub delivered_at_ms: u64,
}

/// The oldest `limit` deliveries from `queue` (of `vhost`) awaiting their ack on any
/// channel, oldest first (ties: by connection, channel and delivery tag).
pub fn of_queue(
    broker: &Broker,
    vhost: &Arc<VirtualHost>,
    queue: &Arc<Queue>,
    limit: usize,
) -> Vec<UnackedDelivery> {
    let limit = limit.min(UNACKED_LIST_MAX);
    let mut all: Vec<UnackedDelivery> = Vec::new();
    for channel in broker.channel_registry().in_vhost(vhost) {
        // A channel's list is in tag order, so its first `limit` are its oldest.
        all.extend(channel.unacked_from(queue, limit));
    }
    all.sort_by_key(|d| {
        (
            d.delivered_at_ms,
            d.connection_id,
            d.channel,
            d.delivery_tag,
        )
    });
    all.truncate(limit);
    all
}
