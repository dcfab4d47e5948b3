//! The state a connection's handles (connection, channels, consumers) share with its
//! reader thread, and the routing of everything the server sends.
//!
//! A request registers a [`Pending`] entry under (channel, request id) and blocks on a
//! one-slot channel until the reader thread routes the reply there, the channel or the
//! connection fails, or the request times out. Server pushes (request id 0) go to the
//! consumer (deliveries, cancels), the channel's confirm tracker (acks, nacks) or its
//! returns channel.
//!
//! Locks: `writer` may be held while taking `state`, never the other way round; the reader
//! thread only takes `state`, and writes its answers (`close-ok`) after releasing it.

use super::consumer::ConsumerItem;
use super::error::ClientError;
use super::io::Writer;
use super::message::ReturnedMessage;
use crate::native::{Delivery, Method};
use crossbeam_channel::Sender;
use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// Method id of `connection.close` (see [`crate::native::method`]).
const CONNECTION_CLOSE_ID: u16 = 0x0003;
/// Method id of `channel.close`.
const CHANNEL_CLOSE_ID: u16 = 0x0021;

/// Locks a mutex, going on after a panic elsewhere: every critical section leaves the
/// state consistent between statements, so a poisoned lock holds usable data.
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// What the reader thread does to the routing state when a request succeeds, so that
/// pushes following the reply on the wire are routed correctly.
pub(crate) enum Hook {
    /// Nothing.
    None,
    /// On `basic.consume-ok`: route deliveries for the returned tag to this sender.
    RegisterConsumer(Sender<ConsumerItem>),
    /// On the cancel's reply: stop routing deliveries for this tag and end its stream.
    UnregisterConsumer(String),
}

/// A request waiting for its reply.
pub(crate) struct Pending {
    /// Where the reply (or the failure) goes.
    tx: Sender<Result<Method, ClientError>>,
    /// The request's method id: a `close-ok` is matched to a pending close by it.
    method_id: u16,
    /// State change to apply when the reply is a success.
    hook: Hook,
}

/// Publisher-confirm bookkeeping of one channel (RabbitMQ's confirm extension).
#[derive(Debug, Default)]
pub(crate) struct Confirms {
    /// Sequence number the next publish gets; the first publish after `confirm.select`
    /// is 1.
    next_seq: u64,
    /// Sequence numbers published and neither acked nor nacked yet.
    outstanding: BTreeSet<u64>,
    /// Whether a nack arrived since the last `wait_for_confirms`.
    nacked: bool,
}

impl Confirms {
    /// Settles `tag` (and every lower one when `multiple`).
    fn settle(&mut self, tag: u64, multiple: bool, nack: bool) {
        if multiple {
            self.outstanding = self.outstanding.split_off(&tag.saturating_add(1));
        } else {
            self.outstanding.remove(&tag);
        }
        self.nacked |= nack;
    }
}

/// One open channel as the client sees it.
pub(crate) struct ChannelState {
    /// Why the channel is closed, once it is; every later use fails with this error.
    pub(crate) closed: Option<ClientError>,
    /// Consumer tag to the consumer's delivery stream.
    consumers: HashMap<String, Sender<ConsumerItem>>,
    /// Present after `confirm.select`.
    confirms: Option<Confirms>,
    /// Where `basic.return` messages go.
    returns: Sender<ReturnedMessage>,
    /// Whether the close error was returned to the request that caused it.
    close_reported: bool,
}

impl ChannelState {
    /// Sends `deliveries` (all for one consumer, in order) to that consumer's stream; a
    /// consumer unknown here (cancelled) drops them, one whose handle is gone is forgotten.
    fn route_deliveries(&mut self, deliveries: Vec<Delivery>) {
        let Some(first) = deliveries.first() else {
            return;
        };
        let Some(tx) = self.consumers.get(&first.consumer_tag) else {
            log::debug!("delivery for unknown consumer {:?}", first.consumer_tag);
            return;
        };
        let tag = first.consumer_tag.clone();
        if tx.send(ConsumerItem::Deliveries(deliveries)).is_err() {
            self.consumers.remove(&tag);
        }
    }
}

