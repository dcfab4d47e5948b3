//! A connection's outbound buffer: workers append encoded frames, the I/O thread writes
//! them to the socket.
//!
//! The I/O thread swaps the whole buffer out under the lock and writes it without the
//! lock, so appenders never wait on a socket. `queued` counts bytes appended and not yet
//! written (in the buffer or in the I/O thread's hands); deliveries stop above
//! [`OUTBOUND_HIGH_WATER_BYTES`], and a connection whose backlog reaches its hard cap
//! (`--max-outbound-bytes`, [`crate::limits::Limits::outbound_hard_cap_bytes`]) is
//! disconnected (docs/architecture.md §7).

use crate::limits::{BATCH_ITEMS_MAX, DIRECT_REPLY_BACKLOG_DIVISOR};
use crate::limits::{OUTBOUND_HIGH_WATER_BYTES, OUTBOUND_LOW_WATER_BYTES};
use crate::native::frame::{write_method, FRAME_HEADER_BYTES};
use crate::server::notifier::Notifier;
use crate::types::codec::put_u32;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

/// The bytes not yet taken by the I/O thread, and the batch frame they end with.
#[derive(Default)]
struct Pending {
    bytes: Vec<u8>,
    open_batch: Option<OpenBatch>,
}

/// The last frame of [`Pending::bytes`], a batch that more items may join.
struct OpenBatch {
    /// Offset of its frame header.
    frame_at: usize,
    channel: u16,
    /// Items in it so far.
    count: u32,
}

/// The outbound side of one connection.
pub struct Outbound {
    id: u64,
    /// Backlog at which the connection is disconnected, bytes.
    hard_cap: usize,
    buf: Mutex<Pending>,
    queued: AtomicUsize,
    /// The id is on the notifier's list (avoids listing it once per append).
    dirty: AtomicBool,
    /// A delivery was held back for saturation: report the drain.
    throttled: AtomicBool,
    /// The hard cap was reached; appends are dropped and the connection is closed.
    overflowed: AtomicBool,
    /// Close the socket once everything appended so far is written.
    close_after_flush: AtomicBool,
    notifier: Arc<Notifier>,
}

impl Outbound {
    /// An empty outbound buffer for connection `id` that disconnects its client once
    /// `hard_cap_bytes` are waiting (the I/O thread passes
    /// [`crate::limits::Limits::outbound_hard_cap_bytes`] of the limits in force at accept).
    pub fn new(id: u64, notifier: Arc<Notifier>, hard_cap_bytes: usize) -> Outbound {
        Outbound {
            id,
            hard_cap: hard_cap_bytes,
            buf: Mutex::new(Pending::default()),
            queued: AtomicUsize::new(0),
            dirty: AtomicBool::new(false),
            throttled: AtomicBool::new(false),
            overflowed: AtomicBool::new(false),
            close_after_flush: AtomicBool::new(false),
            notifier,
        }
    }

    /// Appends bytes produced by `encode` and wakes the I/O thread if needed. Dropped when
    /// the connection is closing or over its hard cap.
    pub fn write_with(&self, encode: impl FnOnce(&mut Vec<u8>)) {
        self.append(|pending| {
            pending.open_batch = None;
            encode(&mut pending.bytes);
        });
    }

    /// Appends the bytes of one direct reply produced by `encode` unless they would take
    /// the backlog past the hard cap divided by [`DIRECT_REPLY_BACKLOG_DIVISOR`]; returns
    /// whether they were appended. A refused reply is taken back whole, under the buffer's
    /// lock (no partial frame is left), and does not mark the connection overflowed.
    pub fn write_reply_with(&self, encode: impl FnOnce(&mut Vec<u8>)) -> bool {
        let limit = self.hard_cap / DIRECT_REPLY_BACKLOG_DIVISOR;
        self.append_within(Some(limit), |pending| {
            pending.open_batch = None;
            encode(&mut pending.bytes);
        })
    }

