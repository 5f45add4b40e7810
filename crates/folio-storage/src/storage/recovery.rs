use super::*;

impl Storage {
    /// Opens (and recovers) storage: seal entry logs left active by a crash, replay the
    /// journal from the checkpoint, flush what was replayed, start the journal and flusher.
    pub fn open(
        config: StorageConfig,
        fs: Arc<dyn FileSystem>,
        kv: Arc<dyn KvStore>,
    ) -> Result<Storage> {
        config.validate()?;
        let log_dir = config.ledger_dir.join("entrylogs");
        for d in [&config.journal_dir, &config.ledger_dir, &log_dir] {
            fs.create_dir_all(d)
                .map_err(|e| StorageError::io(format!("creating {}", d.display()), e))?;
        }
        check_index_checkpoint(fs.as_ref(), kv.as_ref(), &config.journal_dir)?;
        let mut recovery = RecoveryReport::default();
        let mut ledgers = load_ledgers(kv.as_ref())?;
        // An incoming copy's grace counts from the open (its last add's time is not kept).
        let opened_ms = config.clock.now_ms();
        for l in ledgers.values_mut().filter(|l| l.state.incoming) {
            l.incoming_ms = Some(opened_ms);
        }
        recovery.n_ledgers = ledgers.len();
        let tombstones = Tombstones::load(kv.as_ref(), index::tombstones::TOMBSTONE_RANGES_MAX)?;
        let next_log_id = recover_entry_logs(fs.as_ref(), kv.as_ref(), &log_dir, &mut recovery)?;
        let replay_from = replay_start(fs.as_ref(), kv.as_ref(), &config)?;
        let data = match config.mode {
            StorageMode::SingleWrite => data_files::recover_data_files(
                fs.as_ref(),
                kv.as_ref(),
                &config.journal_dir,
                replay_from,
                &mut recovery,
            )?,
            StorageMode::TwoWrite => {
                refuse_data_files(kv.as_ref())?;
                DataFiles::default()
            }
        };
        let journal_dir =
            (config.mode == StorageMode::SingleWrite).then(|| config.journal_dir.clone());
        let inner = Arc::new(Inner {
            cache: WriteCache::new(config.write_cache_bytes),
            read_cache: Mutex::new(ReadCache::new(config.read_cache_bytes)),
            reads_from_disk: Mutex::new(Vec::new()),
            reads_from_disk_done: Condvar::new(),
            reader: EntryLogReader::new(fs.clone(), log_dir.clone(), journal_dir),
            located: Arc::new(Located::default()),
            ledgers: Mutex::new(ledgers),
            tombstones: Mutex::new(tombstones),
            flush: Mutex::new(FlushState {
                logs: EntryLogSet::new(fs.clone(), log_dir.clone(), &config, next_log_id),
                data,
                last_mark: None,
                last_swap: std::time::Instant::now(),
            }),
            signal: Mutex::new(FlushSignal::default()),
            signal_cond: Condvar::new(),
            poison: Poison::default(),
            closed: AtomicBool::new(false),
            journal: OnceLock::new(),
            config,
            fs,
            kv,
            log_dir,
        });
        recovery.journal = inner.replay_journal(replay_from)?;
        inner.start_journal(&recovery.journal)?;
        let flusher = if inner.config.stepped().is_some() {
            None // the opener flushes through its `Stepper`
        } else {
            let flusher_inner = inner.clone();
            let thread = std::thread::Builder::new()
                .name("folio-flusher".into())
                .spawn(move || flusher_inner.run_flusher())
                .map_err(|e| StorageError::io("spawning flusher", e))?;
            Some(thread)
        };
        tracing::info!(
            journal_records = recovery.journal.n_records,
            ledgers = recovery.n_ledgers,
            sealed_at_open = recovery.entry_logs_sealed_at_open.len(),
            "storage opened"
        );
        Ok(Storage { inner, flusher: Mutex::new(flusher), recovery })
    }
}

impl Inner {
    /// Starts the journal after replay, and moves the checkpoint to the new file it opened.
    fn start_journal(&self, replayed: &ReplayReport) -> Result<()> {
        let single_write = self.config.mode == StorageMode::SingleWrite;
        let journal = Journal::start(
            self.fs.clone(),
            self.config.journal_dir.clone(),
            self.config.journal.clone(),
            replayed,
            self.poison.clone(),
            self.config.stepped().cloned(),
            single_write.then(|| Located::hook(self.located.clone())),
        )?;
        let mark = journal.written_mark();
        self.journal.set(journal).expect("journal set once");
        if single_write {
            // Everything replayed is indexed; this flush seals the files before the new one
            // and moves the checkpoint to it.
            self.flush_now()
        } else {
            let mut flush = self.flush.lock().expect("flush lock");
            self.commit_checkpointed(&mut flush, KvBatch::default(), Some(mark))
        }
    }

