//! `folio bookie inspect DIR`: a stopped bookie's data dir in human terms. Reads only.

use std::path::Path;

use folio_bookie::fs::{FileSystem, RealFs};
use folio_bookie::index::{self, EntryLogState, FjallKv, KvStore, LedgerState, Table};
use folio_bookie::journal::{self, JournalRecord};
use folio_bookie::{bookie, entry_log};

pub fn run(dir: &Path, gc: bool) -> Result<(), String> {
    let journal_dir = dir.join("journal");
    let ledger_dir = dir.join("ledgers");
    if !journal_dir.exists() && !ledger_dir.exists() {
        return Err(format!(
            "{} has no journal/ or ledgers/ directory: not a bookie data dir",
            dir.display()
        ));
    }
    println!("data dir: {}", dir.display());
    for d in [&journal_dir, &ledger_dir] {
        match std::fs::read_to_string(d.join(bookie::COOKIE_FILE)) {
            Ok(c) => println!(
                "cookie in {}: {}",
                d.display(),
                c.lines().skip(1).collect::<Vec<_>>().join(", ")
            ),
            Err(_) => println!("cookie in {}: none", d.display()),
        }
    }
    let dirty = ledger_dir.join(bookie::DIRTY_FILE).exists();
    println!(
        "DIRTY marker: {}",
        if dirty {
            "present (running, or the last shutdown was not clean)"
        } else {
            "absent (clean shutdown)"
        }
    );
    journal_section(&journal_dir)?;
    let kv = FjallKv::open(&ledger_dir.join("index"))
        .map_err(|e| format!("opening the index (is the bookie still running?): {e}"))?;
    entry_log_section(&ledger_dir.join("entrylogs"), &kv)?;
    ledger_section(&kv)?;
    if gc {
        gc_section(&kv)?;
    }
    let flags = kv.get(Table::Meta, index::META_FLAGS).map_err(|e| e.to_string())?;
    let flags = flags.and_then(|v| v.try_into().ok()).map_or(0, u64::from_le_bytes);
    let needs_check = flags & index::flags::NEEDS_INTEGRITY_CHECK != 0;
    println!(
        "storage flags: {flags:#x}{}",
        if needs_check { " (integrity check needed)" } else { "" }
    );
    Ok(())
}

fn journal_section(dir: &Path) -> Result<(), String> {
    let fs = RealFs;
    println!("journal: {}", dir.display());
    let mark = journal::read_checkpoint(&fs, dir).map_err(|e| e.to_string())?;
    match mark {
        Some(m) => println!(
            "  checkpoint: replay starts in file {:016x} at offset {}",
            m.file_id, m.offset
        ),
        None => println!("  checkpoint: none (replay starts at the first file)"),
    }
    for name in fs.list_dir(dir).unwrap_or_default().iter().filter(|n| n.ends_with(".jnl")) {
        let len = std::fs::metadata(dir.join(name)).map(|m| m.len()).unwrap_or(0);
        println!("  file {name}: {len} bytes");
    }
    let (mut entries, mut keys, mut fences, mut lacs) = (0u64, 0u64, 0u64, 0u64);
    let report = journal::replay(&fs, dir, mark, &mut |r, _| {
        match r {
            JournalRecord::Entry(_) => entries += 1,
            JournalRecord::MasterKey { .. } => keys += 1,
            JournalRecord::Fence { .. } => fences += 1,
            JournalRecord::ExplicitLac { .. } => lacs += 1,
            JournalRecord::FileEnd { .. } | JournalRecord::SyncMark { .. } => {}
        }
        Ok(())
    });
    match report {
        Ok(r) => {
            println!(
                "  to replay: {entries} entries, {keys} master keys, {fences} fences, {lacs} explicit LACs"
            );
            match r.stop {
                Some((at, reason)) => println!(
                    "  records end in file {:016x} at offset {} ({reason:?})",
                    at.file_id, at.offset
                ),
                None => println!("  records end at a sealed file"),
            }
        }
        Err(e) => println!("  REPLAY WOULD FAIL: {e}"),
    }
    Ok(())
}

