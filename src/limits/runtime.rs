//! The limits in force: [`Limits`], a plain value an operator sets (flags, environment or
//! the `--config` file, [`crate::config`]), and [`LiveLimits`], the broker's copy that every check reads
//! and that can be replaced while the server runs (one relaxed atomic load per check: no
//! lock on the publish path).
//!
//! Each value is read on its own, so a replacement is seen field by field; a check never
//! needs two of them to agree. What a connection negotiated at its handshake (frame size,
//! heartbeat, channel max) and the buffer caps taken at accept keep their values for the
//! life of that connection; counts (connections, queues, exchanges, consumers), names,
//! message sizes and the handshake deadline follow a change at once.

use super::{
    CHANNEL_MAX, CONNECTIONS_MAX, CONSUMERS_PER_CHANNEL_MAX_DEFAULT,
    EXCHANGES_PER_VHOST_MAX_DEFAULT, FRAME_BYTES_DEFAULT, FRAME_BYTES_MAX, FRAME_BYTES_MIN,
    HANDSHAKES_PENDING_MAX, HANDSHAKE_TIMEOUT_MS, HANDSHAKE_TIMEOUT_MS_MAX,
    HANDSHAKE_TIMEOUT_MS_MIN, HEARTBEAT_S_DEFAULT, MESSAGE_BODY_BYTES_MAX_DEFAULT,
    MESSAGE_BODY_BYTES_MAX_MAX, OUTBOUND_BYTES_MAX_MIN, OUTBOUND_HARD_CAP_BYTES,
    OUTBOUND_HIGH_WATER_BYTES, QUEUES_PER_VHOST_MAX_DEFAULT, SHORT_STRING_BYTES_MAX,
};
use std::fmt;
use std::sync::atomic::{AtomicU16, AtomicU32, AtomicU64, AtomicUsize, Ordering};

/// The operator's limits: one value per bound a client can reach, defaults from the
/// constants in [`crate::limits`]. Set by `relaymq-server`'s flags (the flag of each is
/// named on its field); docs/security.md §5 lists each with its error.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Open connections in total, both listeners together, in connections
    /// (`--max-connections`, 1..=[`CONNECTIONS_MAX`]). Reached: `connection.open` is
    /// refused with 530 NOT_ALLOWED.
    pub connections_max: usize,
    /// Open connections per authenticated user name, in connections
    /// (`--max-connections-per-user`, 1..=[`CONNECTIONS_MAX`]; RabbitMQ's user limit
    /// `max-connections`). Reached: 530 at `connection.open`.
    pub connections_per_user_max: usize,
    /// Channels per connection: the highest channel number the server offers and accepts
    /// (`--max-channels`, 1..=65535, default [`CHANNEL_MAX`]; RabbitMQ's `channel_max`).
    /// Above it: 530 NOT_ALLOWED, the connection is closed.
    pub channels_per_connection_max: u16,
    /// Queues per vhost, in queues (`--max-queues-per-vhost`; RabbitMQ's vhost limit
    /// `max-queues`). Reached: `queue.declare` of a new queue gets 406.
    pub queues_per_vhost_max: usize,
    /// Exchanges per vhost, not counting the default and `amq.*` ones, in exchanges
    /// (`--max-exchanges-per-vhost`). Reached: `exchange.declare` of a new one gets 406.
    pub exchanges_per_vhost_max: usize,
    /// Consumers per channel, in consumers (`--max-consumers-per-channel`; RabbitMQ's
    /// `consumer_max_per_channel`). Reached: `basic.consume` gets 406.
    pub consumers_per_channel_max: usize,
    /// Largest frame the server offers, header included, in bytes (`--frame-max`,
    /// [`FRAME_BYTES_MIN`]..=[`FRAME_BYTES_MAX`]). Over the negotiated value: 501
    /// FRAME_ERROR, the connection is closed.
    pub frame_bytes_max: u32,
    /// Largest message body accepted, in bytes (`--max-message-bytes`,
    /// 0..=[`MESSAGE_BODY_BYTES_MAX_MAX`]; RabbitMQ's `max_message_size`). Over it: 406,
    /// the channel is closed.
    pub message_bytes_max: usize,
    /// Longest exchange name, queue name or consumer tag a client may choose, in bytes
    /// (`--max-name-bytes`, 1..=[`SHORT_STRING_BYTES_MAX`], the AMQP `shortstr` limit).
    /// Over it: 406.
    pub name_bytes_max: usize,
    /// Time from accept to the end of the handshake (`open-ok`), in milliseconds
    /// (`--handshake-timeout-ms`, [`HANDSHAKE_TIMEOUT_MS_MIN`]..=[`HANDSHAKE_TIMEOUT_MS_MAX`];
    /// RabbitMQ's `handshake_timeout`). Passed: the socket is closed.
    pub handshake_timeout_ms: u64,
    /// Heartbeat interval the server offers, in seconds (`--heartbeat`, 0 = none). Two
    /// intervals without input: the socket is closed.
    pub heartbeat_s: u16,
    /// Bytes waiting for a client's socket at which the client is disconnected, in bytes
    /// (`--max-outbound-bytes`, at least [`OUTBOUND_BYTES_MAX_MIN`]); raised to
    /// [`Limits::outbound_hard_cap_bytes`] so a few of the largest messages always fit.
    pub outbound_bytes_max: usize,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            connections_max: CONNECTIONS_MAX,
            connections_per_user_max: CONNECTIONS_MAX,
            channels_per_connection_max: CHANNEL_MAX,
            queues_per_vhost_max: QUEUES_PER_VHOST_MAX_DEFAULT,
            exchanges_per_vhost_max: EXCHANGES_PER_VHOST_MAX_DEFAULT,
            consumers_per_channel_max: CONSUMERS_PER_CHANNEL_MAX_DEFAULT,
            frame_bytes_max: FRAME_BYTES_DEFAULT,
            message_bytes_max: MESSAGE_BODY_BYTES_MAX_DEFAULT,
            name_bytes_max: SHORT_STRING_BYTES_MAX,
            handshake_timeout_ms: HANDSHAKE_TIMEOUT_MS,
            heartbeat_s: HEARTBEAT_S_DEFAULT,
            outbound_bytes_max: OUTBOUND_HARD_CAP_BYTES,
        }
    }
}