/// Everything behind the state lock.
pub(crate) struct State {
    /// Why the connection is closed, once it is.
    pub(crate) closed: Option<ClientError>,
    /// Requests waiting for a reply, by (channel, request id).
    pending: HashMap<(u16, u32), Pending>,
    /// Open channels (channel 0, the connection itself, is not listed).
    channels: HashMap<u16, ChannelState>,
    /// Where the search for a free channel number starts.
    next_channel: u16,
    /// The server's `connection.blocked` reason while publishing is blocked by a resource
    /// alarm (until `connection.unblocked`).
    pub(crate) blocked: Option<String>,
}

/// A connection's shared half: the writer, the routing state and its settings.
pub(crate) struct Shared {
    /// The socket's write half; one frame sequence at a time.
    pub(crate) writer: Mutex<Writer>,
    /// Routing state.
    pub(crate) state: Mutex<State>,
    /// Signalled whenever confirms settle or a channel or the connection closes.
    pub(crate) changed: Condvar,
    /// Time a request waits for its reply.
    pub(crate) timeout: Duration,
    /// Highest channel number the server allows.
    pub(crate) channel_max: u16,
    /// Last request id handed out (0 is never used: it marks server pushes).
    request_id: AtomicU32,
}

impl Shared {
    /// Shared state around an open connection's writer.
    pub(crate) fn new(writer: Writer, timeout: Duration, channel_max: u16) -> Shared {
        Shared {
            writer: Mutex::new(writer),
            state: Mutex::new(State {
                closed: None,
                pending: HashMap::new(),
                channels: HashMap::new(),
                next_channel: 1,
                blocked: None,
            }),
            changed: Condvar::new(),
            timeout,
            channel_max: channel_max.max(1),
            request_id: AtomicU32::new(1),
        }
    }

    fn next_request_id(&self) -> u32 {
        loop {
            let id = self
                .request_id
                .fetch_add(1, Ordering::Relaxed)
                .wrapping_add(1);
            if id != 0 {
                return id;
            }
        }
    }

    /// Sends `method` on `channel` and waits for its reply.
    ///
    /// # Errors
    /// The channel's or connection's close error (the server's code and text when the
    /// server refused this request), [`ClientError::Io`] when the write fails,
    /// [`ClientError::Timeout`] when no reply arrives in time.
    pub(crate) fn call(
        &self,
        channel: u16,
        method: Method,
        hook: Hook,
    ) -> Result<Method, ClientError> {
        let (tx, rx) = crossbeam_channel::bounded(1);
        let id = self.next_request_id();
        // Writer first, then state (the reader's order when it answers a close): checking
        // the channel and writing the request are one step, so a request can never follow
        // the close-ok of a channel the server just closed (the server would take it for
        // a frame on a channel that is not open, a connection error).
        let mut w = lock(&self.writer);
        {
            let mut st = lock(&self.state);
            st.check_open(channel)?;
            let method_id = method.id();
            st.pending.insert(
                (channel, id),
                Pending {
                    tx,
                    method_id,
                    hook,
                },
            );
        }
        let written = w.send(channel, id, &method);
        drop(w);
        if let Err(e) = written {
            lock(&self.state).pending.remove(&(channel, id));
            return Err(self.io_failure(e));
        }
        match rx.recv_timeout(self.timeout) {
            Ok(reply) => reply,
            Err(crossbeam_channel::RecvTimeoutError::Timeout) => {
                lock(&self.state).pending.remove(&(channel, id));
                // The reply may have been routed between the timeout and the removal.
                rx.try_recv().unwrap_or(Err(ClientError::Timeout))
            }
            Err(crossbeam_channel::RecvTimeoutError::Disconnected) => {
                Err(lock(&self.state).connection_error())
            }
        }
    }

