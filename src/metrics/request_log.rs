//! The ring buffer of per-request records and its fan-out to live subscribers.
//!
//! One mutex guards the ring, the sequence counter and the subscriber list together, so that a
//! subscriber's replay (records after its `Last-Event-ID`) and its live feed meet without a gap
//! or a duplicate. It is taken once per finished generation and once per subscribe, never per
//! token. Each subscriber owns a bounded queue; when it is full the oldest entry is dropped and
//! counted, so a slow reader never holds back the server or the other readers.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::negotiate::StreamFormat;
use super::registry::{Counter, Gauge};
use super::request_record::{sse_frame, RequestRecord, KEEP_ALIVE, KEEP_ALIVE_INTERVAL, NDJSON_KEEP_ALIVE};

/// Entries a subscriber may have waiting before its oldest is dropped.
pub const SUBSCRIBER_QUEUE: usize = 256;

/// One record in the ring, serialized once for every reader.
#[derive(Debug)]
pub struct Entry {
    pub seq: u64,
    pub record: RequestRecord,
    pub json: Box<[u8]>,
}

impl Entry {
    /// The SSE event for this record.
    pub fn sse(&self) -> Vec<u8> {
        sse_frame(self.seq, &self.json)
    }

    /// The NDJSON line for this record.
    pub fn ndjson(&self) -> Vec<u8> {
        let mut v = Vec::with_capacity(self.json.len() + 1);
        v.extend_from_slice(&self.json);
        v.push(b'\n');
        v
    }

    pub fn frame(&self, format: StreamFormat) -> Vec<u8> {
        match format {
            StreamFormat::Sse => self.sse(),
            StreamFormat::Ndjson => self.ndjson(),
        }
    }
}

struct Inner {
    ring: VecDeque<Arc<Entry>>,
    next_seq: u64,
    subscribers: Vec<async_channel::Sender<Arc<Entry>>>,
}

pub struct RequestLog {
    capacity: usize,
    queue: usize,
    inner: Mutex<Inner>,
    /// `mtplx_metrics_stream_dropped_total`.
    pub dropped: Counter,
    /// `mtplx_metrics_stream_subscribers`: subscriptions alive, up at `subscribe`, down when the
    /// [`Subscription`] is dropped (its stream ended, however it ended).
    pub subscribers: Arc<Gauge>,
}

impl RequestLog {
    /// A log keeping the last `capacity` records (`--metrics-history`).
    pub fn new(capacity: usize) -> RequestLog {
        Self::with_queue(capacity, SUBSCRIBER_QUEUE)
    }

