//! The Kafka client drivers of `bench kafka` and `bench latency` (Python scripts over
//! confluent-kafka): running one and reading its `key=value` figures line.

use std::path::Path;
use std::process::Command;

/// `key=value` pairs of a line.
fn figures(line: &str) -> Vec<(String, String)> {
    line.split_whitespace()
        .filter_map(|w| w.split_once('=').map(|(k, v)| (k.to_string(), v.to_string())))
        .collect()
}

/// `drive` with extra client settings (JSON, merged into the producer's and consumer's
/// configs: security settings).
pub(super) async fn drive_with(
    driver: &Path,
    mode: &'static str,
    bootstrap: String,
    topic: impl Into<String>,
    args: Vec<String>,
    conf: Option<String>,
) -> Result<String, String> {
    let (driver, topic) = (driver.to_path_buf(), topic.into());
    let out = tokio::task::spawn_blocking(move || {
        let mut c = Command::new("python3");
        c.arg(&driver).args([mode, bootstrap.as_str(), topic.as_str()]).args(args);
        if let Some(conf) = conf {
            c.env("FOLIO_BENCH_KAFKA_CONF", conf);
        }
        c.output()
    })
    .await
    .map_err(|e| e.to_string())?
    .map_err(|e| format!("running python3: {e}"))?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() {
        return Err(format!(
            "the Kafka client driver failed: {stdout}{}",
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    Ok(stdout.lines().last().unwrap_or_default().to_string())
}

/// The number `key=` of a driver's figures line.
pub(super) fn figure(line: &str, key: &str) -> Result<f64, String> {
    figures(line)
        .into_iter()
        .find(|(k, _)| k == key)
        .and_then(|(_, v)| v.parse().ok())
        .ok_or_else(|| format!("no {key} in the driver's output: {line}"))
}
