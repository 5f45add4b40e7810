//! The embedded metadata store across a real SIGKILL: every committed transaction is there
//! after reopen, no transaction is half there, nothing beyond the ones in flight appears, and
//! the id sequence never repeats an id handed out before the kill. Run with one writer
//! (every transaction its own commit) and with several (transactions sharing group commits).

use std::collections::BTreeSet;
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

use folio_meta::MetadataStore;
use folio_meta::embedded::EmbeddedStore;

fn load_and_kill(
    dir: &std::path::Path,
    n_commits: usize,
    writers: usize,
) -> (Vec<usize>, Vec<u64>) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_folio"))
        .args(["--log", "warn", "debug", "meta-load", "--writers", &writers.to_string(), "--dir"])
        .arg(dir)
        .stdout(Stdio::piped())
        .spawn()
        .expect("spawn folio");
    let stdout = child.stdout.take().expect("piped stdout");
    let (mut committed, mut ids) = (Vec::new(), Vec::new());
    let take =
        |line: String, committed: &mut Vec<usize>, ids: &mut Vec<u64>| match line.split_once(' ') {
            Some(("committed", n)) => committed.push(n.parse().unwrap()),
            Some(("id", id)) => ids.push(id.parse().unwrap()),
            _ => panic!("unexpected loader output: {line}"),
        };
    let mut lines = BufReader::new(stdout).lines();
    for line in lines.by_ref() {
        take(line.expect("read loader output"), &mut committed, &mut ids);
        if committed.len() >= n_commits {
            break;
        }
    }
    child.kill().expect("SIGKILL the loader");
    let _ = child.wait();
    // The loader went on between the line read last and the kill: what it printed meanwhile
    // is still in the pipe, and it committed all of that too. Reading it is what makes
    // "nothing beyond the one transaction in flight" a fact about the kill, not about
    // how far this reader had got.
    for line in lines.map_while(Result::ok) {
        take(line, &mut committed, &mut ids);
    }
    (committed, ids)
}

#[tokio::test]
async fn committed_transactions_survive_sigkill_whole_and_ids_never_repeat() {
    survive_kills(1).await;
}

#[tokio::test]
async fn group_committed_transactions_survive_sigkill_whole_and_ids_never_repeat() {
    survive_kills(8).await;
}

async fn survive_kills(writers: usize) {
    let tmp = tempfile::tempdir().unwrap();
    let (mut committed, mut ids) = (Vec::new(), Vec::new());
    let kills = [150, 150];
    for n in kills {
        let (c, i) = load_and_kill(tmp.path(), n, writers);
        assert!(c.len() >= n, "loader exited early");
        committed.extend(c);
        ids.extend(i);
    }
    let store = EmbeddedStore::open(tmp.path()).unwrap();
    let keys = |p: &'static str| {
        let store = &store;
        async move {
            folio_meta::list_all(store, p)
                .await
                .unwrap()
                .into_iter()
                .map(|v| v.key[2..].parse::<usize>().unwrap())
                .collect::<BTreeSet<usize>>()
        }
    };
    let (a, b) = (keys("a/").await, keys("b/").await);
    assert_eq!(a, b, "a transaction is never half applied");
    for n in &committed {
        assert!(a.contains(n), "committed transaction {n} lost");
    }
    let unreported: Vec<&usize> = a.iter().filter(|n| !committed.contains(n)).collect();
    assert!(
        unreported.len() <= writers * kills.len(),
        "only the transactions in flight at a kill ({writers} per kill) may appear unreported: {unreported:?}"
    );
    let seen: BTreeSet<u64> = ids.iter().copied().collect();
    assert_eq!(seen.len(), ids.len(), "an id was handed out twice across the kill");
    let next = store.next_id("ids").await.unwrap();
    assert!(ids.iter().all(|id| *id < next), "the sequence went backwards after the kill");
}