    /// Appends one item of a batch frame on `channel` (the native `basic.deliver`): joins
    /// the last frame of the buffer when it is an open batch of the same channel and the
    /// item still fits in `frame_max` bytes and in [`BATCH_ITEMS_MAX`] items, else starts a
    /// new frame with `batch_head` (method id and request id) and a count of 1.
    ///
    /// `encode_item` may run twice (the second time into a new frame) when the item does
    /// not fit the open frame. Only frames still in the buffer are joined: the I/O thread's
    /// `take` closes the batch, so joining never delays a write.
    pub fn write_batch_item(
        &self,
        channel: u16,
        frame_max: u32,
        batch_head: &[u8],
        encode_item: impl Fn(&mut Vec<u8>),
    ) {
        self.append(|pending| {
            let bytes = &mut pending.bytes;
            if let Some(open) = pending.open_batch.as_mut() {
                if open.channel == channel && (open.count as usize) < BATCH_ITEMS_MAX {
                    let before = bytes.len();
                    encode_item(bytes);
                    let frame_len = bytes.len() - open.frame_at;
                    if frame_len <= frame_max as usize {
                        open.count += 1;
                        let size = (frame_len - FRAME_HEADER_BYTES) as u32;
                        bytes[open.frame_at..open.frame_at + 4]
                            .copy_from_slice(&size.to_be_bytes());
                        let count_at = open.frame_at + FRAME_HEADER_BYTES + batch_head.len();
                        bytes[count_at..count_at + 4].copy_from_slice(&open.count.to_be_bytes());
                        return;
                    }
                    bytes.truncate(before);
                }
            }
            let frame_at = bytes.len();
            write_method(bytes, channel, frame_max, |b| {
                b.extend_from_slice(batch_head);
                put_u32(b, 1);
                encode_item(b);
            });
            // A split payload (one item larger than a frame) is not joined.
            pending.open_batch =
                (bytes.len() - frame_at <= frame_max as usize).then_some(OpenBatch {
                    frame_at,
                    channel,
                    count: 1,
                });
        });
    }

    /// Runs `f` on the pending buffer under its lock, accounts the bytes it added, drops
    /// them when they take the backlog over the hard cap, and marks the connection.
    fn append(&self, f: impl FnOnce(&mut Pending)) {
        self.append_within(None, f);
    }

    /// As [`Outbound::append`]; with a `limit` (bytes, below the hard cap), bytes that
    /// would take the backlog past it are taken back and false returned, the connection
    /// left as it was. Also false when the connection is closing or overflowed.
    fn append_within(&self, limit: Option<usize>, f: impl FnOnce(&mut Pending)) -> bool {
        if self.overflowed.load(Ordering::Relaxed) || self.close_after_flush.load(Ordering::Relaxed)
        {
            return false;
        }
        {
            let mut pending = self.buf.lock().unwrap_or_else(|e| e.into_inner());
            let before = pending.bytes.len();
            f(&mut pending);
            let added = pending.bytes.len() - before;
            let queued = self.queued.fetch_add(added, Ordering::SeqCst) + added;
            if limit.is_some_and(|limit| queued > limit) {
                pending.bytes.truncate(before);
                self.queued.fetch_sub(added, Ordering::AcqRel);
                return false;
            }
            if queued > self.hard_cap {
                pending.bytes.truncate(before);
                pending.open_batch = None;
                self.queued.fetch_sub(added, Ordering::AcqRel);
                self.overflowed.store(true, Ordering::Release);
                drop(pending);
                // Marked directly: `dirty` may stay set while a write is stuck.
                self.notifier.mark(self.id);
                return false;
            }
        }
        self.mark();
        true
    }

    fn mark(&self) {
        if !self.dirty.swap(true, Ordering::SeqCst) {
            self.notifier.mark(self.id);
        }
    }

    /// Swaps the pending bytes into `into` (which must be empty); I/O thread only. Until
    /// [`Outbound::finish_write`], appends do not wake the I/O thread: it looks again
    /// when it has written what it took.
    pub fn take(&self, into: &mut Vec<u8>) {
        self.dirty.store(true, Ordering::SeqCst);
        let mut pending = self.buf.lock().unwrap_or_else(|e| e.into_inner());
        pending.open_batch = None;
        std::mem::swap(&mut pending.bytes, into);
    }

    /// Called by the I/O thread once everything it took is written: true when more was
    /// appended meanwhile (the caller comes back for it without a wake-up), false when the
    /// buffer is empty (the next append wakes the I/O thread).
    pub fn finish_write(&self) -> bool {
        self.dirty.store(false, Ordering::SeqCst);
        // An append that saw `dirty` set before the store above had already counted its
        // bytes: it is seen here. One that comes later sees `dirty` clear and marks.
        if self.queued.load(Ordering::SeqCst) > 0 {
            self.dirty.store(true, Ordering::SeqCst);
            return true;
        }
        false
    }

    /// Records `n` bytes written to the socket. Returns true when a throttled connection
    /// just fell below `low_water` bytes (its consumers must be dispatched again).
    pub fn wrote(&self, n: usize, low_water: usize) -> bool {
        let left = self.queued.fetch_sub(n, Ordering::SeqCst) - n;
        left < low_water && self.throttled.swap(false, Ordering::SeqCst)
    }