    /// Sends `method` on `channel` without waiting for anything (acks, nacks, rejects).
    ///
    /// # Errors
    /// The channel's or connection's close error, or [`ClientError::Io`].
    pub(crate) fn send_async(&self, channel: u16, method: &Method) -> Result<(), ClientError> {
        let mut w = lock(&self.writer);
        lock(&self.state).check_open(channel)?;
        w.send(channel, 0, method).map_err(|e| self.io_failure(e))
    }

    /// Publishes `count` messages on `channel`: takes the writer, numbers the messages
    /// for publisher confirms (in the order they reach the socket), then lets `write`
    /// send them.
    ///
    /// # Errors
    /// The channel's or connection's close error, or [`ClientError::Io`].
    pub(crate) fn publish(
        &self,
        channel: u16,
        count: u64,
        write: impl FnOnce(&mut Writer) -> std::io::Result<()>,
    ) -> Result<(), ClientError> {
        let mut w = lock(&self.writer);
        {
            let mut st = lock(&self.state);
            st.check_open(channel)?;
            if let Some(c) = st.channel_mut(channel).and_then(|c| c.confirms.as_mut()) {
                for _ in 0..count {
                    c.outstanding.insert(c.next_seq);
                    c.next_seq += 1;
                }
            }
        }
        write(&mut w).map_err(|e| self.io_failure(e))
    }

    /// Fails the connection after a write error and returns its close reason: the
    /// server's `connection.close` when the reader routed one first (the write then fails
    /// only because the server closed the socket after it), else the write error.
    fn io_failure(&self, e: std::io::Error) -> ClientError {
        self.fail_connection(ClientError::Io(e));
        lock(&self.state).connection_error()
    }

    /// Reserves a free channel number and its routing state (before `channel.open` is
    /// sent, so nothing the server sends on it is lost).
    ///
    /// # Errors
    /// The connection's close error, or [`ClientError::Usage`] when every number up to
    /// `channel_max` is in use.
    pub(crate) fn reserve_channel(
        &self,
        returns: Sender<ReturnedMessage>,
    ) -> Result<u16, ClientError> {
        let mut st = lock(&self.state);
        st.check_open(0)?;
        let max = self.channel_max;
        for _ in 0..max {
            let n = st.next_channel;
            st.next_channel = if n >= max { 1 } else { n + 1 };
            if let std::collections::hash_map::Entry::Vacant(e) = st.channels.entry(n) {
                e.insert(ChannelState {
                    closed: None,
                    consumers: HashMap::new(),
                    confirms: None,
                    returns,
                    close_reported: false,
                });
                return Ok(n);
            }
        }
        Err(ClientError::Usage(format!(
            "no free channel number: all {max} channels are open"
        )))
    }

    /// Marks a channel closed (ending its consumers' streams and failing its requests)
    /// and forgets its number.
    pub(crate) fn release_channel(&self, channel: u16, why: ClientError) {
        let mut st = lock(&self.state);
        st.close_channel(channel, why);
        st.channels.remove(&channel);
        drop(st);
        self.changed.notify_all();
    }

    /// Turns on confirm bookkeeping for a channel (after `confirm.select-ok`); the first
    /// publish after it is number 1. A second call changes nothing.
    pub(crate) fn enable_confirms(&self, channel: u16) {
        let mut st = lock(&self.state);
        if let Some(c) = st.channel_mut(channel) {
            c.confirms.get_or_insert(Confirms {
                next_seq: 1,
                ..Confirms::default()
            });
        }
    }

    /// Blocks until every publish of `channel` is confirmed; `Ok(true)` when all were
    /// acked, `Ok(false)` when at least one was nacked since the last call.
    ///
    /// # Errors
    /// [`ClientError::Timeout`] when `timeout` passes first, the channel's close error
    /// when it closes with publishes unconfirmed, [`ClientError::Usage`] without
    /// `confirm.select`.
    pub(crate) fn wait_for_confirms(
        &self,
        channel: u16,
        timeout: Duration,
    ) -> Result<bool, ClientError> {
        self.wait_for_confirms_at_most(channel, 0, timeout)
            .map(|(_, all_acked)| all_acked)
    }