    pub(super) fn replay_journal(&self, mark: Option<JournalPosition>) -> Result<ReplayReport> {
        let dir = self.config.journal_dir.clone();
        let single_write = self.config.mode == StorageMode::SingleWrite;
        let mut apply = |record: JournalRecord, at: JournalPosition| -> Result<()> {
            // Records of a ledger deleted since are dropped: it is never created again.
            let ledger_id = record.ledger_id();
            if ledger_id
                .is_some_and(|l| self.tombstones.lock().expect("tombstones lock").contains(l))
            {
                return Ok(());
            }
            match record {
                JournalRecord::Entry(e) => {
                    let mut ledgers = self.lock_ledgers();
                    let l = ledgers.entry(e.ledger_id()).or_default();
                    l.dirty = true;
                    let lac = e.last_add_confirmed();
                    l.piggybacked_lac = Some(l.piggybacked_lac.map_or(lac, |x| x.max(lac)));
                    drop(ledgers);
                    if single_write {
                        self.located.push(&e, at);
                    }
                    self.cache.insert_unbounded(e);
                    if self.cache.is_active_full() {
                        self.flush_with_mark(None, false)?;
                    }
                }
                JournalRecord::MasterKey { ledger_id, key } => {
                    let mut ledgers = self.lock_ledgers();
                    let l = ledgers.entry(ledger_id).or_default();
                    if l.state.master_key.is_none() {
                        l.state.master_key = Some(key);
                        l.dirty = true;
                    }
                }
                JournalRecord::Fence { ledger_id } => {
                    let mut ledgers = self.lock_ledgers();
                    let l = ledgers.entry(ledger_id).or_default();
                    l.state.fenced = true;
                    l.dirty = true;
                }
                JournalRecord::ExplicitLac { ledger_id, lac } => {
                    let mut ledgers = self.lock_ledgers();
                    let l = ledgers.entry(ledger_id).or_default();
                    l.state.explicit_lac = Some(l.state.explicit_lac.map_or(lac, |x| x.max(lac)));
                    l.dirty = true;
                }
                JournalRecord::FileEnd { .. } | JournalRecord::SyncMark { .. } => {}
            }
            Ok(())
        };
        let report = journal::replay(self.fs.as_ref(), &dir, mark, &mut apply)?;
        self.flush_with_mark(None, false)?;
        Ok(report)
    }
}

/// Where replay starts: the journal's checkpoint file; in single-write mode the index's
/// checkpoint record when it is ahead (the file is written after the index commits, and a
/// file id is never used twice, so the index's record is the one that counts).
fn replay_start(
    fs: &dyn FileSystem,
    kv: &dyn KvStore,
    config: &StorageConfig,
) -> Result<Option<JournalPosition>> {
    let file_mark = journal::read_checkpoint(fs, &config.journal_dir)?;
    if config.mode == StorageMode::TwoWrite {
        return Ok(file_mark);
    }
    let index_mark = match kv.get(Table::Meta, index::META_CHECKPOINT)? {
        Some(v) => Some(
            journal::format::decode_checkpoint(&v)
                .map_err(|d| StorageError::corruption("index: checkpoint record", d.to_string()))?,
        ),
        None => None,
    };
    Ok(file_mark.max(index_mark))
}

/// Two-write mode would recycle journal files the index points into: a bookie whose data
/// is in single-write data files opens in single-write mode only.
fn refuse_data_files(kv: &dyn KvStore) -> Result<()> {
    let n =
        entry_log_states(kv)?.iter().filter(|(id, _)| index::data_file_id(*id).is_some()).count();
    if n > 0 {
        return Err(StorageError::BadRequest(format!(
            "this bookie keeps entries in {n} single-write data files (its journal's files); \
             open it with storage.mode = single-write. Switching a bookie from two-write to \
             single-write works; the way back does not"
        )));
    }
    Ok(())
}

pub(super) fn load_ledgers(kv: &dyn KvStore) -> Result<BTreeMap<LedgerId, Ledger>> {
    let mut out = BTreeMap::new();
    let mut start = Vec::new();
    loop {
        let page = kv.range(Table::Ledgers, &start, &[0xff; 9], INDEX_PAGE)?;
        let Some(last) = page.last() else { break };
        start = last.0.clone();
        start.push(0);
        let full = page.len() == INDEX_PAGE;
        for (k, v) in page {
            let id = index::parse_ledger_key(&k)?;
            out.insert(
                id,
                Ledger {
                    state: LedgerState::decode(&v)?,
                    piggybacked_lac: None,
                    dirty: false,
                    key_unsynced: None,
                    incoming_ms: None,
                },
            );
        }
        if !full {
            break;
        }
    }
    Ok(out)
}

pub(super) fn entry_log_states(kv: &dyn KvStore) -> Result<Vec<(u64, EntryLogState)>> {
    let mut end = index::META_ELOG_PREFIX.to_vec();
    end.push(0xff);
    kv.range(Table::Meta, index::META_ELOG_PREFIX, &end, usize::MAX)?
        .into_iter()
        .map(|(k, v)| {
            let id = index::parse_elog_key(&k)
                .ok_or_else(|| StorageError::corruption("index", "bad entry log key"))?;
            Ok((id, EntryLogState::decode(&v)?))
        })
        .collect()
}

