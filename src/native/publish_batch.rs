//! `basic.publish` (0x0054) as the server reads it: the payload checked once and kept
//! whole, its messages read in place by the worker, so the I/O thread allocates one buffer
//! per batch instead of names and bodies per message (docs/architecture.md §4).
//!
//! The layout is the one [`Method::Publish`] decodes (docs/protocol.md §7): `u32` count,
//! then per message `sstr exchange, sstr routing_key, bool mandatory, properties,
//! lstr body`. Anything [`Method::decode`] refuses is refused here too; the caller then
//! reports `Method::decode`'s own error, so both paths name the same fault.

use crate::error::DecodeError;
use crate::limits::BATCH_ITEMS_MAX;
use crate::native::method::{Method, PublishMessage};
use crate::native::wire::{Record, Wire};
use crate::types::codec::Reader;
use crate::types::BasicProperties;

/// Method id of `basic.publish`.
pub const PUBLISH_METHOD_ID: u16 = 0x0054;

/// Offset of the first message in a publish payload: method id, request id, count.
const MESSAGES_AT: usize = 2 + 4 + 4;

/// Smallest encoded message, bytes: three lengths (1 + 1 + 4), mandatory, property flags
/// (9, the bound `Method::decode` uses too).
const MESSAGE_BYTES_MIN: usize = <Record as Wire<PublishMessage>>::BYTES_MIN;

/// A checked `basic.publish` payload.
#[derive(Debug, Clone, PartialEq)]
pub struct PublishBatch {
    payload: Vec<u8>,
    count: u32,
}

/// One message of a [`PublishBatch`], borrowed from its payload.
#[derive(Debug)]
pub struct PublishRef<'a> {
    /// Exchange name; empty is the default exchange.
    pub exchange: &'a str,
    /// Routing key.
    pub routing_key: &'a str,
    /// Return the message (312) when no queue takes it.
    pub mandatory: bool,
    /// Its properties, boxed; `None` when none is set (nothing allocated).
    pub properties: Option<Box<BasicProperties>>,
    /// Body bytes.
    pub body: &'a [u8],
}

impl PublishBatch {
    /// Checks a whole `basic.publish` payload (method id included) and keeps a copy;
    /// returns its request id and the batch.
    ///
    /// # Errors
    /// [`DecodeError`] for another method id or anything [`Method::decode`] would refuse
    /// (truncation, a count over [`BATCH_ITEMS_MAX`], non-UTF-8 names, bad properties,
    /// bytes left over); its text may differ from `Method::decode`'s.
    pub fn decode(payload: &[u8]) -> Result<(u32, PublishBatch), DecodeError> {
        let mut r = Reader::new(payload);
        if r.u16("method id")? != PUBLISH_METHOD_ID {
            return Err(DecodeError::new("not a basic.publish payload"));
        }
        let request_id = r.u32("request id")?;
        let count = r.u32("message count")?;
        if count as usize > r.remaining() / MESSAGE_BYTES_MIN || count as usize > BATCH_ITEMS_MAX {
            return Err(DecodeError::new("publish batch over its limit"));
        }
        for _ in 0..count {
            read_message(&mut r)?;
        }
        if !r.is_empty() {
            return Err(DecodeError::new("bytes left over after basic.publish"));
        }
        Ok((
            request_id,
            PublishBatch {
                payload: payload.to_vec(),
                count,
            },
        ))
    }

    /// Messages in the batch.
    pub fn len(&self) -> usize {
        self.count as usize
    }

    /// Whether the batch holds no message.
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// Payload size in bytes (for the mailbox budget).
    pub fn payload_len(&self) -> usize {
        self.payload.len()
    }

    /// The messages in order. Each was checked by [`PublishBatch::decode`], so the
    /// iterator yields exactly [`PublishBatch::len`] of them.
    pub fn messages(&self) -> impl Iterator<Item = PublishRef<'_>> + '_ {
        let mut r = Reader::new(&self.payload[MESSAGES_AT.min(self.payload.len())..]);
        (0..self.count).map_while(move |_| read_message(&mut r).ok())
    }

    /// The batch as the general [`Method`] (names and bodies copied per message), for
    /// the rare paths that handle it like any other method (a publish on a channel that
    /// is not open, before `connection.open`).
    ///
    /// # Errors
    /// None in practice: the payload was checked by [`PublishBatch::decode`].
    pub fn into_method(self) -> Result<Method, DecodeError> {
        Method::decode(&self.payload).map(|(_, m)| m)
    }
}

fn read_message<'a>(r: &mut Reader<'a>) -> Result<PublishRef<'a>, DecodeError> {
    Ok(PublishRef {
        exchange: r.short_str("exchange")?,
        routing_key: r.short_str("routing_key")?,
        mandatory: r.bool("mandatory")?,
        properties: BasicProperties::decode_boxed(r)?,
        body: r.long_bytes("body")?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::native::method::PublishMessage;

    fn payload(messages: Vec<PublishMessage>) -> Vec<u8> {
        let mut out = Vec::new();
        Method::Publish { messages }.encode(42, &mut out);
        out
    }

    fn message(key: &str, body: &[u8]) -> PublishMessage {
        PublishMessage {
            exchange: "x".into(),
            routing_key: key.into(),
            mandatory: key == "m",
            properties: BasicProperties {
                delivery_mode: (key == "p").then_some(2),
                ..Default::default()
            },
            body: body.to_vec(),
        }
    }

    #[test]
    fn reads_what_method_publish_encodes() {
        let sent = vec![
            message("a", b"1"),
            message("m", b""),
            message("p", &[9; 300]),
        ];
        let (request_id, batch) = PublishBatch::decode(&payload(sent.clone())).unwrap();
        assert_eq!(request_id, 42);
        assert_eq!(batch.len(), 3);
        let got: Vec<PublishMessage> = batch
            .messages()
            .map(|m| PublishMessage {
                exchange: m.exchange.into(),
                routing_key: m.routing_key.into(),
                mandatory: m.mandatory,
                properties: m.properties.map(|p| *p).unwrap_or_default(),
                body: m.body.to_vec(),
            })
            .collect();
        assert_eq!(got, sent);
        assert_eq!(
            batch.into_method().unwrap(),
            Method::Publish { messages: sent }
        );
    }

    #[test]
    fn refuses_whatever_method_decode_refuses() {
        let good = payload(vec![message("a", b"12345"), message("p", b"6")]);
        for cut in 0..good.len() {
            assert!(PublishBatch::decode(&good[..cut]).is_err(), "cut at {cut}");
            assert!(Method::decode(&good[..cut]).is_err());
        }
        let mut extra = good.clone();
        extra.push(0);
        assert!(PublishBatch::decode(&extra).is_err());
        let mut bad_utf8 = good.clone();
        // The exchange name "x" of the first message.
        bad_utf8[MESSAGES_AT + 1] = 0xff;
        assert!(PublishBatch::decode(&bad_utf8).is_err());
        assert!(Method::decode(&bad_utf8).is_err());
        let mut huge = payload(vec![]);
        huge[MESSAGES_AT - 4..MESSAGES_AT].copy_from_slice(&u32::MAX.to_be_bytes());
        assert!(PublishBatch::decode(&huge).is_err());
        let mut other = Vec::new();
        Method::ChannelOpen.encode(1, &mut other);
        assert!(PublishBatch::decode(&other).is_err());
    }
}