/// A limit set out of its range.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LimitsError {
    /// The flag that sets it (`--max-connections`, …).
    pub flag: &'static str,
    /// What is allowed.
    pub text: String,
}

impl fmt::Display for LimitsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.flag, self.text)
    }
}

impl std::error::Error for LimitsError {}

/// `Err` naming `flag` unless `lo <= value <= hi`.
fn in_range<T: PartialOrd + fmt::Display>(
    flag: &'static str,
    value: T,
    lo: T,
    hi: T,
) -> Result<(), LimitsError> {
    if value < lo || value > hi {
        return Err(LimitsError {
            flag,
            text: format!("{value} is out of range: from {lo} to {hi}"),
        });
    }
    Ok(())
}

impl Limits {
    /// Checks every value against its range (documented on each field).
    ///
    /// # Errors
    /// The first value out of range, naming its flag.
    pub fn validate(&self) -> Result<(), LimitsError> {
        in_range(
            "--max-connections",
            self.connections_max,
            1,
            CONNECTIONS_MAX,
        )?;
        in_range(
            "--max-connections-per-user",
            self.connections_per_user_max,
            1,
            CONNECTIONS_MAX,
        )?;
        in_range(
            "--max-channels",
            self.channels_per_connection_max,
            1,
            u16::MAX,
        )?;
        in_range(
            "--frame-max",
            self.frame_bytes_max,
            FRAME_BYTES_MIN,
            FRAME_BYTES_MAX,
        )?;
        in_range(
            "--max-message-bytes",
            self.message_bytes_max,
            0,
            MESSAGE_BODY_BYTES_MAX_MAX,
        )?;
        in_range(
            "--max-name-bytes",
            self.name_bytes_max,
            1,
            SHORT_STRING_BYTES_MAX,
        )?;
        in_range(
            "--handshake-timeout-ms",
            self.handshake_timeout_ms,
            HANDSHAKE_TIMEOUT_MS_MIN,
            HANDSHAKE_TIMEOUT_MS_MAX,
        )?;
        in_range(
            "--max-outbound-bytes",
            self.outbound_bytes_max,
            OUTBOUND_BYTES_MAX_MIN,
            usize::MAX,
        )
    }

    /// The outbound cap a new connection gets, in bytes: `outbound_bytes_max`, raised to
    /// four of the largest messages plus the delivery high-water mark when that is more
    /// (several deliveries of the largest allowed message must always fit).
    pub fn outbound_hard_cap_bytes(&self) -> usize {
        self.outbound_bytes_max.max(
            self.message_bytes_max
                .saturating_mul(4)
                .saturating_add(OUTBOUND_HIGH_WATER_BYTES),
        )
    }
}

/// Part of the client sockets of the file-descriptor budget kept for sockets in their
/// handshake, as a divisor (1/8; at most [`HANDSHAKES_PENDING_MAX`]).
pub const SOCKETS_HANDSHAKE_DIVISOR: usize = 8;

