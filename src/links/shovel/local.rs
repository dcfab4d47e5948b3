//! A shovel end on this broker: an in-process session of its own (RabbitMQ's "direct"
//! connection), no socket and no login, so local shovels run with the AMQP listener off.
//! Deliveries and confirms reach the shovel's thread through [`LocalSink`].

use super::endpoint::{Dest, Shovelled, Source};
use crate::amqp_client::Confirm;
use crate::broker::channel::Channel;
use crate::broker::message::Message;
use crate::broker::node::Broker;
use crate::broker::queue::Queue;
use crate::broker::session::Session;
use crate::broker::sink::{CancelReason, ClientSink};
use crate::broker::vhost::{QueueSpec, VirtualHost};
use crate::error::{BrokerError, ReplyCode};
use crate::types::{BasicProperties, FieldTable};
use std::collections::VecDeque;
use std::sync::atomic::AtomicUsize;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// The channel a local end uses.
const CHANNEL: u16 = 1;

/// What the core pushed to a local end, waiting for the shovel's thread.
#[derive(Default)]
struct Pushed {
    /// Deliveries (at most the prefetch count).
    deliveries: VecDeque<Shovelled>,
    /// Publisher confirms (at most one per publish in flight).
    confirms: Vec<Confirm>,
    /// Why the session can no longer be used (consumer cancelled, connection closed).
    failed: Option<String>,
}

/// The sink of a local end's session: it queues what the core pushes and wakes the
/// shovel's thread. Never blocks (a mutex held for a push).
#[derive(Default)]
pub struct LocalSink {
    pushed: Mutex<Pushed>,
    wake: Condvar,
}

impl LocalSink {
    fn lock(&self) -> MutexGuard<'_, Pushed> {
        self.pushed.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Waits until something was pushed or `timeout` passed; returns the guard.
    fn wait(&self, timeout: Duration, ready: impl Fn(&Pushed) -> bool) -> MutexGuard<'_, Pushed> {
        let deadline = Instant::now() + timeout;
        let mut g = self.lock();
        while !ready(&g) && g.failed.is_none() {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            g = self
                .wake
                .wait_timeout(g, left)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
        g
    }
}

impl ClientSink for LocalSink {
    fn deliver(&self, _: u16, _: &str, tag: u64, redelivered: bool, m: &Message) {
        let d = Shovelled {
            tag,
            redelivered,
            exchange: m.exchange().to_string(),
            routing_key: m.routing_key().to_string(),
            properties: m.properties().clone(),
            body: m.body.as_slice().to_vec(),
        };
        self.lock().deliveries.push_back(d);
        self.wake.notify_one();
    }

    fn cancel(&self, _: &Arc<Channel>, tag: &str, reason: CancelReason) {
        let why = match reason {
            CancelReason::QueueDeleted => {
                format!("consumer '{tag}' cancelled: its queue was deleted")
            }
            CancelReason::ConsumerTimeout { timeout_ms } => {
                format!("consumer '{tag}' cancelled: delivery acknowledgement timed out after {timeout_ms} ms")
            }
        };
        self.lock().failed.get_or_insert(why);
        self.wake.notify_one();
    }

    fn basic_return(&self, _: u16, _: ReplyCode, _: &str, _: &Message) {}

    fn confirm(&self, _: u16, seq: u64, multiple: bool, ack: bool) {
        self.lock().confirms.push(Confirm { seq, multiple, ack });
        self.wake.notify_one();
    }

    fn is_saturated(&self) -> bool {
        false
    }

    fn force_close(&self, code: ReplyCode, text: &str) {
        self.lock()
            .failed
            .get_or_insert(format!("{} {} - {text}", code.as_u16(), code.name()));
        self.wake.notify_one();
    }
}

/// A readable reason for a broker error (`404 NOT_FOUND - no queue 'q' in vhost '/'`).
pub(super) fn reason(e: &BrokerError) -> String {
    format!("{} {} - {}", e.code.as_u16(), e.code.name(), e.text)
}

/// An in-process session on `vhost` of `broker`, channel 1 open.
pub struct LocalEnd {
    session: Session,
    sink: Arc<LocalSink>,
}

impl LocalEnd {
    /// Opens a session on `vhost` (no user: a shovel acts for the broker, as RabbitMQ's
    /// direct connections of dynamic shovels do).
    ///
    /// # Errors
    /// 404 for a vhost that does not exist.
    pub fn open(broker: &Arc<Broker>, vhost: &str) -> Result<LocalEnd, String> {
        let vh: Arc<VirtualHost> = broker
            .vhost(vhost)
            .ok_or_else(|| format!("404 NOT_FOUND - no vhost '{vhost}'"))?;
        let sink = Arc::new(LocalSink::default());
        let mut session = Session::new(
            Arc::clone(broker),
            broker.next_connection_id(),
            vh,
            Arc::clone(&sink) as Arc<dyn ClientSink>,
            CHANNEL,
            Arc::new(AtomicUsize::new(0)),
        );
        session.open_channel(CHANNEL).map_err(|e| reason(&e))?;
        Ok(LocalEnd { session, sink })
    }

