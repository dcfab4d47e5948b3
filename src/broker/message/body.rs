//! A message body: small bodies inside the message itself, larger ones in one exact-size
//! heap allocation.
//!
//! A queued transient message is one `Arc<Message>` allocation; a body of up to
//! [`INLINE_BODY_BYTES_MAX`] bytes lives inside it, so it costs no allocation of its own
//! (a 16-byte body on the heap would cost a 32-byte malloc chunk and a pointer chase).
//! A larger body is a `Box<[u8]>`: no spare capacity, 16 bytes of pointer and length.
//! Either way the body reads as a `&[u8]` ([`std::ops::Deref`]).

use std::fmt;
use std::ops::Deref;

/// Largest body kept inline, in bytes: what fits next to the length byte and the variant
/// tag in the 24 bytes a `Box<[u8]>` and its tag take anyway.
pub const INLINE_BODY_BYTES_MAX: usize = 22;

/// Body bytes of a message; derefs to `[u8]`. 24 bytes whatever the body size (a test
/// checks it).
#[derive(Clone, PartialEq, Eq)]
pub struct MessageBody(Repr);

#[derive(Clone)]
enum Repr {
    /// `bytes[..len]` is the body.
    Inline {
        len: u8,
        bytes: [u8; INLINE_BODY_BYTES_MAX],
    },
    /// A body over [`INLINE_BODY_BYTES_MAX`] bytes.
    Heap(Box<[u8]>),
}

impl PartialEq for Repr {
    fn eq(&self, other: &Repr) -> bool {
        self.as_slice() == other.as_slice()
    }
}

impl Eq for Repr {}

impl Repr {
    fn as_slice(&self) -> &[u8] {
        match self {
            Repr::Inline { len, bytes } => &bytes[..usize::from(*len)],
            Repr::Heap(b) => b,
        }
    }

    /// An inline body when `bytes` fits.
    fn inline(bytes: &[u8]) -> Option<Repr> {
        let len = u8::try_from(bytes.len())
            .ok()
            .filter(|&l| usize::from(l) <= INLINE_BODY_BYTES_MAX)?;
        let mut inline = [0u8; INLINE_BODY_BYTES_MAX];
        inline[..bytes.len()].copy_from_slice(bytes);
        Some(Repr::Inline { len, bytes: inline })
    }
}

impl MessageBody {
    /// The body bytes.
    pub fn as_slice(&self) -> &[u8] {
        self.0.as_slice()
    }

    /// Whether the body is held inside the message (no allocation of its own).
    pub fn is_inline(&self) -> bool {
        matches!(self.0, Repr::Inline { .. })
    }

    /// The body as a vector (a copy for an inline body, none for a heap one).
    pub fn into_vec(self) -> Vec<u8> {
        match self.0 {
            Repr::Inline { len, bytes } => bytes[..usize::from(len)].to_vec(),
            Repr::Heap(b) => b.into_vec(),
        }
    }
}

impl Default for MessageBody {
    fn default() -> MessageBody {
        MessageBody(Repr::Inline {
            len: 0,
            bytes: [0; INLINE_BODY_BYTES_MAX],
        })
    }
}

impl Deref for MessageBody {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        self.as_slice()
    }
}

impl AsRef<[u8]> for MessageBody {
    fn as_ref(&self) -> &[u8] {
        self.as_slice()
    }
}

impl From<&[u8]> for MessageBody {
    /// Copies `bytes`: inline when small, else into an exact-size allocation.
    fn from(bytes: &[u8]) -> MessageBody {
        MessageBody(Repr::inline(bytes).unwrap_or_else(|| Repr::Heap(bytes.into())))
    }
}

impl<const N: usize> From<&[u8; N]> for MessageBody {
    /// Copies `bytes` (as `From<&[u8]>`).
    fn from(bytes: &[u8; N]) -> MessageBody {
        MessageBody::from(&bytes[..])
    }
}

impl From<Vec<u8>> for MessageBody {
    /// Takes the vector's buffer for a large body (shrunk to its length), copies a small one.
    fn from(bytes: Vec<u8>) -> MessageBody {
        MessageBody(Repr::inline(&bytes).unwrap_or_else(|| Repr::Heap(bytes.into_boxed_slice())))
    }
}

impl fmt::Debug for MessageBody {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self.as_slice(), f)
    }
}

impl PartialEq<[u8]> for MessageBody {
    fn eq(&self, other: &[u8]) -> bool {
        self.as_slice() == other
    }
}

impl PartialEq<&[u8]> for MessageBody {
    fn eq(&self, other: &&[u8]) -> bool {
        self.as_slice() == *other
    }
}

impl<const N: usize> PartialEq<&[u8; N]> for MessageBody {
    fn eq(&self, other: &&[u8; N]) -> bool {
        self.as_slice() == &other[..]
    }
}

impl PartialEq<Vec<u8>> for MessageBody {
    fn eq(&self, other: &Vec<u8>) -> bool {
        self.as_slice() == other.as_slice()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_body_costs_24_bytes_of_message() {
        assert_eq!(std::mem::size_of::<MessageBody>(), 24);
    }

    #[test]
    fn small_bodies_are_inline_and_large_ones_exact() {
        for len in 0..=64usize {
            let bytes: Vec<u8> = (0..len as u8).collect();
            let from_slice = MessageBody::from(&bytes[..]);
            let from_vec = MessageBody::from(bytes.clone());
            assert_eq!(from_slice.is_inline(), len <= INLINE_BODY_BYTES_MAX);
            assert_eq!(from_vec.is_inline(), len <= INLINE_BODY_BYTES_MAX);
            assert_eq!(&*from_slice, &bytes[..]);
            assert_eq!(from_vec, bytes);
            assert_eq!(from_slice, from_vec);
            assert_eq!(from_slice.len(), len);
            assert_eq!(from_vec.clone().into_vec(), bytes);
        }
        assert!(MessageBody::default().is_empty());
        assert_eq!(MessageBody::from(b"abc"), b"abc");
        assert_ne!(MessageBody::from(b"abc"), MessageBody::from(b"abd"));
    }
}
