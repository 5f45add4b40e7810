//! The broker's Prometheus metrics: requests by API and error code, bytes in and out, and
//! produce and fetch latency histograms, per broker and per topic.

use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use crate::limits::Limit;

/// Upper bounds (seconds) of the latency buckets.
const BUCKETS: [f64; 14] =
    [0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0];

/// `s` as a Prometheus label value: backslash, double quote and line feed escaped, so a
/// client-chosen name (a group id) cannot end the label or the line and forge samples.
pub fn label_value(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
    out
}

/// A fixed-bucket latency histogram.
#[derive(Debug, Default)]
pub struct Histogram {
    counts: [AtomicU64; BUCKETS.len() + 1],
    sum_us: AtomicU64,
}

impl Histogram {
    /// Counts one observation of `d`.
    pub fn observe(&self, d: Duration) {
        let s = d.as_secs_f64();
        let i = BUCKETS.iter().position(|b| s <= *b).unwrap_or(BUCKETS.len());
        self.counts[i].fetch_add(1, Ordering::Relaxed);
        self.sum_us.fetch_add(d.as_micros() as u64, Ordering::Relaxed);
    }

    /// Observations so far.
    pub fn count(&self) -> u64 {
        self.counts.iter().map(|c| c.load(Ordering::Relaxed)).sum()
    }

    /// The sum of the observations.
    pub fn sum(&self) -> Duration {
        Duration::from_micros(self.sum_us.load(Ordering::Relaxed))
    }

    /// The upper bound of the bucket holding quantile `q` (0 to 1) of the observations:
    /// at least that fraction took no longer. `None` with no observations;
    /// `Duration::MAX` when it lies beyond the last bucket.
    pub fn quantile_bound(&self, q: f64) -> Option<Duration> {
        let total = self.count();
        if total == 0 {
            return None;
        }
        let rank = ((q.clamp(0.0, 1.0) * total as f64).ceil() as u64).max(1);
        let mut cumulative = 0;
        for (i, c) in self.counts.iter().enumerate() {
            cumulative += c.load(Ordering::Relaxed);
            if cumulative >= rank {
                return Some(
                    BUCKETS
                        .get(i)
                        .map_or(Duration::MAX, |b| Duration::from_micros((b * 1e6).round() as u64)),
                );
            }
        }
        Some(Duration::MAX)
    }

    fn render(&self, out: &mut String, name: &str, labels: &str) {
        let mut cumulative = 0;
        for (i, c) in self.counts.iter().enumerate() {
            cumulative += c.load(Ordering::Relaxed);
            let le = BUCKETS.get(i).map_or("+Inf".to_string(), |b| b.to_string());
            let _ = writeln!(out, "{name}_bucket{{{labels}le=\"{le}\"}} {cumulative}");
        }
        let sum = self.sum_us.load(Ordering::Relaxed) as f64 / 1e6;
        let labels = labels.trim_end_matches(',');
        let _ = writeln!(out, "{name}_sum{{{labels}}} {sum}");
        let _ = writeln!(out, "{name}_count{{{labels}}} {cumulative}");
    }
}

/// Counters of one topic.
#[derive(Debug, Default)]
pub struct TopicMetrics {
    pub bytes_in: AtomicU64,
    pub bytes_out: AtomicU64,
    pub records_in: AtomicU64,
    /// Record batches produced (each one ledger entry).
    pub batches_in: AtomicU64,
    /// Retried batches of idempotent producers answered without storing them again.
    pub duplicate_batches: AtomicU64,
    pub produce_latency: Histogram,
    pub fetch_latency: Histogram,
}