    /// As `remote::ensure_queue`: declares `name` durable with `args` unless it exists
    /// (with `predeclared`, only checks); returns its ready messages.
    ///
    /// # Errors
    /// The refusal, as a reason.
    pub fn ensure_queue(
        &mut self,
        name: &str,
        args: &FieldTable,
        predeclared: bool,
    ) -> Result<u32, String> {
        let passive = QueueSpec {
            name: name.to_string(),
            passive: true,
            ..QueueSpec::default()
        };
        match self.session.queue_declare(CHANNEL, &passive) {
            Ok(d) => Ok(d.message_count),
            Err(e) if e.code == ReplyCode::NotFound && !predeclared => {
                let spec = QueueSpec {
                    name: name.to_string(),
                    durable: true,
                    arguments: args.clone(),
                    ..QueueSpec::default()
                };
                self.session
                    .queue_declare(CHANNEL, &spec)
                    .map(|d| d.message_count)
                    .map_err(|e| reason(&e))
            }
            Err(e) => Err(reason(&e)),
        }
    }

    /// Declares an exclusive server-named queue bound to `exchange` with `key`; returns
    /// its name.
    ///
    /// # Errors
    /// The refusal (404 for a missing exchange).
    pub fn bind_exchange(&mut self, exchange: &str, key: &str) -> Result<String, String> {
        let spec = QueueSpec {
            exclusive: true,
            ..QueueSpec::default()
        };
        let q = self
            .session
            .queue_declare(CHANNEL, &spec)
            .map_err(|e| reason(&e))?;
        self.session
            .queue_bind(CHANNEL, &q.name, exchange, key, &FieldTable::new())
            .map_err(|e| reason(&e))?;
        Ok(q.name)
    }

    /// Starts consuming `queue`: this end becomes a source.
    ///
    /// # Errors
    /// The refusal.
    pub fn consume(
        mut self,
        queue: &str,
        prefetch: u16,
        no_ack: bool,
        consumer_tag: &str,
        args: &FieldTable,
    ) -> Result<LocalSource, String> {
        if !no_ack {
            self.session
                .basic_qos(CHANNEL, prefetch, false)
                .map_err(|e| reason(&e))?;
        }
        self.session
            .basic_consume(CHANNEL, queue, consumer_tag, no_ack, false, args, |_| {})
            .map_err(|e| reason(&e))?;
        let queue = self.session.vhost().queue(queue);
        Ok(LocalSource { end: self, queue })
    }

    /// Puts the channel in confirm mode (with `confirms`): this end becomes a
    /// destination.
    ///
    /// # Errors
    /// The refusal.
    pub fn publisher(mut self, confirms: bool) -> Result<LocalDest, String> {
        if confirms {
            self.session
                .confirm_select(CHANNEL)
                .map_err(|e| reason(&e))?;
        }
        Ok(LocalDest { end: self })
    }

    fn failed(&self) -> Result<(), String> {
        match &self.sink.lock().failed {
            Some(why) => Err(why.clone()),
            None => Ok(()),
        }
    }
}

impl Drop for LocalEnd {
    fn drop(&mut self) {
        // Unacked deliveries go back to their queue; the exclusive queue goes.
        self.session.close();
    }
}

/// A local source: a consumer of an in-process session.
pub struct LocalSource {
    end: LocalEnd,
    queue: Option<Arc<Queue>>,
}

impl Source for LocalSource {
    fn poll(&mut self, timeout: Duration, out: &mut Vec<Shovelled>) -> Result<(), String> {
        let mut g = self.end.sink.wait(timeout, |p| !p.deliveries.is_empty());
        out.extend(g.deliveries.drain(..));
        match &g.failed {
            Some(why) if out.is_empty() => Err(why.clone()),
            _ => Ok(()),
        }
    }

    fn ack(&mut self, tag: u64, multiple: bool) -> Result<(), String> {
        self.end
            .session
            .basic_ack(CHANNEL, tag, multiple)
            .map_err(|e| reason(&e))
    }

    fn nack(&mut self, tag: u64) -> Result<(), String> {
        self.end
            .session
            .basic_nack(CHANNEL, tag, false, true)
            .map_err(|e| reason(&e))
    }

    fn flush(&mut self) -> Result<(), String> {
        self.end.failed()
    }

    fn backlog(&self) -> Option<u64> {
        self.queue.as_ref().map(|q| q.message_count() as u64)
    }
}

/// A local destination: a publisher of an in-process session.
pub struct LocalDest {
    end: LocalEnd,
}

impl Dest for LocalDest {
    fn publish(
        &mut self,
        exchange: &str,
        routing_key: &str,
        properties: &BasicProperties,
        body: &[u8],
    ) -> Result<(), String> {
        self.end
            .session
            .basic_publish(
                CHANNEL,
                exchange,
                routing_key,
                false,
                Some(Box::new(properties.clone())),
                body,
            )
            .map_err(|e| reason(&e))
    }

    fn flush(&mut self) -> Result<(), String> {
        self.end.session.flush_confirms(CHANNEL);
        self.end.failed()
    }

    fn poll_confirms(&mut self, timeout: Duration, out: &mut Vec<Confirm>) -> Result<(), String> {
        let mut g = self.end.sink.wait(timeout, |p| !p.confirms.is_empty());
        out.append(&mut g.confirms);
        Ok(())
    }

    fn is_blocked(&self) -> bool {
        self.end.session.broker().alarms().is_alarmed()
    }
}