    /// Bytes appended and not yet written.
    pub fn queued(&self) -> usize {
        self.queued.load(Ordering::Acquire)
    }

    /// Whether deliveries must wait: the backlog reached the high-water mark and has not
    /// yet drained below the low-water mark (hysteresis, so a consumer near the mark does
    /// not flap). When true the drain will be reported by [`Outbound::wrote`].
    pub fn is_saturated(&self) -> bool {
        if self.throttled.load(Ordering::SeqCst) {
            return true;
        }
        if self.queued.load(Ordering::SeqCst) < OUTBOUND_HIGH_WATER_BYTES {
            return false;
        }
        self.throttled.store(true, Ordering::SeqCst);
        // The I/O thread may have drained below the low-water mark between the read above
        // and the store, without seeing the flag: then no drain would ever be reported.
        if self.queued.load(Ordering::SeqCst) < OUTBOUND_LOW_WATER_BYTES
            && self.throttled.swap(false, Ordering::SeqCst)
        {
            return false;
        }
        true
    }

    /// Whether the hard cap was reached.
    pub fn is_overflowed(&self) -> bool {
        self.overflowed.load(Ordering::Acquire)
    }

    /// Asks the I/O thread to close the connection once what is queued is written.
    pub fn close_after_flush(&self) {
        self.close_after_flush.store(true, Ordering::Release);
        self.notifier.mark(self.id);
    }