/// Seals logs the index lists as active (a crash interrupted them), removes log files the
/// index never listed (created by a flush that did not commit), and returns the next log id.
pub(super) fn recover_entry_logs(
    fs: &dyn FileSystem,
    kv: &dyn KvStore,
    dir: &Path,
    report: &mut RecoveryReport,
) -> Result<u64> {
    let mut states = entry_log_states(kv)?;
    states.retain(|(id, _)| index::data_file_id(*id).is_none()); // data files: data_files.rs
    let on_disk: Vec<u64> = fs
        .list_dir(dir)
        .map_err(|e| StorageError::io("listing entry logs", e))?
        .iter()
        .filter_map(|n| entry_log::parse_file_name(n))
        .collect();
    let known: BTreeMap<u64, &EntryLogState> = states.iter().map(|(id, s)| (*id, s)).collect();
    let mut batch = KvBatch::default();
    for (id, state) in &states {
        if !on_disk.contains(id) {
            return Err(StorageError::corruption(
                dir.display().to_string(),
                format!(
                    "entry log {} is in the index but missing on disk",
                    entry_log::file_name(*id)
                ),
            ));
        }
        if !state.sealed {
            let scan = entry_log::scan(fs, dir, *id, &mut |_, _| {})?;
            if scan.valid_end < state.size_bytes {
                // The index may point at entries up to `size_bytes`, synced before it was
                // committed: a bad frame before there is damage, and sealing the log at it
                // would overwrite entries a reader still finds through the index.
                return Err(StorageError::corruption(
                    dir.join(entry_log::file_name(*id)).display().to_string(),
                    format!(
                        "the frame at offset {} is damaged ({:?}) but entries up to offset {} \
                         were durable and indexed. Refusing to start; restore the disk, or \
                         format this bookie and re-replicate its ledgers from their other copies",
                        scan.valid_end, scan.stop, state.size_bytes
                    ),
                ));
            }
            let sealed = EntryLogWriter::reopen_for_seal(fs, dir, &scan)?.seal()?;
            batch.put(Table::Meta, index::elog_key(*id), sealed.encode());
            report.entry_logs_sealed_at_open.push(*id);
        }
    }
    for id in &on_disk {
        if !known.contains_key(id) {
            fs.remove_file(&dir.join(entry_log::file_name(*id)))
                .map_err(|e| StorageError::io("removing orphan entry log", e))?;
            report.orphan_entry_logs_removed.push(*id);
        }
    }
    fs.sync_dir(dir).map_err(|e| StorageError::io("syncing entry log dir", e))?;
    let stored_next = kv.get(Table::Meta, index::META_NEXT_LOG_ID)?.map_or(Ok(1), |v| {
        v.try_into()
            .map(u64::from_le_bytes)
            .map_err(|_| StorageError::corruption("index", "next_log_id"))
    })?;
    let next = on_disk
        .iter()
        .map(|id| id + 1)
        .chain(states.iter().map(|(id, _)| id + 1))
        .fold(stored_next, u64::max);
    batch.put(Table::Meta, index::META_NEXT_LOG_ID.to_vec(), next.to_le_bytes().to_vec());
    kv.commit(batch)?;
    Ok(next)
}

/// The index must hold every flush up to the journal's checkpoint file (see
/// `index::META_CHECKPOINT`). Checked before anything is written at open; an index from
/// before that record (it has a next log id and no record) passes.
pub(super) fn check_index_checkpoint(
    fs: &dyn FileSystem,
    kv: &dyn KvStore,
    dir: &Path,
) -> Result<()> {
    let Some(file_mark) = journal::read_checkpoint(fs, dir)? else {
        return Ok(());
    };
    let lost = |held: String| {
        StorageError::corruption(
            format!(
                "index (its files under the ledger dir's index/), checked against {}",
                dir.join("checkpoint").display()
            ),
            format!(
                "the index lost committed flushes: it holds {held}, the journal's checkpoint says {file_mark:?} (the journal files that would replay the rest are gone); the index is damaged"
            ),
        )
    };
    let Some(v) = kv.get(Table::Meta, index::META_CHECKPOINT)? else {
        // Every open commits the next log id before the journal's first checkpoint: an
        // index without one lost everything; one with it predates the record.
        if kv.get(Table::Meta, index::META_NEXT_LOG_ID)?.is_none() {
            return Err(lost("no flush at all".into()));
        }
        tracing::warn!(
            "the index has no checkpoint record yet (written by older versions); the next flush writes one"
        );
        return Ok(());
    };
    let index_mark = journal::format::decode_checkpoint(&v)
        .map_err(|d| StorageError::corruption("index: checkpoint record", d.to_string()))?;
    if index_mark < file_mark {
        return Err(lost(format!("the flushes up to journal position {index_mark:?}")));
    }
    Ok(())
}
