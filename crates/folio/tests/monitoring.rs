//! #51 item 4: the Grafana dashboard (`deploy/grafana/folio.json`) and the Prometheus alert
//! rules (`deploy/prometheus/folio-alerts.yml`) name only metrics a running Folio exposes.
//! A `folio standalone` with 3 bookies (so autorecovery runs too) is scraped, and every
//! `folio_*` name in their queries must be a metric family it declares (`# TYPE`), a
//! histogram's series (`_bucket`, `_sum`, `_count`) by their family. Their shape is checked
//! too: the dashboard is JSON whose panels each have a title and queries; every alert rule
//! has an expression, a duration, a severity and a summary.

use crate::common;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

fn deploy(file: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy").join(file)
}

/// The `folio_*` metric names in `text`.
fn metric_names(text: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    let mut rest = text;
    while let Some(at) = rest.find("folio_") {
        let before = rest[..at].chars().next_back();
        let tail = &rest[at..];
        let end = tail
            .find(|c: char| !(c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_'))
            .unwrap_or(tail.len());
        if !before.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_' || c == '/') {
            names.insert(tail[..end].to_string());
        }
        rest = &tail[end..];
    }
    names
}

/// The metric families a `/metrics` answer declares.
fn declared(metrics: &str) -> BTreeSet<String> {
    metrics
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| l.split_whitespace().next())
        .map(str::to_string)
        .collect()
}

/// The queries of the dashboard's panels, read by Python's json module (the test needs
/// python3 for the Kafka clients anyway): a title and at least one query per panel.
fn dashboard_queries() -> String {
    let script = "import json, sys\n\
        d = json.load(open(sys.argv[1]))\n\
        assert d['panels'], 'no panels'\n\
        for p in d['panels']:\n\
        \x20   assert p.get('title') and p.get('targets'), p\n\
        \x20   for t in p['targets']:\n\
        \x20       assert t.get('expr'), p['title']\n\
        \x20       print(t['expr'])\n";
    let out = Command::new("python3")
        .args(["-c", script])
        .arg(deploy("grafana/folio.json"))
        .output()
        .expect("python3");
    assert!(out.status.success(), "the dashboard: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap()
}

/// The alert rules' expressions; each rule must carry the fields an operator acts on.
fn alert_queries() -> String {
    let text = std::fs::read_to_string(deploy("prometheus/folio-alerts.yml")).unwrap();
    let rules: Vec<&str> = text.split("      - alert: ").skip(1).collect();
    assert!(rules.len() >= 7, "alert rules: {}", rules.len());
    let mut exprs = String::new();
    for rule in rules {
        let name = rule.lines().next().unwrap_or_default();
        for field in ["expr: ", "for: ", "severity: ", "summary: ", "description: "] {
            assert!(rule.contains(field), "alert {name} has no {field:?}");
        }
        let expr = rule.lines().find_map(|l| l.trim().strip_prefix("expr: ")).unwrap();
        exprs.push_str(expr);
        exprs.push('\n');
    }
    exprs
}

#[test]
fn the_dashboard_and_alert_rules_name_only_metrics_folio_exposes() {
    let tmp = tempfile::tempdir().unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_folio"))
        .args(["standalone", "--data-dir"])
        .arg(tmp.path())
        .args(["--bookies", "3", "--listen", "127.0.0.1:0", "--http", "127.0.0.1:0"])
        .args(["--kafka-listen", "127.0.0.1:0"])
        .env("RUST_LOG", "info")
        .env("NO_COLOR", "1")
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn folio standalone");
    let (_, http) = common::standalone_addrs(&mut child);
    let _standalone = common::Proc(child);
    let metrics = common::http_get(&http, "/metrics");
    let families = declared(&metrics);
    let exposed = |name: &str| {
        families.contains(name)
            || ["_bucket", "_sum", "_count"]
                .iter()
                .any(|s| name.strip_suffix(s).is_some_and(|family| families.contains(family)))
    };
    for (what, queries) in [("dashboard", dashboard_queries()), ("alert rules", alert_queries())] {
        let named = metric_names(&queries);
        assert!(named.len() >= 8, "{what} names {} metrics: {named:?}", named.len());
        let missing: Vec<&String> = named.iter().filter(|n| !exposed(n)).collect();
        assert!(missing.is_empty(), "the {what} name metrics Folio does not expose: {missing:?}");
    }
    // The disk gauges the disk alert compares carry a sample per bookie.
    for name in ["folio_bookie_disk_usage_ratio", "folio_bookie_disk_usage_threshold"] {
        let samples: Vec<f64> = metrics
            .lines()
            .filter(|l| l.starts_with(&format!("{name}{{")))
            .filter_map(|l| l.rsplit(' ').next()?.parse().ok())
            .collect();
        assert_eq!(samples.len(), 3, "{name}: {samples:?}");
        assert!(samples.iter().all(|u| (0.0..=1.0).contains(u)), "{name}: {samples:?}");
    }
}

#[test]
fn metric_names_are_read_out_of_queries() {
    let names = metric_names(
        "histogram_quantile(0.99, sum by (le) (rate(folio_kafka_x_bucket[5m]))) / folio_b_total",
    );
    assert_eq!(names.into_iter().collect::<Vec<_>>(), ["folio_b_total", "folio_kafka_x_bucket"]);
    assert!(metric_names("crates/folio_x my_folio_y").is_empty());
}