fn entry_log_section(dir: &Path, kv: &FjallKv) -> Result<(), String> {
    println!("entry logs: {}", dir.display());
    let mut end = index::META_ELOG_PREFIX.to_vec();
    end.push(0xff);
    let states = kv
        .range(Table::Meta, index::META_ELOG_PREFIX, &end, usize::MAX)
        .map_err(|e| e.to_string())?;
    let mut known = std::collections::BTreeSet::new();
    for (k, v) in states {
        let Some(id) = index::parse_elog_key(&k) else { continue };
        known.insert(id);
        let st = EntryLogState::decode(&v).map_err(|e| e.to_string())?;
        let size = std::fs::metadata(dir.join(entry_log::file_name(id))).map(|m| m.len());
        let size = size.map_or("MISSING".to_string(), |s| format!("{s} bytes"));
        if st.sealed {
            let bytes: u64 = st.ledgers.iter().map(|(_, b)| b).sum();
            println!(
                "  log {id:016x}: sealed (flushed, rotated), {size}, {} ledgers, {bytes} entry bytes",
                st.ledgers.len()
            );
        } else {
            println!("  log {id:016x}: active, {size}");
        }
    }
    for name in std::fs::read_dir(dir)
        .map(|it| it.filter_map(|e| e.ok()).collect::<Vec<_>>())
        .unwrap_or_default()
    {
        let name = name.file_name().to_string_lossy().into_owned();
        if let Some(id) = entry_log::parse_file_name(&name)
            && !known.contains(&id)
        {
            println!(
                "  log {id:016x}: on disk but not in the index (left by an interrupted flush; removed at open)"
            );
        }
    }
    Ok(())
}

fn ledger_section(kv: &FjallKv) -> Result<(), String> {
    let ledgers =
        kv.range(Table::Ledgers, &[], &[0xff; 9], usize::MAX).map_err(|e| e.to_string())?;
    println!("ledgers: {}", ledgers.len());
    for (k, v) in ledgers {
        let id = index::parse_ledger_key(&k).map_err(|e| e.to_string())?;
        let st = LedgerState::decode(&v).map_err(|e| e.to_string())?;
        let (start, end) = index::ledger_location_range(id);
        let locs =
            kv.range(Table::Locations, &start, &end, usize::MAX).map_err(|e| e.to_string())?;
        let span = match (locs.first(), locs.last()) {
            (Some((a, _)), Some((b, _))) => {
                let first = index::parse_location_key(a).map_err(|e| e.to_string())?.1;
                let last = index::parse_location_key(b).map_err(|e| e.to_string())?.1;
                format!("{} entries flushed ({first}..={last})", locs.len())
            }
            _ => "no entries flushed".to_string(),
        };
        let mut notes = Vec::new();
        if st.fenced {
            notes.push("fenced".to_string());
        }
        if st.limbo {
            notes.push("LIMBO".to_string());
        }
        notes.push(
            if st.master_key.is_some() { "master key set" } else { "no master key" }.to_string(),
        );
        if let Some(lac) = st.explicit_lac {
            notes.push(format!("explicit LAC {lac}"));
        }
        println!("  ledger {id}: {span}; {}", notes.join(", "));
    }
    Ok(())
}

/// Why each sealed log is still on disk: the ledgers this bookie still has that are in it.
/// (Whether those ledgers still exist in the metadata store is for a live GC pass to say.)
fn gc_section(kv: &FjallKv) -> Result<(), String> {
    let mut end = index::META_ELOG_PREFIX.to_vec();
    end.push(0xff);
    println!("gc view (sealed entry logs):");
    for (k, v) in kv
        .range(Table::Meta, index::META_ELOG_PREFIX, &end, usize::MAX)
        .map_err(|e| e.to_string())?
    {
        let Some(id) = index::parse_elog_key(&k) else { continue };
        let st = EntryLogState::decode(&v).map_err(|e| e.to_string())?;
        if !st.sealed {
            println!("  log {id:016x}: active, not a GC candidate until sealed");
            continue;
        }
        let mut pins = Vec::new();
        let mut live = 0u64;
        for (ledger, bytes) in &st.ledgers {
            if kv
                .get(Table::Ledgers, &index::ledger_key(*ledger))
                .map_err(|e| e.to_string())?
                .is_some()
            {
                pins.push(ledger.to_string());
                live += bytes;
            }
        }
        if pins.is_empty() {
            println!(
                "  log {id:016x}: garbage ({} bytes), deleted by the next GC pass",
                st.size_bytes
            );
        } else {
            let usage = live as f64 / st.size_bytes.max(1) as f64;
            println!(
                "  log {id:016x}: kept, usage {:.0} %, pinned by ledgers {}",
                usage * 100.0,
                pins.join(", ")
            );
        }
    }
    Ok(())
}