/// The broker's counters and histograms, per API and per topic.
#[derive(Debug, Default)]
pub struct Metrics {
    /// (API key, error code) → requests answered.
    requests: Mutex<BTreeMap<(i16, i16), u64>>,
    pub bytes_in: AtomicU64,
    pub bytes_out: AtomicU64,
    pub connections: AtomicU64,
    /// Partitions this broker opened (took ownership of: fencing the previous owner).
    pub partitions_opened: AtomicU64,
    /// Partitions it closed because they moved to another broker.
    pub partitions_released: AtomicU64,
    /// Open partitions closed and opened again because another broker had taken their log
    /// over in the meantime (`Inner::partition`).
    pub partitions_taken_back: AtomicU64,
    /// Idempotent producer snapshots written beside partition logs.
    pub producer_snapshots: AtomicU64,
    /// Transaction markers (control batches) written to partitions owned here.
    pub txn_markers: AtomicU64,
    /// Partitions closed for being idle (`partition_idle_timeout`) or least recently used
    /// (`partitions_open_max`).
    pub partitions_closed_idle: AtomicU64,
    /// Topics whose data this broker (as controller) deleted.
    pub topics_deleted: AtomicU64,
    /// Controller deletion passes that failed (a bookie or the metadata store unreachable:
    /// retried a second later).
    pub topic_deletion_failures: AtomicU64,
    /// Topics deleted through this broker (names unbound, markers written).
    pub topic_deletions_requested: AtomicU64,
    /// Deletion markers the controller found on its last pass (topics whose partitions are
    /// not all in the trash yet).
    pub topic_deletions_pending: AtomicU64,
    /// Partitions of deleted topics not yet in the trash, as the controller counts them
    /// down (the "being deleted" state).
    pub partitions_being_deleted: AtomicU64,
    pub produce_latency: Histogram,
    pub fetch_latency: Histogram,
    /// Opening a partition here: reading its log, fencing and recovering the previous
    /// owner's last ledger, starting a ledger, rebuilding the idempotent producers (the
    /// wait for a free open slot not included).
    pub partition_open_latency: Histogram,
    topics: Mutex<HashMap<String, std::sync::Arc<TopicMetrics>>>,
    /// Times each listener limit was hit (by `Limit` order).
    limit_hits: [AtomicU64; Limit::ALL.len()],
    /// SASL authentications that succeeded.
    pub sasl_authentications: AtomicU64,
    /// SASL authentications that failed (wrong user or password, malformed exchange).
    pub sasl_authentication_failures: AtomicU64,
    /// TLS handshakes that failed or did not finish in time.
    pub tls_handshake_failures: AtomicU64,
    /// Produce requests served, by acks: 0, 1, all (-1).
    produce_by_acks: [AtomicU64; 3],
    /// Milliseconds of client-quota throttling answered: produce, fetch.
    throttle_ms: [AtomicU64; 2],
    /// The compactor's counters.
    pub compaction: CompactionStats,
}

