//! D1 acked-is-durable and D3 fenced-is-final across a real SIGKILL, on the real file system
//! and the real (fjall) index: a `folio debug load` process adds entries and prints every
//! acknowledgement; the test kills it mid-stream, reopens the data dir in-process and checks
//! that every printed acknowledgement reads back byte-identical. Two kill cycles, so the
//! second run also recovers a journal that a killed process left behind.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

use folio_bookie::{Storage, StorageConfig, StorageMode};
use folio_proto::Status;

const ENTRY_BYTES: usize = 512;

fn payload(ledger_id: u64, entry_id: i64) -> Vec<u8> {
    format!("{ledger_id}:{entry_id};").bytes().cycle().take(ENTRY_BYTES).collect()
}

/// Runs the loader until it printed `n_acks` acknowledgements, then SIGKILLs it.
fn load_and_kill(
    dir: &std::path::Path,
    n_acks: usize,
    mode: StorageMode,
) -> (Vec<(u64, i64)>, bool) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_folio"))
        .args(["--log", "warn", "debug", "load", "--entry-bytes", &ENTRY_BYTES.to_string()])
        .args(["--mode", mode.name()])
        .arg("--data-dir")
        .arg(dir)
        .stdout(Stdio::piped())
        .spawn()
        .expect("spawn folio");
    let stdout = child.stdout.take().expect("piped stdout");
    let mut acked = Vec::new();
    let mut fenced = false;
    for line in BufReader::new(stdout).lines() {
        let line = line.expect("read loader output");
        let words: Vec<&str> = line.split_whitespace().collect();
        match words.as_slice() {
            ["acked", l, e] => acked.push((l.parse().unwrap(), e.parse().unwrap())),
            ["fenced", "4"] => fenced = true,
            _ => panic!("unexpected loader output: {line}"),
        }
        if acked.len() >= n_acks {
            break;
        }
    }
    child.kill().expect("SIGKILL the loader");
    let _ = child.wait();
    (acked, fenced)
}

#[test]
fn d1_d3_acked_entries_and_fences_survive_sigkill() {
    acked_entries_and_fences_survive_sigkill(StorageMode::TwoWrite);
}

#[test]
fn d1_d3_acked_entries_and_fences_survive_sigkill_in_single_write_mode() {
    acked_entries_and_fences_survive_sigkill(StorageMode::SingleWrite);
}

fn acked_entries_and_fences_survive_sigkill(mode: StorageMode) {
    let tmp = tempfile::tempdir().unwrap();
    let mut all_acked = Vec::new();
    let mut fenced = false;
    for n_acks in [3000, 6000] {
        let (acked, f) = load_and_kill(tmp.path(), n_acks, mode);
        assert!(acked.len() >= n_acks, "loader exited early");
        all_acked.extend(acked);
        fenced |= f;
    }
    let storage =
        Storage::open_default(StorageConfig { mode, ..StorageConfig::new(tmp.path()) }).unwrap();
    for (l, e) in &all_acked {
        let got =
            storage.read_entry(*l, *e).unwrap_or_else(|err| panic!("acked {l}/{e} lost: {err}"));
        assert_eq!(got.payload(), &payload(*l, *e)[..], "acked {l}/{e} differs");
    }
    assert!(fenced, "the loader fences ledger 4 after 500 entries");
    let zombie = folio_proto::Entry::encode(
        folio_proto::EntryHeader {
            ledger_id: 4,
            entry_id: 10_000,
            last_add_confirmed: -1,
            length: 0,
        },
        b"zombie",
    );
    let err =
        storage.add_entry(zombie.into_bytes(), &[3u8; 20], false, Box::new(|_| {})).unwrap_err();
    assert_eq!(err.status(), Status::Fenced);
}