/// Warns when `--max-connections` (`configured`) does not fit the connections the
/// file-descriptor budget allows (`budget`, of its `sockets` for clients), which then
/// apply instead.
fn warn_if_clamped(configured: usize, budget: usize, sockets: usize) {
    let kept = sockets.saturating_sub(budget);
    if configured > budget && configured == CONNECTIONS_MAX {
        // The default: not the operator's choice, so not a warning.
        log::info!(
            "at most {budget} client connections are open at once: the {sockets} client \
             sockets of the open-files limit less {kept} kept for connections in their \
             handshake (docs/operations.md, \"Open files\")"
        );
    } else if configured > budget {
        log::warn!(
            "max-connections {configured} does not fit the open-files limit: at most {budget} \
             client connections are open at once (its {sockets} client sockets less {kept} \
             kept for handshakes); raise ulimit -n / LimitNOFILE for more \
             (docs/operations.md, \"Open files\")"
        );
    }
}

/// The limits in force, shared by the broker, its vhosts and the server: each value an
/// atomic, read with one relaxed load, replaced with [`LiveLimits::store`] (a
/// configuration reload) without stopping anything.
#[derive(Debug)]
pub struct LiveLimits {
    connections_max: AtomicUsize,
    connections_per_user_max: AtomicUsize,
    channels_per_connection_max: AtomicU16,
    queues_per_vhost_max: AtomicUsize,
    exchanges_per_vhost_max: AtomicUsize,
    consumers_per_channel_max: AtomicUsize,
    frame_bytes_max: AtomicU32,
    message_bytes_max: AtomicUsize,
    name_bytes_max: AtomicUsize,
    handshake_timeout_ms: AtomicU64,
    heartbeat_s: AtomicU16,
    outbound_bytes_max: AtomicUsize,
    /// Client sockets the file-descriptor budget allows (`usize::MAX`: no budget), in
    /// sockets ([`crate::limits::FdBudget::sockets`]).
    sockets_budget: AtomicUsize,
}

impl Default for LiveLimits {
    fn default() -> LiveLimits {
        LiveLimits::new(Limits::default())
    }
}

impl LiveLimits {
    /// Live limits starting at `limits` (not validated: [`Limits::validate`] is the
    /// caller's, as the flags parser does).
    pub fn new(limits: Limits) -> LiveLimits {
        LiveLimits {
            connections_max: AtomicUsize::new(limits.connections_max),
            connections_per_user_max: AtomicUsize::new(limits.connections_per_user_max),
            channels_per_connection_max: AtomicU16::new(limits.channels_per_connection_max),
            queues_per_vhost_max: AtomicUsize::new(limits.queues_per_vhost_max),
            exchanges_per_vhost_max: AtomicUsize::new(limits.exchanges_per_vhost_max),
            consumers_per_channel_max: AtomicUsize::new(limits.consumers_per_channel_max),
            frame_bytes_max: AtomicU32::new(limits.frame_bytes_max),
            message_bytes_max: AtomicUsize::new(limits.message_bytes_max),
            name_bytes_max: AtomicUsize::new(limits.name_bytes_max),
            handshake_timeout_ms: AtomicU64::new(limits.handshake_timeout_ms),
            heartbeat_s: AtomicU16::new(limits.heartbeat_s),
            outbound_bytes_max: AtomicUsize::new(limits.outbound_bytes_max),
            sockets_budget: AtomicUsize::new(usize::MAX),
        }
    }

    /// Sets the client sockets the file-descriptor budget allows (once, at start):
    /// [`LiveLimits::connections_max`] never exceeds it less a part kept for sockets in
    /// their handshake ([`LiveLimits::connections_budget`]), whatever `--max-connections`
    /// says, and a warning names a configured value that does not fit.
    pub fn set_sockets_budget(&self, sockets: usize) {
        self.sockets_budget.store(sockets, Ordering::Relaxed);
        warn_if_clamped(
            self.connections_max.load(Ordering::Relaxed),
            self.connections_budget(),
            sockets,
        );
    }

    /// Open connections the file-descriptor budget allows, in connections: its client
    /// sockets less 1/`SOCKETS_HANDSHAKE_DIVISOR` (8) of them (between 1 and
    /// [`HANDSHAKES_PENDING_MAX`]) kept for sockets still in their handshake, so that a
    /// client past the limit completes its handshake and is told why (530 at
    /// `connection.open`, RabbitMQ's text) instead of finding its socket closed.
    /// `usize::MAX` without a budget.
    pub fn connections_budget(&self) -> usize {
        let sockets = self.sockets_budget();
        if sockets == usize::MAX {
            return usize::MAX;
        }
        let handshakes = (sockets / SOCKETS_HANDSHAKE_DIVISOR).clamp(1, HANDSHAKES_PENDING_MAX);
        sockets.saturating_sub(handshakes).max(1)
    }

