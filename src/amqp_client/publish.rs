//! Publishing: a `basic.publish` is a method frame, a content header frame and the body
//! frames (AMQP 0-9-1 §4.2.6). The first two depend only on the exchange, routing key
//! and properties, so a [`PreparedPublish`] encodes them once, with the header of a first
//! body frame after them. A body that fits one frame (the common case) is then one copy
//! of those bytes with the two sizes stamped in, the body and the end octet; a larger or
//! empty one takes the body frames from the codec. No allocation, one copy of the body
//! per message.

use super::connection::{check_short_str, Connection, WRITE_BUFFER_FLUSH_BYTES};
use super::error::AmqpClientError;
use crate::amqp::{
    write_body_frames, write_content_header, write_method, AmqpMethod, FrameType, BASIC_CLASS_ID,
    CONTENT_BODY_SIZE_AT, FRAME_END, FRAME_HEADER_BYTES, FRAME_OVERHEAD_BYTES,
};
use crate::types::BasicProperties;

/// The method and content header frames of publishes to one exchange and routing key
/// with one set of properties, encoded for one channel by
/// [`Connection::prepare_publish`].
#[derive(Clone, Debug)]
pub struct PreparedPublish {
    /// The `basic.publish` method frame, the content header frame (body size 0), then the
    /// header of a body frame (size 0), for a body that fits in one frame.
    frames: Vec<u8>,
    /// Bytes of `frames` before the body frame's header.
    head_bytes: usize,
    /// Offset of the content header's 8-byte body size in `frames`.
    body_size_at: usize,
    /// The channel the frames are encoded for.
    channel: u16,
}

impl PreparedPublish {
    /// The channel the frames were encoded for: the one in use when prepared.
    pub fn channel(&self) -> u16 {
        self.channel
    }
}

impl Connection {
    /// Encodes the frames of publishes to `exchange` (empty: the default exchange) with
    /// `routing_key` and `properties` on the channel in use. Neither mandatory nor
    /// immediate: this client does not read `basic.return`.
    ///
    /// # Errors
    /// [`AmqpClientError::Usage`] for an exchange name or routing key longer than 255
    /// bytes, or properties whose content header frame would exceed
    /// [`Connection::frame_max`] (AMQP 0-9-1 §4.2.6: the header is one frame).
    pub fn prepare_publish(
        &self,
        exchange: &str,
        routing_key: &str,
        properties: &BasicProperties,
    ) -> Result<PreparedPublish, AmqpClientError> {
        check_short_str("exchange name", exchange)?;
        check_short_str("routing key", routing_key)?;
        let mut frames = Vec::new();
        write_method(
            &mut frames,
            self.channel,
            &AmqpMethod::BasicPublish {
                exchange: exchange.into(),
                routing_key: routing_key.into(),
                mandatory: false,
                immediate: false,
            },
        );
        let header_at = frames.len();
        write_content_header(&mut frames, self.channel, BASIC_CLASS_ID, properties, 0);
        let header_bytes = frames.len() - header_at;
        if header_bytes > self.frame_max as usize {
            return Err(AmqpClientError::Usage(format!(
                "the properties make a content header frame of {header_bytes} bytes, over \
                 the frame_max of {} bytes",
                self.frame_max
            )));
        }
        let head_bytes = frames.len();
        let [c0, c1] = self.channel.to_be_bytes();
        frames.extend_from_slice(&[FrameType::Body as u8, c0, c1, 0, 0, 0, 0]);
        Ok(PreparedPublish {
            frames,
            head_bytes,
            body_size_at: header_at + FRAME_HEADER_BYTES + CONTENT_BODY_SIZE_AT,
            channel: self.channel,
        })
    }

    /// Appends a publish of `body` by `prepared` to the write buffer (in confirm mode,
    /// counted as unconfirmed). The buffer is written by [`Connection::flush`] (or the
    /// next request or read), or here once it passes [`WRITE_BUFFER_FLUSH_BYTES`]; a
    /// batch of publishes followed by one `flush` is one `write()`.
    ///
    /// # Errors
    /// [`AmqpClientError::Usage`] when `prepared` was encoded for another channel; as
    /// [`Connection::flush`] when the buffer is written.
    #[inline]
    pub fn publish(
        &mut self,
        prepared: &PreparedPublish,
        body: &[u8],
    ) -> Result<(), AmqpClientError> {
        if prepared.channel != self.channel {
            return Err(AmqpClientError::Usage(format!(
                "a publish prepared for channel {} on channel {}",
                prepared.channel, self.channel
            )));
        }
        let start = self.wbuf.len();
        let body_bytes = (body.len() as u64).to_be_bytes();
        let frame_body_max = (self.frame_max as usize).saturating_sub(FRAME_OVERHEAD_BYTES);
        if !body.is_empty() && body.len() <= frame_body_max {
            // One body frame: its header is the end of the prepared bytes.
            self.wbuf.extend_from_slice(&prepared.frames);
            let frame_bytes = (body.len() as u32).to_be_bytes();
            stamp(&mut self.wbuf, start + prepared.body_size_at, &body_bytes);
            // The body frame's size: after its type and channel.
            stamp(
                &mut self.wbuf,
                start + prepared.head_bytes + 3,
                &frame_bytes,
            );
            self.wbuf.extend_from_slice(body);
            self.wbuf.push(FRAME_END);
        } else {
            let head = prepared.frames.get(..prepared.head_bytes).unwrap_or(&[]);
            self.wbuf.extend_from_slice(head);
            stamp(&mut self.wbuf, start + prepared.body_size_at, &body_bytes);
            write_body_frames(&mut self.wbuf, self.channel, body, self.frame_max);
        }
        if let Some(w) = &mut self.confirms {
            w.published();
        }
        if self.wbuf.len() >= WRITE_BUFFER_FLUSH_BYTES {
            self.flush()?;
        }
        Ok(())
    }
}

/// Overwrites `buf[at..at + N]` with `bytes` (a size in prepared frames; `at` always lies
/// within them).
#[inline]
fn stamp<const N: usize>(buf: &mut [u8], at: usize, bytes: &[u8; N]) {
    if let Some(b) = buf.get_mut(at..at + N) {
        b.copy_from_slice(bytes);
    }
}