impl Metrics {
    /// The authentication and produce-acks counters, as Prometheus text.
    fn render_security(&self) -> String {
        use std::fmt::Write as _;
        let mut out = String::new();
        for (name, help, v) in [
            (
                "folio_kafka_sasl_authentications_total",
                "SASL authentications that succeeded.",
                &self.sasl_authentications,
            ),
            (
                "folio_kafka_sasl_authentication_failures_total",
                "SASL authentications that failed (wrong user or password, malformed exchange).",
                &self.sasl_authentication_failures,
            ),
            (
                "folio_kafka_tls_handshake_failures_total",
                "TLS handshakes that failed or did not finish within request_read_timeout.",
                &self.tls_handshake_failures,
            ),
        ] {
            let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} counter");
            let _ = writeln!(out, "{name} {}", v.load(Ordering::Relaxed));
        }
        let name = "folio_kafka_produce_requests_total";
        let _ = writeln!(
            out,
            "# HELP {name} Produce requests served, by acks. acks=1 waits, as acks=all does, for \
             the ledger's ack quorum: a broker holds no data of its own.\n# TYPE {name} counter"
        );
        for (acks, v) in ["0", "1", "all"].iter().zip(&self.produce_by_acks) {
            let _ = writeln!(out, "{name}{{acks=\"{acks}\"}} {}", v.load(Ordering::Relaxed));
        }
        let name = "folio_kafka_throttle_time_ms_total";
        let _ = writeln!(
            out,
            "# HELP {name} Throttle time answered to clients above a client quota (their \
             connections read nothing meanwhile).\n# TYPE {name} counter"
        );
        for (kind, v) in ["produce", "fetch"].iter().zip(&self.throttle_ms) {
            let _ = writeln!(out, "{name}{{kind=\"{kind}\"}} {}", v.load(Ordering::Relaxed));
        }
        out
    }

    /// Counts `ms` of throttling for a client quota of `kind`.
    pub fn throttled(&self, kind: crate::domain::quotas::Kind, ms: u64) {
        let i = match kind {
            crate::domain::quotas::Kind::Produce => 0,
            crate::domain::quotas::Kind::Fetch => 1,
        };
        self.throttle_ms[i].fetch_add(ms, Ordering::Relaxed);
    }

    /// Milliseconds of client-quota throttling answered for `kind`.
    pub fn throttle_ms(&self, kind: crate::domain::quotas::Kind) -> u64 {
        let i = match kind {
            crate::domain::quotas::Kind::Produce => 0,
            crate::domain::quotas::Kind::Fetch => 1,
        };
        self.throttle_ms[i].load(Ordering::Relaxed)
    }

    /// Counts one SASL authentication, succeeded or not.
    pub fn sasl_authenticated(&self, ok: bool) {
        let c = if ok { &self.sasl_authentications } else { &self.sasl_authentication_failures };
        c.fetch_add(1, Ordering::Relaxed);
    }

    /// Counts one Produce request served with `acks` (0, 1 or -1).
    pub fn produce_acks(&self, acks: i16) {
        let i = match acks {
            0 => 0,
            1 => 1,
            _ => 2,
        };
        self.produce_by_acks[i].fetch_add(1, Ordering::Relaxed);
    }

    /// Counts one failed TLS handshake.
    pub fn tls_handshake_failed(&self) {
        self.tls_handshake_failures.fetch_add(1, Ordering::Relaxed);
    }

    /// Counts one hit of a listener limit.
    pub fn limit_hit(&self, limit: Limit) {
        self.limit_hits[limit as usize].fetch_add(1, Ordering::Relaxed);
    }

    /// Hits of `limit` so far.
    pub fn limit_hits(&self, limit: Limit) -> u64 {
        self.limit_hits[limit as usize].load(Ordering::Relaxed)
    }

    /// Counts one answered request; `error`: the first non-zero error code in the answer.
    pub fn request(&self, api: i16, error: i16) {
        *self.requests.lock().expect("metrics lock").entry((api, error)).or_default() += 1;
    }

    /// Requests answered for `api` with `error` so far.
    pub fn requests(&self, api: i16, error: i16) -> u64 {
        let m = self.requests.lock().expect("metrics lock");
        m.get(&(api, error)).copied().unwrap_or(0)
    }

    /// The metrics of topic `name`, created on first use.
    pub fn topic(&self, name: &str) -> std::sync::Arc<TopicMetrics> {
        let mut t = self.topics.lock().expect("metrics lock");
        if let Some(m) = t.get(name) {
            return m.clone();
        }
        t.entry(name.to_string()).or_default().clone()
    }

    /// The compactor's counters, in Prometheus text format.
    fn render_compaction(&self) -> String {
        let c = &self.compaction;
        let mut out = String::new();
        for (name, help, v) in [
            ("folio_kafka_compaction_passes_total", "Compactions swapped in.", &c.passes),
            ("folio_kafka_compaction_failures_total", "Compactions that failed.", &c.failures),
            (
                "folio_kafka_compaction_read_bytes_total",
                "Bytes compaction read (each pass reads its ledgers twice).",
                &c.bytes_read,
            ),
            (
                "folio_kafka_compaction_written_bytes_total",
                "Bytes compaction wrote.",
                &c.bytes_written,
            ),
            (
                "folio_kafka_compaction_records_removed_total",
                "Records compaction removed (superseded, tombstones past delete.retention.ms).",
                &c.records_removed,
            ),
            (
                "folio_kafka_compaction_paused_total",
                "Compactions held before their swap (tests: --compaction-pause-before-swap).",
                &c.paused,
            ),
        ] {
            let _ = writeln!(
                out,
                "# HELP {name} {help}\n# TYPE {name} counter\n{name} {}",
                v.load(Ordering::Relaxed)
            );
        }
        out
    }

    /// `folio_kafka_requests_total`, by API and error code.
    fn render_requests(&self, api_name: impl Fn(i16) -> String) -> String {
        let mut out = String::from(
            "# HELP folio_kafka_requests_total Kafka requests answered, by API and error code.\n# TYPE folio_kafka_requests_total counter\n",
        );
        for ((api, code), n) in self.requests.lock().expect("metrics lock").iter() {
            let api = api_name(*api);
            let _ = writeln!(
                out,
                "folio_kafka_requests_total{{api=\"{api}\",error=\"{}\"}} {n}",
                crate::errors::name(*code)
            );
        }
        out
    }

    /// The counters of partitions changing hands: (name, help, value).
    fn partition_counters(&self) -> [(&'static str, &'static str, &AtomicU64); 4] {
        [
            (
                "folio_kafka_partitions_opened_total",
                "Partitions this broker took over (opened, fencing any previous owner).",
                &self.partitions_opened,
            ),
            (
                "folio_kafka_partitions_released_total",
                "Partitions closed here because they moved to another broker.",
                &self.partitions_released,
            ),
            (
                "folio_kafka_partitions_taken_back_total",
                "Open partitions reopened here because another broker took their log over meanwhile.",
                &self.partitions_taken_back,
            ),
            (
                "folio_kafka_txn_markers_total",
                "Transaction markers (commit or abort control batches) written to partitions owned here.",
                &self.txn_markers,
            ),
        ]
    }

    /// Prometheus text format; `api_name` names an API by its key (`Produce`): metrics
    /// count requests by key and know none of Kafka's messages.
    pub fn render(&self, api_name: impl Fn(i16) -> String) -> String {
        let mut out =
            [self.render_security(), self.render_compaction(), self.render_requests(api_name)]
                .concat();
        let (counter, gauge) = ("counter", "gauge");
        for (name, help, kind, v) in [
            ("folio_kafka_bytes_in_total", "Record-batch bytes produced.", counter, &self.bytes_in),
            (
                "folio_kafka_bytes_out_total",
                "Record-batch bytes fetched.",
                counter,
                &self.bytes_out,
            ),
            (
                "folio_kafka_connections_total",
                "Client connections accepted.",
                counter,
                &self.connections,
            ),
            (
                "folio_kafka_producer_snapshots_total",
                "Idempotent producer snapshots written beside partition logs (the next owner restores them).",
                counter,
                &self.producer_snapshots,
            ),
            (
                "folio_kafka_partitions_closed_idle_total",
                "Partitions closed here for being idle or least recently used (partition_idle_timeout, partitions_open_max).",
                counter,
                &self.partitions_closed_idle,
            ),
            (
                "folio_kafka_topic_deletions_requested_total",
                "Topics deleted through this broker (name unbound, deletion marker written).",
                counter,
                &self.topic_deletions_requested,
            ),
            (
                "folio_kafka_topic_deletion_failures_total",
                "Controller topic-deletion passes that failed and will be retried.",
                counter,
                &self.topic_deletion_failures,
            ),
            (
                "folio_kafka_topics_deleted_total",
                "Deleted topics whose partitions this broker (as controller) moved to the trash.",
                counter,
                &self.topics_deleted,
            ),
            (
                "folio_kafka_partitions_being_deleted",
                "Partitions of deleted topics not in the trash yet (controller only).",
                gauge,
                &self.partitions_being_deleted,
            ),
            (
                "folio_kafka_topic_deletions_pending",
                "Deleted topics whose marker the controller still works on (controller only).",
                gauge,
                &self.topic_deletions_pending,
            ),
        ]
        .into_iter()
        .chain(self.partition_counters().map(|(n, h, v)| (n, h, counter, v)))
        {
            let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
            let _ = writeln!(out, "{name} {}", v.load(Ordering::Relaxed));
        }
        out.push_str("# HELP folio_kafka_limit_hits_total Requests or connections refused, cut short or closed by a listener limit.\n# TYPE folio_kafka_limit_hits_total counter\n");
        for l in Limit::ALL {
            let _ = writeln!(
                out,
                "folio_kafka_limit_hits_total{{limit=\"{}\"}} {}",
                l.name(),
                self.limit_hits(l)
            );
        }
        out.push_str("# HELP folio_kafka_produce_latency_seconds Produce requests, received to answered.\n# TYPE folio_kafka_produce_latency_seconds histogram\n");
        self.produce_latency.render(&mut out, "folio_kafka_produce_latency_seconds", "");
        out.push_str("# HELP folio_kafka_fetch_latency_seconds Fetch requests, received to answered (long polls included).\n# TYPE folio_kafka_fetch_latency_seconds histogram\n");
        self.fetch_latency.render(&mut out, "folio_kafka_fetch_latency_seconds", "");
        out.push_str("# HELP folio_kafka_partition_open_seconds Partition opens (take-overs): fence, recover, start a ledger, rebuild producers.\n# TYPE folio_kafka_partition_open_seconds histogram\n");
        self.partition_open_latency.render(&mut out, "folio_kafka_partition_open_seconds", "");
        let topics = self.topics.lock().expect("metrics lock");
        let mut names: Vec<&String> = topics.keys().collect();
        names.sort();
        // Each family whole (the text format wants a family's samples together).
        type PerTopic = fn(&TopicMetrics) -> &AtomicU64;
        let per_topic: [(&str, &str, PerTopic); 4] = [
            ("folio_kafka_topic_bytes_in_total", "Record-batch bytes produced, per topic.", |t| {
                &t.bytes_in
            }),
            ("folio_kafka_topic_bytes_out_total", "Record-batch bytes fetched, per topic.", |t| {
                &t.bytes_out
            }),
            ("folio_kafka_topic_records_in_total", "Records produced, per topic.", |t| {
                &t.records_in
            }),
            (
                "folio_kafka_topic_duplicate_batches_total",
                "Retried idempotent batches answered with their first offset, not stored again.",
                |t| &t.duplicate_batches,
            ),
        ];
        for (family, help, get) in per_topic {
            let _ = writeln!(out, "# HELP {family} {help}\n# TYPE {family} counter");
            for n in &names {
                let _ = writeln!(
                    out,
                    "{family}{{topic=\"{n}\"}} {}",
                    get(&topics[*n]).load(Ordering::Relaxed)
                );
            }
        }
        out.push_str("# HELP folio_kafka_topic_produce_latency_seconds Appends per topic and partition, queued to durable.\n# TYPE folio_kafka_topic_produce_latency_seconds histogram\n");
        for n in &names {
            topics[*n].produce_latency.render(
                &mut out,
                "folio_kafka_topic_produce_latency_seconds",
                &format!("topic=\"{n}\","),
            );
        }
        out.push_str("# HELP folio_kafka_topic_fetch_latency_seconds Fetch reads per topic and partition.\n# TYPE folio_kafka_topic_fetch_latency_seconds histogram\n");
        for n in &names {
            topics[*n].fetch_latency.render(
                &mut out,
                "folio_kafka_topic_fetch_latency_seconds",
                &format!("topic=\"{n}\","),
            );
        }
        out
    }
}

