//! A hasher for maps keyed by channel number: one multiplication instead of SipHash.
//!
//! Channel numbers are small integers a client picks within `channel_max`, so there is no
//! flooding to defend against beyond what the channel limit already bounds, and the
//! session looks its channel up on every publish.

use std::hash::{BuildHasherDefault, Hasher};

/// Fibonacci hashing multiplier (2^64 / φ): spreads small keys over the high bits the
/// hash table probes with.
const FIBONACCI: u64 = 0x9E37_79B9_7F4A_7C15;

/// Hashes a channel number (or any small integer key) by multiplication.
#[derive(Default, Clone, Copy)]
pub struct ChannelHasher(u64);

impl Hasher for ChannelHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0 ^ u64::from(b)).wrapping_mul(FIBONACCI);
        }
    }

    fn write_u16(&mut self, n: u16) {
        self.0 = (self.0 ^ u64::from(n)).wrapping_mul(FIBONACCI);
    }
}

/// `BuildHasher` for [`ChannelHasher`].
pub type BuildChannelHasher = BuildHasherDefault<ChannelHasher>;

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    #[test]
    fn a_map_keyed_by_channel_number_finds_every_key() {
        let mut m: HashMap<u16, u32, BuildChannelHasher> = HashMap::default();
        for ch in 1..=2047u16 {
            m.insert(ch, u32::from(ch) * 3);
        }
        assert!((1..=2047u16).all(|ch| m[&ch] == u32::from(ch) * 3));
        assert_eq!(m.get(&0), None);
        let hashes: std::collections::HashSet<u64> = (1..=2047u16)
            .map(|ch| {
                let mut h = ChannelHasher::default();
                h.write_u16(ch);
                h.finish() >> 57
            })
            .collect();
        assert!(hashes.len() > 64, "the top bits vary: {}", hashes.len());
    }
}
