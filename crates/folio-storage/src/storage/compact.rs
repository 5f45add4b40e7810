use super::*;

impl Storage {
    /// Deletes a sealed entry log that holds no live ledger; returns the bytes freed.
    ///
    /// Order matters for L1: the index record goes first, then the file. A crash between
    /// the two leaves a file the index does not list, which `open` removes; the reverse
    /// order could leave an index record without its file, which `open` refuses.
    pub fn delete_entry_log(&self, log_id: u64) -> Result<u64> {
        self.inner.check_poison()?;
        let _flush = self.inner.flush.lock().expect("flush lock");
        let Some(state) = self.inner.kv.get(Table::Meta, &index::elog_key(log_id))? else {
            return Ok(0);
        };
        let state = EntryLogState::decode(&state)?;
        assert!(state.sealed, "only sealed entry logs are ever deleted");
        let live: Vec<LedgerId> = {
            let ledgers = self.inner.lock_ledgers();
            state.ledgers.iter().map(|(l, _)| *l).filter(|l| ledgers.contains_key(l)).collect()
        };
        if !live.is_empty() {
            return Err(StorageError::BadRequest(format!(
                "entry log {log_id} still holds live ledgers {live:?}"
            )));
        }
        let mut b = KvBatch::default();
        b.delete(Table::Meta, index::elog_key(log_id));
        self.inner.kv.commit(b)?;
        self.inner.reader.forget(log_id);
        self.inner.remove_log_file(log_id)?;
        tracing::info!(log_id, bytes = state.size_bytes, "entry log deleted");
        Ok(state.size_bytes)
    }

    /// Compacts a sealed entry log: copies its live entries into the current log, syncs,
    /// then in one index batch points their locations at the copies *and* removes the old
    /// log's record, and only then removes the old file. A crash before the batch leaves the
    /// old log in force (the copies are unreferenced bytes in a newer log); a crash after it
    /// leaves an unlisted file that `open` removes. Returns the bytes freed.
    pub fn compact_entry_log(&self, log_id: u64) -> Result<u64> {
        self.inner.check_poison()?;
        let result = self.inner.compact(log_id);
        if let Err(e) = &result
            && matches!(e, StorageError::Io { .. })
        {
            self.inner.poison(PoisonReason::Compaction { log_id, error: e.to_string() });
        }
        result
    }
}

impl Inner {
    /// Removes a log's file durably: an entry log is deleted, a single-write data file goes
    /// to the journal's recycle pool (or is deleted when the pool is full).
    fn remove_log_file(&self, log_id: u64) -> Result<()> {
        if let (Some(file_id), Some(journal)) = (index::data_file_id(log_id), self.journal.get()) {
            return journal.recycle(file_id);
        }
        let path = self.log_path(log_id);
        self.fs
            .remove_file(&path)
            .map_err(|e| StorageError::io(format!("removing {}", path.display()), e))?;
        let dir = path.parent().unwrap_or(&self.log_dir);
        self.fs.sync_dir(dir).map_err(|e| StorageError::io("syncing a log dir", e))
    }

    pub(super) fn compact(&self, log_id: u64) -> Result<u64> {
        let mut flush = self.flush.lock().expect("flush lock");
        let Some(state) = self.kv.get(Table::Meta, &index::elog_key(log_id))? else { return Ok(0) };
        let state = EntryLogState::decode(&state)?;
        assert!(state.sealed, "only sealed entry logs are compacted");
        if flush.logs.is_active(log_id) {
            return Ok(0);
        }
        let live: Vec<LedgerId> = {
            let ledgers = self.lock_ledgers();
            state.ledgers.iter().map(|(l, _)| *l).filter(|l| ledgers.contains_key(l)).collect()
        };
        let mut batch = KvBatch::default();
        let mut copied = 0u64;
        for ledger_id in live {
            self.location_pages(ledger_id, |page, _| {
                for (k, v) in &page {
                    let loc = EntryLocation::decode(v)?;
                    if loc.log_id != log_id {
                        continue;
                    }
                    let (_, entry_id) = index::parse_location_key(k)?;
                    let entry = self.reader.read(loc, ledger_id, entry_id)?;
                    let new = flush.logs.append_copy(&entry, &mut batch)?;
                    batch.put(Table::Locations, k.clone(), new.encode());
                    copied += 1;
                }
                Ok(())
            })?;
        }
        flush.logs.finish_compaction(&mut batch)?;
        batch.delete(Table::Meta, index::elog_key(log_id));
        flush.logs.record_next_log_id(&mut batch);
        self.kv.commit(batch)?;
        self.reader.forget(log_id);
        self.read_cache.lock().expect("read cache lock").clear();
        self.remove_log_file(log_id)?;
        tracing::info!(log_id, copied, bytes = state.size_bytes, "entry log compacted");
        Ok(state.size_bytes)
    }
}