/// The compactor's counters (rendered as `folio_kafka_compaction_*`).
#[derive(Debug, Default)]
pub struct CompactionStats {
    pub passes: AtomicU64,
    pub failures: AtomicU64,
    pub bytes_read: AtomicU64,
    pub bytes_written: AtomicU64,
    pub records_removed: AtomicU64,
    /// Passes held before their swap (`pause_before_swap`).
    pub paused: AtomicU64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn histogram_buckets_are_cumulative() {
        let h = Histogram::default();
        h.observe(Duration::from_micros(300));
        h.observe(Duration::from_millis(30));
        h.observe(Duration::from_secs(60));
        let mut s = String::new();
        h.render(&mut s, "x", "");
        assert!(s.contains("x_bucket{le=\"0.0005\"} 1"), "{s}");
        assert!(s.contains("x_bucket{le=\"0.05\"} 2"), "{s}");
        assert!(s.contains("x_bucket{le=\"+Inf\"} 3"), "{s}");
        assert!(s.contains("x_count{} 3"), "{s}");
        assert_eq!(h.count(), 3);
    }

    #[test]
    fn a_quantile_is_the_bound_of_the_bucket_reaching_its_rank() {
        let h = Histogram::default();
        assert_eq!(h.quantile_bound(0.5), None);
        for _ in 0..98 {
            h.observe(Duration::from_micros(700)); // the 1 ms bucket
        }
        h.observe(Duration::from_millis(30)); // 50 ms
        h.observe(Duration::from_secs(60)); // beyond the last bucket
        assert_eq!(h.quantile_bound(0.5), Some(Duration::from_millis(1)));
        assert_eq!(h.quantile_bound(0.98), Some(Duration::from_millis(1)));
        assert_eq!(h.quantile_bound(0.99), Some(Duration::from_millis(50)));
        assert_eq!(h.quantile_bound(1.0), Some(Duration::MAX));
        assert_eq!(h.quantile_bound(0.0), Some(Duration::from_millis(1)));
    }
}