    /// Blocks until at most `limit` publishes of `channel` are unconfirmed; returns how
    /// many are, and `true` when no nack arrived since the last wait (the nack flag is
    /// cleared as by [`Shared::wait_for_confirms`]).
    ///
    /// # Errors
    /// As [`Shared::wait_for_confirms`].
    pub(crate) fn wait_for_confirms_at_most(
        &self,
        channel: u16,
        limit: usize,
        timeout: Duration,
    ) -> Result<(usize, bool), ClientError> {
        let deadline = Instant::now() + timeout;
        let mut st = lock(&self.state);
        loop {
            let closed = st.check_open(channel).err();
            let Some(c) = st.channel_mut(channel).and_then(|c| c.confirms.as_mut()) else {
                return Err(closed.unwrap_or_else(|| {
                    ClientError::Usage("wait_for_confirms needs confirm_select first".into())
                }));
            };
            if c.outstanding.len() <= limit {
                return Ok((c.outstanding.len(), !std::mem::take(&mut c.nacked)));
            }
            if let Some(e) = closed {
                return Err(e);
            }
            let now = Instant::now();
            if now >= deadline {
                return Err(ClientError::Timeout);
            }
            st = self
                .changed
                .wait_timeout(st, deadline - now)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
    }

    /// Stops routing deliveries for a consumer (its handle was dropped); whether it was
    /// still active.
    pub(crate) fn forget_consumer(&self, channel: u16, tag: &str) -> bool {
        lock(&self.state)
            .channel_mut(channel)
            .is_some_and(|c| c.consumers.remove(tag).is_some())
    }

    /// Whether deliveries for `tag` are still routed (neither side cancelled it).
    pub(crate) fn has_consumer(&self, channel: u16, tag: &str) -> bool {
        lock(&self.state)
            .channels
            .get(&channel)
            .is_some_and(|c| c.consumers.contains_key(tag))
    }

    /// Sends a request whose reply nobody waits for (a cancel from a `Drop`): it gets a
    /// fresh request id so the reply is recognised and ignored.
    ///
    /// # Errors
    /// The channel's or connection's close error, or [`ClientError::Io`].
    pub(crate) fn send_untracked(&self, channel: u16, method: &Method) -> Result<(), ClientError> {
        let id = self.next_request_id();
        let mut w = lock(&self.writer);
        lock(&self.state).check_open(channel)?;
        w.send(channel, id, method).map_err(|e| self.io_failure(e))
    }

    /// How a channel the client is about to close stands: `None` while open;
    /// `Some(Ok(()))` when the server closed it in answer to a request, which already
    /// returned the error; `Some(Err(_))` when it closed for a reason no request returned
    /// (a failed publish or ack, the connection's close).
    pub(crate) fn closed_channel_status(&self, channel: u16) -> Option<Result<(), ClientError>> {
        let st = lock(&self.state);
        if st.closed.is_some() {
            return Some(Err(st.connection_error()));
        }
        let c = st.channels.get(&channel)?;
        let e = c.closed.as_ref()?;
        Some(if c.close_reported {
            Ok(())
        } else {
            Err(e.duplicate())
        })
    }

    /// Marks the connection dead: every pending request, channel and consumer fails with
    /// `why` (the first reason recorded wins).
    pub(crate) fn fail_connection(&self, why: ClientError) {
        lock(&self.state).fail_all(why);
        self.changed.notify_all();
    }

    /// Routes one method from the server. The caller answers a `close` or
    /// `channel.close` with `close-ok` (before routing it, holding the writer).
    pub(crate) fn route(&self, channel: u16, request_id: u32, method: Method) {
        lock(&self.state).route(channel, request_id, method);
        self.changed.notify_all();
    }
}

impl State {
    /// The connection's close reason (a generic one if none was recorded).
    pub(crate) fn connection_error(&self) -> ClientError {
        match &self.closed {
            Some(e) => e.duplicate(),
            None => ClientError::ConnectionClosed {
                code: 0,
                text: "connection closed".into(),
            },
        }
    }

