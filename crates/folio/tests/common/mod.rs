#![allow(dead_code)]
//! Helpers for tests that run `folio` processes.

use std::io::{BufRead, BufReader};
use std::process::Child;
use std::sync::mpsc;
use std::time::Duration;

/// Removes ANSI colour sequences from a log line.
pub fn strip_ansi(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            for c in chars.by_ref() {
                if c.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// Waits for the child's "Kafka listener up ... addr=HOST:PORT" log line on stderr and
/// returns the address; stderr keeps being drained (echoed with FOLIO_TEST_VERBOSE).
pub fn kafka_addr(child: &mut Child) -> String {
    let stderr = child.stderr.take().expect("stderr is piped");
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut tx = Some(tx);
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            let plain = strip_ansi(&line);
            if plain.contains("Kafka listener up")
                && let Some(addr) = plain.split_whitespace().find_map(|w| w.strip_prefix("addr="))
                && let Some(tx) = tx.take()
            {
                let _ = tx.send(addr.to_string());
            }
            if std::env::var_os("FOLIO_TEST_VERBOSE").is_some() {
                eprintln!("[folio] {plain}");
            }
        }
    });
    rx.recv_timeout(Duration::from_secs(60)).expect("no Kafka listener within 60 s")
}
