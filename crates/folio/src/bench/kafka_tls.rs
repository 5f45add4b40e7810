//! `folio bench kafka --tls`: the cost of security. The same librdkafka client produces
//! 1 KiB records (acks=all) and reads them back, once over PLAINTEXT and once over
//! SASL_SSL (TLS 1.3 on rustls, SCRAM-SHA-512), to one broker on 3 bookies, in the same
//! run and in ABBA order: `ratio_vs_plaintext` for produce and consume (target >= 0.7).
//! The certificate is made for the run (folio-testkit's `certs`); the user is written to
//! the metadata store.
//! Also prints what the process read and wrote per byte served (`/proc/self/io`).

use std::path::Path;

use folio_broker::config::{ListenerConfig, TlsConfig};
use folio_broker::security::scram::{Credential, Mechanism};
use folio_broker::security::tls::ClientAuth;
use folio_broker::security::{SecurityProtocol, credentials};
use folio_broker::{Broker, BrokerConfig};

use super::kafka_driver::{drive_with, figure};
use super::ledger::cluster;

pub(crate) async fn run(quick: bool, tmp: &Path, driver: &Path) -> Result<(), String> {
    let secs = if quick { 10 } else { 30 };
    let record_bytes = 1024usize;
    println!("bench=kafka_tls quick={quick} seconds_per_run={secs} record_bytes={record_bytes}");
    let certs = folio_kafka_client::certs::write(tmp, "bench-");
    let (client, bookies, meta) = cluster(&tmp.join("cluster"), 3).await?;
    let keys = folio_meta::keys::Keys::default();
    let cred = Credential::new(Mechanism::ScramSha512, "bench-secret", 4096);
    credentials::put(meta.as_ref(), &keys, Mechanism::ScramSha512, "bench", &cred)
        .await
        .map_err(|e| e.to_string())?;
    let env = super::log_env(meta, client);
    let any = "127.0.0.1:0".parse().expect("address");
    let config = BrokerConfig {
        listeners: vec![
            ListenerConfig::plaintext(any),
            ListenerConfig::new(SecurityProtocol::SaslSsl, any),
        ],
        tls: Some(TlsConfig {
            cert: certs.server_cert.clone(),
            key: certs.server_key.clone(),
            client_ca: None,
            client_auth: ClientAuth::None,
        }),
        default_replication: 3,
        replication_max: 3,
        ..BrokerConfig::default()
    };
    let broker = Broker::start(config, env).await.map_err(|e| e.to_string())?;
    let plain = broker.addr().to_string();
    let secured = broker.listener_addr("SASL_SSL").ok_or("no SASL_SSL listener")?.to_string();
    let conf = format!(
        r#"{{"security.protocol": "SASL_SSL", "sasl.mechanisms": "SCRAM-SHA-512", "sasl.username": "bench", "sasl.password": "bench-secret", "ssl.ca.location": "{}"}}"#,
        certs.ca.display()
    );
    // The two setups run in ABBA order (plaintext, SASL_SSL, SASL_SSL, plaintext), half the
    // time each. Whatever runs later is slower on this VM (perf: the kernel's copy of the
    // bookies' entry-log writes into the page cache costs 70 % more per byte), so running
    // SASL_SSL second measured that and not TLS: one run saw 193.5 then 113.8 MB/s plaintext.
    let half = (secs / 2).to_string();
    let args = vec![half, record_bytes.to_string(), "1".to_string()];
    let (read0, written0) = (super::process_io("rchar"), super::process_io("wchar"));
    let order = [
        ("tls-plaintext-1", false),
        ("tls-sasl-ssl-1", true),
        ("tls-sasl-ssl-2", true),
        ("tls-plaintext-2", false),
    ];
    let (mut plaintext, mut sasl_ssl) = (Totals::default(), Totals::default());
    for (topic, secure) in order {
        let (addr, conf, totals) = match secure {
            true => (secured.clone(), Some(conf.clone()), &mut sasl_ssl),
            false => (plain.clone(), None, &mut plaintext),
        };
        let line = drive_with(driver, "run", addr, topic, args.clone(), conf).await?;
        let setup =
            if secure { "kafka_sasl_ssl mechanism=SCRAM-SHA-512" } else { "kafka_plaintext" };
        println!("setup={setup} topic={topic} {line}");
        totals.add(&line, record_bytes)?;
    }
    let (pa, pb) = (plaintext.produce_mb_per_s(), sasl_ssl.produce_mb_per_s());
    let (ca, cb) = (plaintext.consume_mb_per_s(), sasl_ssl.consume_mb_per_s());
    println!(
        "produce_mb_per_s_plaintext={pa:.1} produce_mb_per_s_sasl_ssl={pb:.1} produce_ratio_vs_plaintext={:.2}",
        pb / pa
    );
    println!(
        "consume_mb_per_s_plaintext={ca:.1} consume_mb_per_s_sasl_ssl={cb:.1} consume_ratio_vs_plaintext={:.2}",
        cb / ca
    );
    let served = (plaintext.records + sasl_ssl.records) * record_bytes as f64 * 2.0;
    if let (Some(r0), Some(w0), Some(r1), Some(w1)) =
        (read0, written0, super::process_io("rchar"), super::process_io("wchar"))
    {
        println!(
            "process_read_mb={:.1} process_written_mb={:.1} read_per_byte_served={:.2} written_per_byte_served={:.2}",
            (r1 - r0) as f64 / super::MIB,
            (w1 - w0) as f64 / super::MIB,
            (r1 - r0) as f64 / served,
            (w1 - w0) as f64 / served
        );
    }
    let m = broker.metrics();
    println!(
        "sasl_authentications={} tls_handshake_failures={}",
        m.sasl_authentications.load(std::sync::atomic::Ordering::Relaxed),
        m.tls_handshake_failures.load(std::sync::atomic::Ordering::Relaxed)
    );
    broker.shutdown().await;
    for b in bookies {
        b.shutdown().await.map_err(|e| e.to_string())?;
    }
    Ok(())
}

/// What the runs of one setup did together.
#[derive(Default)]
struct Totals {
    records: f64,
    mb: f64,
    produce_s: f64,
    consume_s: f64,
}

impl Totals {
    fn add(&mut self, line: &str, record_bytes: usize) -> Result<(), String> {
        let records = figure(line, "records")?;
        let mb = records * record_bytes as f64 / super::MIB;
        self.records += records;
        self.mb += mb;
        self.produce_s += figure(line, "produce_s")?;
        self.consume_s += mb / figure(line, "consume_mb_per_s")?;
        Ok(())
    }

    fn produce_mb_per_s(&self) -> f64 {
        self.mb / self.produce_s
    }

    fn consume_mb_per_s(&self) -> f64 {
        self.mb / self.consume_s
    }
}