    /// Fails when the connection, or `channel` (unless 0), is closed.
    fn check_open(&self, channel: u16) -> Result<(), ClientError> {
        if self.closed.is_some() {
            return Err(self.connection_error());
        }
        if channel == 0 {
            return Ok(());
        }
        match self.channels.get(&channel) {
            Some(c) => match &c.closed {
                Some(e) => Err(e.duplicate()),
                None => Ok(()),
            },
            None => Err(ClientError::ChannelClosed {
                code: 0,
                text: format!("channel {channel} is not open"),
            }),
        }
    }

    fn channel_mut(&mut self, channel: u16) -> Option<&mut ChannelState> {
        self.channels.get_mut(&channel)
    }

    /// Closes a channel: fails its pending requests and ends its consumers with `why`.
    fn close_channel(&mut self, channel: u16, why: ClientError) {
        let keys: Vec<(u16, u32)> = self
            .pending
            .keys()
            .filter(|(ch, _)| *ch == channel)
            .copied()
            .collect();
        for k in keys {
            if let Some(p) = self.pending.remove(&k) {
                let _ = p.tx.send(Err(why.duplicate()));
            }
        }
        if let Some(c) = self.channels.get_mut(&channel) {
            for (_, tx) in c.consumers.drain() {
                let _ = tx.send(ConsumerItem::Closed(why.duplicate()));
            }
            if c.closed.is_none() {
                c.closed = Some(why);
            }
        }
    }

    fn route(&mut self, channel: u16, request_id: u32, method: Method) {
        match method {
            Method::Close {
                reply_code,
                reply_text,
                ..
            } => {
                let why = ClientError::ConnectionClosed {
                    code: reply_code,
                    text: reply_text,
                };
                self.fail_all(why);
            }
            Method::ChannelClose {
                reply_code,
                reply_text,
                ..
            } => {
                let why = ClientError::ChannelClosed {
                    code: reply_code,
                    text: reply_text,
                };
                if channel == 0 {
                    // Not a channel: fail only the request it answers.
                    if let Some(p) = self.pending.remove(&(0, request_id)) {
                        let _ = p.tx.send(Err(why));
                    }
                } else {
                    let reported =
                        request_id != 0 && self.pending.contains_key(&(channel, request_id));
                    self.close_channel(channel, why);
                    if let Some(c) = self.channel_mut(channel) {
                        c.close_reported = reported;
                    }
                }
            }
            Method::Deliver { deliveries } => {
                if let Some(c) = self.channel_mut(channel) {
                    // One send per run of deliveries for the same consumer (a batch frame
                    // usually holds one run): the consumer takes them in order.
                    let same = deliveries
                        .iter()
                        .all(|d| d.consumer_tag == deliveries[0].consumer_tag);
                    if same {
                        c.route_deliveries(deliveries);
                    } else {
                        let mut run: Vec<Delivery> = Vec::new();
                        for d in deliveries {
                            if run
                                .first()
                                .is_some_and(|f| f.consumer_tag != d.consumer_tag)
                            {
                                c.route_deliveries(std::mem::take(&mut run));
                            }
                            run.push(d);
                        }
                        c.route_deliveries(run);
                    }
                }
            }
            Method::Return {
                reply_code,
                reply_text,
                exchange,
                routing_key,
                properties,
                body,
            } => {
                if let Some(c) = self.channel_mut(channel) {
                    let _ = c.returns.send(ReturnedMessage {
                        reply_code,
                        reply_text,
                        exchange,
                        routing_key,
                        properties: *properties,
                        body,
                    });
                }
            }
            Method::Ack {
                delivery_tag,
                multiple,
            } if request_id == 0 => {
                self.settle(channel, delivery_tag, multiple, false);
            }
            Method::Nack {
                delivery_tag,
                multiple,
                ..
            } if request_id == 0 => {
                self.settle(channel, delivery_tag, multiple, true);
            }
            Method::ConnectionBlocked { reason } if channel == 0 && request_id == 0 => {
                log::warn!("the server blocks this connection's publishes: {reason}");
                self.blocked = Some(reason);
            }
            Method::ConnectionUnblocked if channel == 0 && request_id == 0 => {
                log::info!("the server unblocked this connection's publishes");
                self.blocked = None;
            }
            Method::BasicCancel { consumer_tag }
                if !self.pending.contains_key(&(channel, request_id)) =>
            {
                self.end_consumer(channel, &consumer_tag);
            }
            reply => {
                self.reply(channel, request_id, reply);
            }
        }
    }