    /// As [`RequestLog::new`] with a chosen per-subscriber queue length (at least 1).
    pub fn with_queue(capacity: usize, queue: usize) -> RequestLog {
        RequestLog {
            capacity,
            queue: queue.max(1),
            inner: Mutex::new(Inner { ring: VecDeque::with_capacity(capacity), next_seq: 1, subscribers: Vec::new() }),
            dropped: Counter::default(),
            subscribers: Arc::default(),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Give the record the next sequence number, keep it, and send it to every subscriber.
    pub fn push(&self, mut record: RequestRecord) -> Arc<Entry> {
        let mut g = self.lock();
        record.seq = g.next_seq;
        g.next_seq += 1;
        let json = serde_json::to_vec(&record).unwrap_or_default().into_boxed_slice();
        let entry = Arc::new(Entry { seq: record.seq, record, json });
        if self.capacity > 0 {
            if g.ring.len() == self.capacity {
                g.ring.pop_front();
            }
            g.ring.push_back(entry.clone());
        }
        g.subscribers.retain(|tx| match tx.force_send(entry.clone()) {
            Ok(Some(_)) => {
                self.dropped.inc();
                true
            }
            Ok(None) => true,
            Err(_) => false,
        });
        entry
    }

    /// The newest record, if any.
    pub fn latest(&self) -> Option<Arc<Entry>> {
        self.lock().ring.back().cloned()
    }

    /// The last `limit` records (all kept when `None`), oldest first.
    pub fn history(&self, limit: Option<usize>) -> Vec<Arc<Entry>> {
        let g = self.lock();
        let n = limit.unwrap_or(usize::MAX).min(g.ring.len());
        g.ring.iter().skip(g.ring.len() - n).cloned().collect()
    }

    /// `{"latest": record | null, "history": [record, ...]}`, newest last; `extra` is spliced
    /// in as further `"key": value` members when given (without braces).
    pub fn envelope_json(&self, limit: Option<usize>, extra: Option<&[u8]>) -> Vec<u8> {
        let hist = self.history(None);
        let n = limit.unwrap_or(usize::MAX).min(hist.len());
        let mut out = Vec::with_capacity(64 + hist.iter().rev().take(n).map(|e| e.json.len() + 1).sum::<usize>());
        out.extend_from_slice(b"{\"latest\":");
        match hist.last() {
            Some(e) => out.extend_from_slice(&e.json),
            None => out.extend_from_slice(b"null"),
        }
        out.extend_from_slice(b",\"history\":[");
        for (i, e) in hist[hist.len() - n..].iter().enumerate() {
            if i > 0 {
                out.push(b',');
            }
            out.extend_from_slice(&e.json);
        }
        out.push(b']');
        if let Some(extra) = extra {
            out.push(b',');
            out.extend_from_slice(extra);
        }
        out.push(b'}');
        out
    }

    /// Subscribe to new records. With `last_event_id`, records after it that are still in the
    /// ring are delivered first. An id beyond the newest one was issued by an earlier run of the
    /// server (ids restart at 1), so then the whole ring is replayed.
    pub fn subscribe(&self, last_event_id: Option<u64>) -> Subscription {
        let (tx, rx) = async_channel::bounded(self.queue);
        let mut g = self.lock();
        if let Some(last) = last_event_id {
            let from = if last >= g.next_seq { 0 } else { last };
            for e in g.ring.iter().filter(|e| e.seq > from) {
                if let Ok(Some(_)) = tx.force_send(e.clone()) {
                    self.dropped.inc();
                }
            }
        }
        g.subscribers.push(tx);
        self.subscribers.inc();
        Subscription { rx, open: self.subscribers.clone() }
    }

    /// End every live subscription (graceful shutdown): their streams finish after what they
    /// already queued.
    pub fn close_subscribers(&self) {
        self.lock().subscribers.clear();
    }

    /// Subscriptions the log still sends to (a gone one is removed at the next push); the
    /// gauge [`RequestLog::subscribers`] counts the ones alive.
    pub fn subscriber_count(&self) -> usize {
        self.lock().subscribers.len()
    }
}

/// One live reader of the record stream.
pub struct Subscription {
    rx: async_channel::Receiver<Arc<Entry>>,
    /// The log's `mtplx_metrics_stream_subscribers`, decremented on drop.
    open: Arc<Gauge>,
}

impl Drop for Subscription {
    fn drop(&mut self) {
        self.open.dec();
    }
}

impl Subscription {
    /// The next record; `None` once the log closed the subscription.
    pub async fn recv(&self) -> Option<Arc<Entry>> {
        self.rx.recv().await.ok()
    }

    /// The next record if one is waiting.
    pub fn try_recv(&self) -> Option<Arc<Entry>> {
        self.rx.try_recv().ok()
    }

    /// Drive a stream response: frame each record (SSE or NDJSON) into `out`, with a keep-alive
    /// after [`KEEP_ALIVE_INTERVAL`] of silence. With a nonzero `batch`, records that finish
    /// within `batch` of the last write wait and go out together in one write (each still its
    /// own event): a reader that redraws once a second then wakes once a second, not per record.
    /// The first record after a quiet `batch` goes out at once. Returns when the client is gone
    /// (`out` closed) or the log closed the subscription. Spawn it beside `Response::sse(rx)`.
    pub async fn pump(self, format: StreamFormat, out: async_channel::Sender<Vec<u8>>, batch: Duration) {
        self.pump_every(format, out, KEEP_ALIVE_INTERVAL, batch).await
    }

    pub async fn pump_every(
        self,
        format: StreamFormat,
        out: async_channel::Sender<Vec<u8>>,
        keep_alive: Duration,
        batch: Duration,
    ) {
        enum Step {
            Item(Option<Arc<Entry>>),
            Idle,
            Gone,
        }
        // When records last went out; `None` until then, so the first goes out at once.
        let mut last_write: Option<Instant> = None;
        loop {
            let step = smol::future::or(
                smol::future::or(async { Step::Item(self.rx.recv().await.ok()) }, async {
                    out.closed().await;
                    Step::Gone
                }),
                async {
                    async_io::Timer::after(keep_alive).await;
                    Step::Idle
                },
            )
            .await;
            let record = matches!(step, Step::Item(Some(_)));
            let bytes = match step {
                Step::Item(Some(e)) => {
                    let mut bytes = e.frame(format);
                    if let Some(due) = last_write.map(|t| t + batch).filter(|&due| due > Instant::now()) {
                        let gone = smol::future::or(
                            async {
                                async_io::Timer::at(due).await;
                                false
                            },
                            async {
                                out.closed().await;
                                true
                            },
                        );
                        if gone.await {
                            return;
                        }
                        while let Some(e) = self.try_recv() {
                            bytes.extend_from_slice(&e.frame(format));
                        }
                    }
                    bytes
                }
                Step::Item(None) | Step::Gone => return,
                Step::Idle => match format {
                    StreamFormat::Sse => KEEP_ALIVE.to_vec(),
                    StreamFormat::Ndjson => NDJSON_KEEP_ALIVE.to_vec(),
                },
            };
            if out.send(bytes).await.is_err() {
                return;
            }
            if record && !batch.is_zero() {
                last_write = Some(Instant::now());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::request_record::sample_record;

    fn seqs(v: &[Arc<Entry>]) -> Vec<u64> {
        v.iter().map(|e| e.seq).collect()
    }

    fn drain(s: &Subscription) -> Vec<u64> {
        std::iter::from_fn(|| s.try_recv()).map(|e| e.seq).collect()
    }

    #[test]
    fn ring_keeps_the_newest_with_increasing_ids() {
        let log = RequestLog::new(3);
        assert!(log.latest().is_none());
        for _ in 0..5 {
            log.push(sample_record(0));
        }
        assert_eq!(seqs(&log.history(None)), [3, 4, 5]);
        assert_eq!(seqs(&log.history(Some(2))), [4, 5]);
        assert_eq!(log.latest().unwrap().record.seq, 5);
        let env: serde_json::Value = serde_json::from_slice(&log.envelope_json(Some(2), None)).unwrap();
        assert_eq!(env["latest"]["seq"], 5);
        let h: Vec<u64> = env["history"].as_array().unwrap().iter().map(|r| r["seq"].as_u64().unwrap()).collect();
        assert_eq!(h, [4, 5]);
        let empty: serde_json::Value =
            serde_json::from_slice(&RequestLog::new(4).envelope_json(None, Some(b"\"x\":1"))).unwrap();
        assert_eq!(empty, serde_json::json!({"latest": null, "history": [], "x": 1}));
    }

    #[test]
    fn replay_after_last_event_id_then_live() {
        let log = RequestLog::new(4);
        for _ in 0..6 {
            log.push(sample_record(0));
        }
        // Ring holds 3..=6; the client saw 4.
        let s = log.subscribe(Some(4));
        assert_eq!(drain(&s), [5, 6]);
        log.push(sample_record(0));
        assert_eq!(drain(&s), [7]);
        // An id older than the ring replays what is left; no id replays nothing.
        assert_eq!(drain(&log.subscribe(Some(1))), [4, 5, 6, 7]);
        assert_eq!(drain(&log.subscribe(None)), Vec::<u64>::new());
        // An id from a previous run of the server replays the whole ring.
        assert_eq!(drain(&log.subscribe(Some(1000))), [4, 5, 6, 7]);
    }

    #[test]
    fn slow_subscriber_drops_oldest_and_counts() {
        let log = RequestLog::with_queue(16, 2);
        let slow = log.subscribe(None);
        let fast = log.subscribe(None);
        log.push(sample_record(0));
        assert_eq!(drain(&fast), [1]);
        let mut fast_got = Vec::new();
        for _ in 0..3 {
            log.push(sample_record(0));
            fast_got.extend(drain(&fast));
        }
        assert_eq!(drain(&slow), [3, 4]);
        assert_eq!(log.dropped.get(), 2, "only the slow reader lost entries");
        assert_eq!(fast_got, [2, 3, 4]);
        drop(slow);
        log.push(sample_record(0));
        assert_eq!(log.subscriber_count(), 1, "a gone subscriber is removed");
    }

    #[test]
    fn the_subscriber_gauge_counts_live_subscriptions() {
        let log = RequestLog::new(4);
        let a = log.subscribe(None);
        let b = log.subscribe(Some(0));
        assert_eq!(log.subscribers.get(), 2);
        drop(a);
        assert_eq!(log.subscribers.get(), 1, "a dropped subscription is gone at once");
        // Closed by the log (shutdown): it counts until its stream, which owns it, ends.
        log.close_subscribers();
        assert_eq!(log.subscribers.get(), 1);
        let (tx, _rx) = async_channel::unbounded();
        smol::block_on(b.pump(StreamFormat::Sse, tx, Duration::ZERO));
        assert_eq!(log.subscribers.get(), 0);
    }

    #[test]
    fn pump_frames_keeps_alive_and_ends() {
        let log = RequestLog::new(8);
        let sub = log.subscribe(None);
        let (tx, rx) = async_channel::unbounded();
        let task = smol::spawn(sub.pump_every(StreamFormat::Sse, tx, Duration::from_millis(20), Duration::ZERO));
        smol::block_on(async {
            assert_eq!(rx.recv().await.unwrap(), KEEP_ALIVE);
            log.push(sample_record(0));
            let mut ev = rx.recv().await.unwrap();
            while ev == KEEP_ALIVE {
                ev = rx.recv().await.unwrap();
            }
            assert!(ev.starts_with(b"id: 1\ndata: {"));
            log.close_subscribers();
            task.await;
        });
    }

    #[test]
    fn a_batching_pump_writes_records_of_one_window_together() {
        let log = RequestLog::new(8);
        let sub = log.subscribe(None);
        let (tx, rx) = async_channel::unbounded();
        let keep_alive = Duration::from_secs(60);
        let task = smol::spawn(sub.pump_every(StreamFormat::Sse, tx, keep_alive, Duration::from_secs(1)));
        let ids = |w: &[u8]| -> Vec<String> {
            String::from_utf8_lossy(w).lines().filter_map(|l| l.strip_prefix("id: ").map(String::from)).collect()
        };
        smol::block_on(async {
            log.push(sample_record(0));
            assert_eq!(ids(&rx.recv().await.unwrap()), ["1"], "the first record goes out alone, at once");
            for _ in 0..3 {
                log.push(sample_record(0));
            }
            assert_eq!(ids(&rx.recv().await.unwrap()), ["2", "3", "4"], "one write for the window");
            log.close_subscribers();
            task.await;
        });
    }
}
