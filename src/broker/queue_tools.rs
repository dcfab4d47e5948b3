//! The operator's queue tools on a [`Session`], each with its permission rule (checked as
//! RabbitMQ checks the AMQP method closest to it): peek and search (`read` on the queue,
//! as `basic.get`), dead-letter replay (`read` on the source, `write` on the exchange it
//! publishes to), pause and resume (`configure` on the queue), the unacked deliveries of
//! a queue (`read`). RabbitMQ has none of them (docs/http-api.md, "Beyond RabbitMQ").
//!
//! The HTTP API and the native protocol both call these, so the two cannot disagree on
//! who may do what.

use crate::auth::permission::{Access, Resource};
use crate::broker::channel::unacked::{self, UnackedDelivery, UNACKED_LIST_MAX};
use crate::broker::dead_letter::replay::{self, ReplayOutcome, ReplayTarget, REPLAY_COUNT_MAX};
use crate::broker::message::Message;
use crate::broker::queue::inspect::SEARCH_SCAN_MAX;
use crate::broker::queue::inspect::{PeekPage, SearchPage, PEEK_COUNT_MAX, SEARCH_LIMIT_MAX};
use crate::broker::session::Session;
use crate::error::BrokerError;

impl Session {
    /// Reads up to `count` ready messages of `queue` from position `offset` without
    /// consuming them ([`crate::broker::queue::Queue::peek`]).
    ///
    /// # Errors
    /// 406 for `count` over [`PEEK_COUNT_MAX`]; 403 without `read` permission on the
    /// queue; 404 absent; 405 exclusive to another connection; 504 channel not open.
    pub fn queue_peek(
        &mut self,
        ch: u16,
        queue: &str,
        offset: usize,
        count: usize,
    ) -> Result<PeekPage, BrokerError> {
        self.require_channel(ch)?;
        if count > PEEK_COUNT_MAX {
            return Err(BrokerError::precondition(format!(
                "count must be between 0 and {PEEK_COUNT_MAX}, got {count}"
            )));
        }
        self.permit(Access::Read, Resource::Queue, queue)?;
        let q = self.vhost().queue_for(queue, self.id)?;
        Ok(q.peek(offset, count))
    }

    /// Looks for messages of `queue` that `matches` accepts, from position `offset`, at
    /// most `scan_max` looked at and `limit` returned
    /// ([`crate::broker::queue::Queue::search`]).
    ///
    /// # Errors
    /// 406 for `scan_max` over [`SEARCH_SCAN_MAX`] or `limit` over [`SEARCH_LIMIT_MAX`];
    /// otherwise as [`Session::queue_peek`].
    pub fn queue_search(
        &mut self,
        ch: u16,
        queue: &str,
        offset: usize,
        limit: usize,
        matches: impl Fn(&Message) -> bool,
    ) -> Result<SearchPage, BrokerError> {
        self.require_channel(ch)?;
        if limit > SEARCH_LIMIT_MAX {
            return Err(BrokerError::precondition(format!(
                "limit must be between 0 and {SEARCH_LIMIT_MAX}, got {limit}"
            )));
        }
        self.permit(Access::Read, Resource::Queue, queue)?;
        let q = self.vhost().queue_for(queue, self.id)?;
        Ok(q.search(offset, SEARCH_SCAN_MAX, limit, matches))
    }