    fn fail_all(&mut self, why: ClientError) {
        if self.closed.is_none() {
            self.closed = Some(why);
        }
        let why = self.connection_error();
        for (_, p) in self.pending.drain() {
            let _ = p.tx.send(Err(why.duplicate()));
        }
        let channels: Vec<u16> = self.channels.keys().copied().collect();
        for ch in channels {
            self.close_channel(ch, why.duplicate());
        }
    }

    fn settle(&mut self, channel: u16, tag: u64, multiple: bool, nack: bool) {
        match self.channel_mut(channel).and_then(|c| c.confirms.as_mut()) {
            Some(c) => c.settle(tag, multiple, nack),
            None => log::debug!("confirm on channel {channel} without confirm mode"),
        }
    }

    fn end_consumer(&mut self, channel: u16, tag: &str) {
        if let Some(tx) = self
            .channel_mut(channel)
            .and_then(|c| c.consumers.remove(tag))
        {
            let _ = tx.send(ConsumerItem::Cancelled);
        }
    }

    /// Hands a reply to the request waiting for it, applying the request's hook.
    fn reply(&mut self, channel: u16, request_id: u32, reply: Method) {
        let key = match self.pending.contains_key(&(channel, request_id)) {
            true => Some((channel, request_id)),
            // A close-ok answers the pending close on its channel whatever its request id.
            false if reply == Method::CloseOk => self
                .pending
                .iter()
                .find(|((ch, _), p)| {
                    *ch == channel && matches!(p.method_id, CONNECTION_CLOSE_ID | CHANNEL_CLOSE_ID)
                })
                .map(|(k, _)| *k),
            false => None,
        };
        let Some(p) = key.and_then(|k| self.pending.remove(&k)) else {
            log::debug!(
                "ignoring {} on channel {channel} for request {request_id}: nothing waits for it",
                reply.name()
            );
            return;
        };
        match (p.hook, &reply) {
            (Hook::RegisterConsumer(tx), Method::BasicConsumeOk { consumer_tag }) => {
                if let Some(c) = self.channel_mut(channel) {
                    c.consumers.insert(consumer_tag.clone(), tx);
                }
            }
            (Hook::UnregisterConsumer(tag), Method::Ok | Method::BasicCancel { .. }) => {
                self.end_consumer(channel, &tag);
            }
            _ => {}
        }
        let _ = p.tx.send(Ok(reply));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn confirms_settle_single_and_multiple() {
        let mut c = Confirms {
            next_seq: 6,
            outstanding: (1..=5).collect(),
            nacked: false,
        };
        c.settle(3, false, false);
        assert_eq!(
            c.outstanding.iter().copied().collect::<Vec<_>>(),
            [1, 2, 4, 5]
        );
        c.settle(4, true, false);
        assert_eq!(c.outstanding.iter().copied().collect::<Vec<_>>(), [5]);
        assert!(!c.nacked);
        c.settle(5, false, true);
        assert!(c.outstanding.is_empty());
        assert!(c.nacked);
    }
}