    /// Client sockets the file-descriptor budget allows, in sockets (`usize::MAX`
    /// without a budget).
    #[inline]
    pub fn sockets_budget(&self) -> usize {
        self.sockets_budget.load(Ordering::Relaxed)
    }

    /// Client sockets open at once, handshaking ones included, past which a new one is
    /// closed at accept: `--max-connections` plus [`HANDSHAKES_PENDING_MAX`], within the
    /// file-descriptor budget.
    #[inline]
    pub fn sockets_max(&self) -> usize {
        self.connections_max
            .load(Ordering::Relaxed)
            .saturating_add(HANDSHAKES_PENDING_MAX)
            .min(self.sockets_budget())
    }

    /// Replaces every value (a configuration reload). Checks already under way finish with
    /// the old values; see the module doc for what existing connections keep.
    ///
    /// # Errors
    /// A value out of range ([`Limits::validate`]); nothing is changed then.
    pub fn store(&self, limits: &Limits) -> Result<(), LimitsError> {
        limits.validate()?;
        let r = Ordering::Relaxed;
        warn_if_clamped(
            limits.connections_max,
            self.connections_budget(),
            self.sockets_budget(),
        );
        self.connections_max.store(limits.connections_max, r);
        self.connections_per_user_max
            .store(limits.connections_per_user_max, r);
        self.channels_per_connection_max
            .store(limits.channels_per_connection_max, r);
        self.queues_per_vhost_max
            .store(limits.queues_per_vhost_max, r);
        self.exchanges_per_vhost_max
            .store(limits.exchanges_per_vhost_max, r);
        self.consumers_per_channel_max
            .store(limits.consumers_per_channel_max, r);
        self.frame_bytes_max.store(limits.frame_bytes_max, r);
        self.message_bytes_max.store(limits.message_bytes_max, r);
        self.name_bytes_max.store(limits.name_bytes_max, r);
        self.handshake_timeout_ms
            .store(limits.handshake_timeout_ms, r);
        self.heartbeat_s.store(limits.heartbeat_s, r);
        self.outbound_bytes_max.store(limits.outbound_bytes_max, r);
        Ok(())
    }

    /// A copy of every value (each read on its own).
    pub fn load(&self) -> Limits {
        Limits {
            connections_max: self.connections_max(),
            connections_per_user_max: self.connections_per_user_max(),
            channels_per_connection_max: self.channels_per_connection_max(),
            queues_per_vhost_max: self.queues_per_vhost_max(),
            exchanges_per_vhost_max: self.exchanges_per_vhost_max(),
            consumers_per_channel_max: self.consumers_per_channel_max(),
            frame_bytes_max: self.frame_bytes_max(),
            message_bytes_max: self.message_bytes_max(),
            name_bytes_max: self.name_bytes_max(),
            handshake_timeout_ms: self.handshake_timeout_ms(),
            heartbeat_s: self.heartbeat_s(),
            outbound_bytes_max: self.outbound_bytes_max(),
        }
    }

    /// [`Limits::connections_max`], in connections, clamped to what the file-descriptor
    /// budget allows ([`LiveLimits::connections_budget`]).
    #[inline]
    pub fn connections_max(&self) -> usize {
        self.connections_max
            .load(Ordering::Relaxed)
            .min(self.connections_budget())
    }

    /// [`Limits::connections_per_user_max`], in connections.
    #[inline]
    pub fn connections_per_user_max(&self) -> usize {
        self.connections_per_user_max.load(Ordering::Relaxed)
    }

    /// [`Limits::channels_per_connection_max`], a channel number.
    #[inline]
    pub fn channels_per_connection_max(&self) -> u16 {
        self.channels_per_connection_max.load(Ordering::Relaxed)
    }

    /// [`Limits::queues_per_vhost_max`], in queues.
    #[inline]
    pub fn queues_per_vhost_max(&self) -> usize {
        self.queues_per_vhost_max.load(Ordering::Relaxed)
    }

    /// [`Limits::exchanges_per_vhost_max`], in exchanges.
    #[inline]
    pub fn exchanges_per_vhost_max(&self) -> usize {
        self.exchanges_per_vhost_max.load(Ordering::Relaxed)
    }

    /// [`Limits::consumers_per_channel_max`], in consumers.
    #[inline]
    pub fn consumers_per_channel_max(&self) -> usize {
        self.consumers_per_channel_max.load(Ordering::Relaxed)
    }

