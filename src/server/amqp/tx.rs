//! AMQP 0-9-1 transactions (`tx.select`, `tx.commit`, `tx.rollback`; AMQP 0-9-1 §1.9 class
//! `tx`, with RabbitMQ's semantics): on a transactional channel, publishes and
//! acknowledgements are held until `tx.commit` applies them in order, or `tx.rollback`
//! drops them. Unacked deliveries stay unacked on rollback, as in RabbitMQ.
//!
//! A channel is in at most one of tx and confirm mode (RabbitMQ refuses to switch, 406).
//! What a transaction holds is bounded by [`TX_PENDING_BYTES_MAX`].

use crate::error::{BrokerError, ReplyCode};
use crate::server::amqp::event::Content;
use std::collections::HashMap;

/// Body bytes (plus a fixed cost per operation) one channel's open transaction may hold;
/// past it the publish that would exceed it is a channel error 406.
pub const TX_PENDING_BYTES_MAX: usize = 64 * 1024 * 1024;

/// What an acknowledgement, publish or operation costs against the bound, in bytes, besides
/// a body.
const TX_OP_BYTES: usize = 128;

/// One held operation.
#[derive(Debug)]
pub enum TxOp {
    /// A `basic.publish` with its content.
    Publish {
        /// Exchange name.
        exchange: String,
        /// Routing key.
        routing_key: String,
        /// `mandatory` flag.
        mandatory: bool,
        /// Properties and body.
        content: Box<Content>,
    },
    /// A `basic.ack`.
    Ack {
        /// Delivery tag.
        delivery_tag: u64,
        /// Up to and including the tag.
        multiple: bool,
    },
    /// A `basic.nack` (or `basic.reject`, with `multiple` false).
    Nack {
        /// Delivery tag.
        delivery_tag: u64,
        /// Up to and including the tag.
        multiple: bool,
        /// Requeue rather than drop or dead-letter.
        requeue: bool,
    },
}

/// The tx state of a connection's channels.
#[derive(Debug, Default)]
pub struct Transactions {
    /// Transactional channels and their held operations with the bytes they cost.
    channels: HashMap<u16, (Vec<TxOp>, usize)>,
}

impl Transactions {
    /// Whether `ch` is transactional.
    pub fn is_transactional(&self, ch: u16) -> bool {
        self.channels.contains_key(&ch)
    }

    /// `tx.select`: makes `ch` transactional (again: nothing changes).
    ///
    /// # Errors
    /// 406 PRECONDITION_FAILED when the channel is in confirm mode (RabbitMQ's text).
    pub fn select(&mut self, ch: u16, confirm_mode: bool) -> Result<(), BrokerError> {
        if confirm_mode {
            return Err(BrokerError::precondition(
                "cannot switch from confirm to tx mode",
            ));
        }
        self.channels.entry(ch).or_default();
        Ok(())
    }

    /// Holds an operation of transactional channel `ch` until commit.
    ///
    /// # Errors
    /// 406 PRECONDITION_FAILED when the transaction would hold more than
    /// [`TX_PENDING_BYTES_MAX`].
    pub fn hold(&mut self, ch: u16, op: TxOp) -> Result<(), BrokerError> {
        let (ops, bytes) = self.channels.entry(ch).or_default();
        let cost = TX_OP_BYTES
            + match &op {
                TxOp::Publish { content, .. } => content.body.len(),
                _ => 0,
            };
        if *bytes + cost > TX_PENDING_BYTES_MAX {
            return Err(BrokerError::precondition(format!(
                "transaction too large: it would hold more than {TX_PENDING_BYTES_MAX} bytes; \
                 commit more often"
            )));
        }
        *bytes += cost;
        ops.push(op);
        Ok(())
    }

    /// `tx.commit`: the held operations of `ch`, in order (the channel stays
    /// transactional).
    ///
    /// # Errors
    /// 406 PRECONDITION_FAILED "channel is not transactional" (RabbitMQ's text).
    pub fn commit(&mut self, ch: u16) -> Result<Vec<TxOp>, BrokerError> {
        let (ops, bytes) = self.channels.get_mut(&ch).ok_or_else(not_transactional)?;
        *bytes = 0;
        Ok(std::mem::take(ops))
    }

    /// `tx.rollback`: drops the held operations of `ch`.
    ///
    /// # Errors
    /// 406 PRECONDITION_FAILED "channel is not transactional".
    pub fn rollback(&mut self, ch: u16) -> Result<(), BrokerError> {
        let (ops, bytes) = self.channels.get_mut(&ch).ok_or_else(not_transactional)?;
        ops.clear();
        *bytes = 0;
        Ok(())
    }

    /// The channel closed: its transaction is dropped.
    pub fn forget(&mut self, ch: u16) {
        self.channels.remove(&ch);
    }
}

fn not_transactional() -> BrokerError {
    BrokerError::new(
        ReplyCode::PreconditionFailed,
        "channel is not transactional",
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn publish(body: usize) -> TxOp {
        TxOp::Publish {
            exchange: String::new(),
            routing_key: "q".into(),
            mandatory: false,
            content: Box::new(Content {
                properties: None,
                body: vec![0; body],
            }),
        }
    }

    #[test]
    fn commit_returns_what_was_held_in_order_and_rollback_drops_it() {
        let mut tx = Transactions::default();
        assert!(!tx.is_transactional(1));
        assert_eq!(
            tx.commit(1).unwrap_err().text,
            "channel is not transactional"
        );
        tx.select(1, false).unwrap();
        tx.hold(1, publish(3)).unwrap();
        tx.hold(
            1,
            TxOp::Ack {
                delivery_tag: 7,
                multiple: false,
            },
        )
        .unwrap();
        let ops = tx.commit(1).unwrap();
        assert!(matches!(
            ops[..],
            [
                TxOp::Publish { .. },
                TxOp::Ack {
                    delivery_tag: 7,
                    ..
                }
            ]
        ));
        assert!(tx.commit(1).unwrap().is_empty());
        tx.hold(1, publish(1)).unwrap();
        tx.rollback(1).unwrap();
        assert!(tx.commit(1).unwrap().is_empty());
        tx.forget(1);
        assert!(!tx.is_transactional(1));
    }

    #[test]
    fn confirm_channels_cannot_become_transactional_and_size_is_bounded() {
        let mut tx = Transactions::default();
        assert_eq!(
            tx.select(2, true).unwrap_err().text,
            "cannot switch from confirm to tx mode"
        );
        tx.select(3, false).unwrap();
        tx.hold(3, publish(TX_PENDING_BYTES_MAX / 2)).unwrap();
        let e = tx.hold(3, publish(TX_PENDING_BYTES_MAX / 2)).unwrap_err();
        assert_eq!(e.code, ReplyCode::PreconditionFailed);
        // A commit frees the room.
        tx.commit(3).unwrap();
        tx.hold(3, publish(TX_PENDING_BYTES_MAX / 2)).unwrap();
    }
}