    /// Moves ready messages of `queue` to `target`: those at `positions`, or the first
    /// `count` (all when `None`, up to [`REPLAY_COUNT_MAX`]) ([`replay::replay`]).
    ///
    /// # Errors
    /// 406 for more than [`REPLAY_COUNT_MAX`] messages; 403 without `read` permission on
    /// the queue or `write` on the target's exchange; 404 absent; 405 exclusive to
    /// another connection; 504 channel not open. Refusals of single messages are in the
    /// outcome, not errors.
    pub fn queue_replay(
        &mut self,
        ch: u16,
        queue: &str,
        target: &ReplayTarget,
        positions: Option<&[usize]>,
        count: Option<usize>,
    ) -> Result<ReplayOutcome, BrokerError> {
        self.require_channel(ch)?;
        let asked = positions.map_or(count.unwrap_or(0), <[usize]>::len);
        if asked > REPLAY_COUNT_MAX {
            return Err(BrokerError::precondition(format!(
                "a replay moves at most {REPLAY_COUNT_MAX} messages, {asked} asked"
            )));
        }
        self.permit(Access::Read, Resource::Queue, queue)?;
        self.permit(Access::Write, Resource::Exchange, target.exchange())?;
        let q = self.vhost().queue_for(queue, self.id)?;
        let count = count.unwrap_or(REPLAY_COUNT_MAX);
        let outcome = replay::replay(
            self.broker(),
            self.vhost(),
            &q,
            target,
            positions,
            count,
            self.id,
        );
        log::info!(
            "queue '{}' in vhost '{}': {} message(s) replayed to {target:?} by '{}' ({} \
             skipped, {} refused)",
            queue.escape_debug(),
            self.vhost().name.escape_debug(),
            outcome.moved,
            self.user().unwrap_or_default().escape_debug(),
            outcome.skipped,
            outcome.errors_total
        );
        Ok(outcome)
    }

    /// Pauses (`paused`) or resumes deliveries of `queue` to its consumers
    /// ([`crate::broker::queue::Queue::set_paused`]); a durable queue's state is committed
    /// to `meta.db` first, so it survives a restart. Pausing a paused queue or resuming a
    /// running one changes nothing and succeeds. Returns whether the state changed.
    ///
    /// # Errors
    /// 403 without `configure` permission on the queue; 404 absent; 405 exclusive to
    /// another connection; 504 channel not open; 541 when `meta.db` cannot be written
    /// (the queue keeps its state).
    pub fn queue_pause(&mut self, ch: u16, queue: &str, paused: bool) -> Result<bool, BrokerError> {
        self.require_channel(ch)?;
        self.permit(Access::Configure, Resource::Queue, queue)?;
        let vhost = std::sync::Arc::clone(self.vhost());
        let q = vhost.queue_for(queue, self.id)?;
        // Under the changes lock: a delete or another pause cannot interleave between
        // the commit and the change in memory.
        let _changes = vhost.changes();
        if q.is_deleted() {
            return Err(BrokerError::not_found(format!(
                "no queue '{queue}' in vhost '{}'",
                vhost.name
            )));
        }
        if q.is_paused() == paused {
            return Ok(false);
        }
        if q.storage_id.is_some() {
            vhost.persist("queue state", |m| {
                m.set_queue_paused(&vhost.name, &q.name, paused)
            })?;
        }
        let changed = q.set_paused(paused);
        log::info!(
            "queue '{}' in vhost '{}' {} by '{}'",
            queue.escape_debug(),
            vhost.name.escape_debug(),
            if paused { "paused" } else { "resumed" },
            self.user().unwrap_or_default().escape_debug()
        );
        Ok(changed)
    }

    /// The oldest `limit` deliveries from `queue` awaiting their ack, on any channel of
    /// the vhost, oldest first ([`unacked::of_queue`]).
    ///
    /// # Errors
    /// 406 for `limit` over [`UNACKED_LIST_MAX`]; 403 without `read` permission on the
    /// queue; 404 absent; 405 exclusive to another connection; 504 channel not open.
    pub fn queue_unacked(
        &mut self,
        ch: u16,
        queue: &str,
        limit: usize,
    ) -> Result<Vec<UnackedDelivery>, BrokerError> {
        self.require_channel(ch)?;
        if limit > UNACKED_LIST_MAX {
            return Err(BrokerError::precondition(format!(
                "limit must be between 0 and {UNACKED_LIST_MAX}, got {limit}"
            )));
        }
        self.permit(Access::Read, Resource::Queue, queue)?;
        let q = self.vhost().queue_for(queue, self.id)?;
        Ok(unacked::of_queue(self.broker(), self.vhost(), &q, limit))
    }
}