    /// [`Limits::frame_bytes_max`], in bytes.
    #[inline]
    pub fn frame_bytes_max(&self) -> u32 {
        self.frame_bytes_max.load(Ordering::Relaxed)
    }

    /// [`Limits::message_bytes_max`], in bytes (read once per published message).
    #[inline]
    pub fn message_bytes_max(&self) -> usize {
        self.message_bytes_max.load(Ordering::Relaxed)
    }

    /// [`Limits::name_bytes_max`], in bytes.
    #[inline]
    pub fn name_bytes_max(&self) -> usize {
        self.name_bytes_max.load(Ordering::Relaxed)
    }

    /// [`Limits::handshake_timeout_ms`], in milliseconds.
    #[inline]
    pub fn handshake_timeout_ms(&self) -> u64 {
        self.handshake_timeout_ms.load(Ordering::Relaxed)
    }

    /// [`Limits::heartbeat_s`], in seconds.
    #[inline]
    pub fn heartbeat_s(&self) -> u16 {
        self.heartbeat_s.load(Ordering::Relaxed)
    }

    /// [`Limits::outbound_bytes_max`], in bytes.
    #[inline]
    pub fn outbound_bytes_max(&self) -> usize {
        self.outbound_bytes_max.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_valid_and_come_from_the_constants() {
        let l = Limits::default();
        l.validate().unwrap();
        assert_eq!(l.channels_per_connection_max, CHANNEL_MAX);
        assert_eq!(l.frame_bytes_max, FRAME_BYTES_DEFAULT);
        assert_eq!(l.outbound_bytes_max, OUTBOUND_HARD_CAP_BYTES);
        assert_eq!(l.name_bytes_max, 255);
    }

    #[test]
    fn out_of_range_values_name_their_flag() {
        let bad = [
            Limits {
                connections_max: 0,
                ..Limits::default()
            },
            Limits {
                name_bytes_max: 256,
                ..Limits::default()
            },
            Limits {
                frame_bytes_max: 100,
                ..Limits::default()
            },
            Limits {
                handshake_timeout_ms: 1,
                ..Limits::default()
            },
            Limits {
                outbound_bytes_max: 1024,
                ..Limits::default()
            },
        ];
        let flags: Vec<&str> = bad.iter().map(|l| l.validate().unwrap_err().flag).collect();
        assert_eq!(
            flags,
            [
                "--max-connections",
                "--max-name-bytes",
                "--frame-max",
                "--handshake-timeout-ms",
                "--max-outbound-bytes"
            ]
        );
    }

    #[test]
    fn a_store_replaces_every_value_and_a_bad_one_changes_nothing() {
        let live = LiveLimits::default();
        let new = Limits {
            connections_max: 7,
            queues_per_vhost_max: 3,
            heartbeat_s: 0,
            ..Limits::default()
        };
        live.store(&new).unwrap();
        assert_eq!(live.load(), new);
        let bad = Limits {
            connections_max: 0,
            ..Limits::default()
        };
        assert!(live.store(&bad).is_err());
        assert_eq!(live.load(), new);
    }

    #[test]
    fn the_sockets_budget_caps_connections_and_keeps_room_for_handshakes() {
        let live = LiveLimits::default();
        assert_eq!(
            live.connections_max(),
            CONNECTIONS_MAX,
            "no budget, no clamp"
        );
        live.set_sockets_budget(53);
        assert_eq!(live.connections_budget(), 47);
        assert_eq!(live.connections_max(), 47);
        assert_eq!(live.sockets_max(), 53);
        live.set_sockets_budget(196_524);
        assert_eq!(live.connections_budget(), 196_524 - HANDSHAKES_PENDING_MAX);
        assert_eq!(live.connections_max(), CONNECTIONS_MAX, "the default fits");
        assert_eq!(live.sockets_max(), CONNECTIONS_MAX + HANDSHAKES_PENDING_MAX);
        live.set_sockets_budget(4);
        assert_eq!((live.connections_budget(), live.sockets_max()), (3, 4));
    }

    #[test]
    fn the_outbound_cap_fits_four_of_the_largest_messages() {
        let l = Limits {
            message_bytes_max: 64 << 20,
            ..Limits::default()
        };
        assert_eq!(
            l.outbound_hard_cap_bytes(),
            4 * (64 << 20) + OUTBOUND_HIGH_WATER_BYTES
        );
        let small = Limits {
            message_bytes_max: 1 << 20,
            ..Limits::default()
        };
        assert_eq!(small.outbound_hard_cap_bytes(), OUTBOUND_HARD_CAP_BYTES);
    }
}