    /// Whether a close after flush was asked for.
    pub fn is_closing(&self) -> bool {
        self.close_after_flush.load(Ordering::Acquire)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::native::frame;
    use crate::native::Method;

    const FRAME_MAX: u32 = 4096;
    const HEAD: [u8; 6] = [0x00, 0x56, 0, 0, 0, 0];

    fn outbound() -> (Outbound, mio::Poll) {
        let poll = mio::Poll::new().unwrap();
        let waker = mio::Waker::new(poll.registry(), mio::Token(0)).unwrap();
        (
            Outbound::new(1, Arc::new(Notifier::new(waker)), 64 << 20),
            poll,
        )
    }

    fn delivery(out: &Outbound, channel: u16, tag: u64, body: &[u8]) {
        out.write_batch_item(channel, FRAME_MAX, &HEAD, |b| {
            crate::native::method::encode_delivery(
                b,
                "ctag",
                tag,
                false,
                "",
                "q",
                &Default::default(),
                body,
            );
        });
    }

    /// (channel, delivery tags) of each frame in `bytes`.
    fn frames(mut bytes: &[u8]) -> Vec<(u16, Vec<u64>)> {
        let mut out = Vec::new();
        while !bytes.is_empty() {
            let (header, n) = frame::check(bytes, FRAME_MAX)
                .unwrap()
                .expect("whole frame");
            let (_, method) = Method::decode(&bytes[FRAME_HEADER_BYTES..n]).unwrap();
            let Method::Deliver { deliveries } = method else {
                panic!("not a delivery: {method:?}")
            };
            out.push((
                header.channel,
                deliveries.iter().map(|d| d.delivery_tag).collect(),
            ));
            bytes = &bytes[n..];
        }
        out
    }

    fn taken(out: &Outbound) -> Vec<u8> {
        let mut bytes = Vec::new();
        out.take(&mut bytes);
        bytes
    }

    #[test]
    fn a_direct_reply_past_half_the_hard_cap_is_refused_and_nothing_else_changes() {
        let poll = mio::Poll::new().unwrap();
        let waker = mio::Waker::new(poll.registry(), mio::Token(0)).unwrap();
        let hard_cap = 4096;
        let out = Outbound::new(1, Arc::new(Notifier::new(waker)), hard_cap);
        let limit = hard_cap / DIRECT_REPLY_BACKLOG_DIVISOR;
        assert!(out.write_reply_with(|b| b.extend_from_slice(&[1; 1000])));
        assert!(out.write_reply_with(|b| b.extend_from_slice(&[2; 1000])));
        assert!(
            !out.write_reply_with(|b| b.extend_from_slice(&[3; 1000])),
            "3000 bytes would pass the reply limit of {limit}"
        );
        assert_eq!(out.queued(), 2000, "the refused reply is taken back");
        assert!(
            !out.is_overflowed(),
            "a refused reply does not close the connection"
        );
        // Other pushes still go up to the hard cap.
        out.write_with(|b| b.extend_from_slice(&[4; 1000]));
        assert_eq!(out.queued(), 3000);
        let bytes = taken(&out);
        assert_eq!(bytes.len(), 3000);
        assert!(bytes[..1000].iter().all(|&b| b == 1) && bytes[2000..].iter().all(|&b| b == 4));
    }

    #[test]
    fn consecutive_deliveries_on_a_channel_share_a_frame() {
        let (out, _poll) = outbound();
        delivery(&out, 1, 1, b"a");
        delivery(&out, 1, 2, b"b");
        delivery(&out, 2, 1, b"c");
        delivery(&out, 1, 3, b"d");
        let bytes = taken(&out);
        assert_eq!(out.queued(), bytes.len());
        assert_eq!(
            frames(&bytes),
            vec![(1, vec![1, 2]), (2, vec![1]), (1, vec![3])]
        );
    }

    #[test]
    fn another_frame_or_a_take_closes_the_batch() {
        let (out, _poll) = outbound();
        delivery(&out, 1, 1, b"a");
        out.write_with(frame::write_heartbeat);
        delivery(&out, 1, 2, b"b");
        let bytes = taken(&out);
        // Heartbeat (8 bytes) between two one-delivery frames.
        let (_, first) = frame::check(&bytes, FRAME_MAX).unwrap().unwrap();
        assert_eq!(frames(&bytes[..first]), vec![(1, vec![1])]);
        assert_eq!(
            frames(&bytes[first + FRAME_HEADER_BYTES..]),
            vec![(1, vec![2])]
        );
        delivery(&out, 1, 3, b"c");
        assert_eq!(frames(&taken(&out)), vec![(1, vec![3])]);
    }

    #[test]
    fn a_batch_never_exceeds_the_frame_size() {
        let (out, _poll) = outbound();
        let body = vec![7u8; 1000];
        for tag in 1..=10 {
            delivery(&out, 1, tag, &body);
        }
        let bytes = taken(&out);
        let got = frames(&bytes);
        assert!(got.len() >= 3, "{} frames", got.len());
        let tags: Vec<u64> = got.iter().flat_map(|(_, t)| t.clone()).collect();
        assert_eq!(tags, (1..=10).collect::<Vec<_>>(), "all, in order");
        // A delivery larger than a frame is split, and nothing joins it.
        delivery(&out, 1, 11, &vec![1u8; 3 * FRAME_MAX as usize]);
        delivery(&out, 1, 12, b"x");
        let bytes = taken(&out);
        let mut reader = frame::FrameAssembler::new(1 << 20);
        let mut tags = Vec::new();
        let mut rest = &bytes[..];
        while !rest.is_empty() {
            let (header, n) = frame::check(rest, FRAME_MAX).unwrap().unwrap();
            if let Some(p) = reader.push(&header, &rest[FRAME_HEADER_BYTES..n]).unwrap() {
                let payload = match &p {
                    frame::Payload::Whole(_, p) => p.to_vec(),
                    frame::Payload::Joined(_, p) => p.clone(),
                    other => panic!("{other:?}"),
                };
                let (_, m) = Method::decode(&payload).unwrap();
                let Method::Deliver { deliveries } = m else {
                    panic!()
                };
                tags.push(
                    deliveries
                        .iter()
                        .map(|d| d.delivery_tag)
                        .collect::<Vec<_>>(),
                );
            }
            rest = &rest[n..];
        }
        assert_eq!(tags, vec![vec![11], vec![12]]);
    }

    #[test]
    fn appends_while_a_write_runs_are_deferred_not_woken() {
        let poll = mio::Poll::new().unwrap();
        let waker = mio::Waker::new(poll.registry(), mio::Token(0)).unwrap();
        let notifier = Arc::new(Notifier::new(waker));
        let out = Outbound::new(1, Arc::clone(&notifier), 64 << 20);
        let marked = |n: &Notifier| {
            let mut ids = Vec::new();
            n.take(&mut ids);
            ids
        };
        delivery(&out, 1, 1, b"a");
        assert_eq!(marked(&notifier), vec![1], "the first append marks");
        let mut writing = Vec::new();
        out.take(&mut writing);
        // Appended while the I/O thread writes what it took: no mark, no wake-up.
        delivery(&out, 1, 2, b"b");
        assert!(marked(&notifier).is_empty());
        out.wrote(writing.len(), 0);
        assert!(
            out.finish_write(),
            "more to write: the caller comes back for it"
        );
        writing.clear();
        out.take(&mut writing);
        out.wrote(writing.len(), 0);
        assert!(!out.finish_write(), "all written");
        delivery(&out, 1, 3, b"c");
        assert_eq!(
            marked(&notifier),
            vec![1],
            "an idle buffer's append marks again"
        );
    }
}
