//! Validation of names and keys, and generation of server-chosen names.
//!
//! Names (exchanges, queues, vhosts, consumer tags) and routing/binding keys are UTF-8 of
//! at most 255 bytes (AMQP 0-9-1 `shortstr`); the codecs already guarantee both, so the
//! checks here are the semantic ones: reserved prefixes and generated names.

use base64::Engine;

/// Prefix reserved for broker-defined exchanges and generated queue names (AMQP 0-9-1
/// §2.1.5.3 for exchanges; RabbitMQ applies it to queues too).
pub const RESERVED_PREFIX: &str = "amq.";

/// Whether a name starts with the reserved `amq.` prefix.
pub fn is_reserved(name: &str) -> bool {
    name.starts_with(RESERVED_PREFIX)
}

/// The pseudo-queue a requester consumes from for direct reply-to, and the `reply_to`
/// value a publish on that channel has replaced by the channel's reply name (RabbitMQ's
/// `rabbit_channel.erl`, `basic.consume` on `amq.rabbitmq.reply-to`; docs/amqp.md,
/// "Direct reply-to").
pub const DIRECT_REPLY_QUEUE: &str = "amq.rabbitmq.reply-to";

/// Prefix of a channel's reply name, `amq.rabbitmq.reply-to.<token>` (RabbitMQ's
/// `rabbit_volatile_queue.erl`, `?PREFIX`).
pub const DIRECT_REPLY_PREFIX: &str = "amq.rabbitmq.reply-to.";

/// Whether `name` is a direct reply-to name: `amq.rabbitmq.reply-to.` followed by
/// anything (RabbitMQ's `rabbit_volatile_queue:is/1`; the bare pseudo-queue name is not).
pub fn is_direct_reply(name: &str) -> bool {
    name.starts_with(DIRECT_REPLY_PREFIX)
}

/// A fresh name `PREFIX` + 22 URL-safe base64 characters of a random UUID, as RabbitMQ
/// generates `amq.gen-…` queue names and `amq.ctag-…` consumer tags.
pub fn generate(prefix: &str) -> String {
    let id = uuid::Uuid::new_v4();
    let mut s = String::with_capacity(prefix.len() + 22);
    s.push_str(prefix);
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode_string(id.as_bytes(), &mut s);
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generated_names_are_unique_and_prefixed() {
        let a = generate("amq.gen-");
        let b = generate("amq.gen-");
        assert_ne!(a, b);
        assert!(a.starts_with("amq.gen-") && a.len() == 30, "{a}");
        assert!(is_reserved(&a));
    }

    #[test]
    fn direct_reply_names_are_the_prefix_and_more() {
        assert!(is_direct_reply("amq.rabbitmq.reply-to.abc"));
        assert!(
            !is_direct_reply(DIRECT_REPLY_QUEUE),
            "the pseudo-queue itself"
        );
        assert!(!is_direct_reply("amq.rabbitmq.reply-toX"));
        assert!(is_reserved(DIRECT_REPLY_QUEUE));
    }
}
