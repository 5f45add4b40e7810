use super::*;

/// Read-ahead in an interleaved file reads at most this share of other ledgers' bytes on
/// top of the entries it loads (read amplification <= 1.5).
const READ_AHEAD_GAP_MAX_OF_USEFUL: f64 = 0.5;

/// One read of a read-ahead window: a stretch `start..end` of one log holding frames of
/// the ledger's entries up to `last` (at `frames`, from `start`), `useful` bytes of it theirs.
struct Run {
    log_id: u64,
    start: u64,
    end: u64,
    useful: u64,
    frames: Vec<u64>,
    last: EntryId,
}

/// A read from disk in progress (see `Inner::reads_from_disk`): registered for its life.
pub(super) struct ReadingFromDisk<'a> {
    inner: &'a Inner,
    span: (LedgerId, EntryId, EntryId),
}

impl Drop for ReadingFromDisk<'_> {
    fn drop(&mut self) {
        let mut reading = self.inner.reads_from_disk.lock().expect("reads from disk lock");
        if let Some(i) = reading.iter().position(|s| *s == self.span) {
            reading.swap_remove(i);
        }
        drop(reading);
        self.inner.reads_from_disk_done.notify_all();
    }
}

impl Inner {
    pub(super) fn missing(&self, ledger_id: LedgerId, entry_id: EntryId) -> StorageError {
        match self.lock_ledgers().get(&ledger_id) {
            None => StorageError::NoLedger(ledger_id),
            Some(l) if l.state.limbo => StorageError::Unknown(ledger_id, entry_id),
            Some(_) => StorageError::NoEntry(ledger_id, entry_id),
        }
    }

    pub(super) fn ledger_usage(&self, ledger_id: LedgerId) -> Result<LedgerUsage> {
        self.check_poison()?;
        let cached = self.cache.usage(ledger_id);
        let (mut entries, mut bytes) = (cached.len() as u64, cached.values().sum::<u64>());
        self.location_pages(ledger_id, |page, _| {
            for (k, v) in &page {
                if !cached.contains_key(&index::parse_location_key(k)?.1) {
                    entries += 1;
                    bytes += u64::from(EntryLocation::decode(v)?.len);
                }
            }
            Ok(())
        })?;
        Ok(LedgerUsage { ledger_id, entries, bytes })
    }

    pub(super) fn list_entries(&self, ledger_id: LedgerId) -> Result<Vec<EntryId>> {
        self.check_poison()?;
        if !self.lock_ledgers().contains_key(&ledger_id) {
            return Err(self.missing(ledger_id, INVALID_ENTRY_ID));
        }
        let mut ids: std::collections::BTreeSet<EntryId> =
            self.cache.entry_ids(ledger_id).into_iter().collect();
        self.location_pages(ledger_id, |page, _| {
            for (k, _) in &page {
                ids.insert(index::parse_location_key(k)?.1);
            }
            Ok(())
        })?;
        Ok(ids.into_iter().collect())
    }

    /// Calls `f` with each page of a ledger's index locations, in entry order, and whether
    /// it is the last page.
    pub(super) fn location_pages(
        &self,
        ledger_id: LedgerId,
        mut f: impl FnMut(Vec<index::kv::KvPair>, bool) -> Result<()>,
    ) -> Result<()> {
        let (mut start, end) = index::ledger_location_range(ledger_id);
        loop {
            let page = self.kv.range(Table::Locations, &start, &end, INDEX_PAGE)?;
            let last = page.len() < INDEX_PAGE;
            if let Some((k, _)) = page.last() {
                start = k.clone();
                start.push(0);
            }
            f(page, last)?;
            if last {
                return Ok(());
            }
        }
    }

    pub(super) fn last_entry(&self, ledger_id: LedgerId) -> Result<Option<EntryId>> {
        let cached = self.cache.last_entry(ledger_id);
        let (start, end) = index::ledger_location_range(ledger_id);
        let indexed = match self.kv.last_in_range(Table::Locations, &start, &end)? {
            Some((k, _)) => Some(index::parse_location_key(&k)?.1),
            None => None,
        };
        Ok(cached.max(indexed))
    }

    pub(super) fn read_entry(&self, ledger_id: LedgerId, entry_id: EntryId) -> Result<Entry> {
        self.check_poison()?;
        let entry_id = if entry_id == INVALID_ENTRY_ID {
            match self.last_entry(ledger_id)? {
                Some(e) => e,
                None => return Err(self.missing(ledger_id, entry_id)),
            }
        } else if entry_id < 0 {
            return Err(StorageError::BadRequest(format!("entry id {entry_id}")));
        } else {
            entry_id
        };
        if !self.lock_ledgers().contains_key(&ledger_id) {
            return Err(self.missing(ledger_id, entry_id));
        }
        if let Some(e) = self.cache.get(ledger_id, entry_id) {
            return Ok(e);
        }
        // Else this read reads the entry and its read-ahead from disk; concurrent reads of
        // them wait for it (a sequential reader keeps several reads in flight).
        let _reading = match self.cached_or_claim(ledger_id, entry_id) {
            Ok(e) => return Ok(e),
            Err(reading) => reading,
        };
        let Some(loc) = self.kv.get(Table::Locations, &index::location_key(ledger_id, entry_id))?
        else {
            // It may have been flushed between the cache lookup and the index lookup.
            return self
                .cache
                .get(ledger_id, entry_id)
                .ok_or_else(|| self.missing(ledger_id, entry_id));
        };
        let loc = EntryLocation::decode(&loc)?;
        let entry = match self.reader.read(loc, ledger_id, entry_id) {
            Ok(e) => e,
            // Compaction may have moved the entry since the lookup, and removed its old file
            // (an I/O error) or handed it to the journal to write over (its checksum fails:
            // `journal::recycle`). Only a move excuses the error.
            Err(first @ (StorageError::Io { .. } | StorageError::Corruption { .. })) => {
                let key = index::location_key(ledger_id, entry_id);
                let Some(again) = self.kv.get(Table::Locations, &key)? else {
                    return Err(self.missing(ledger_id, entry_id));
                };
                let again = EntryLocation::decode(&again)?;
                if again == loc {
                    return Err(first);
                }
                self.reader.read(again, ledger_id, entry_id)?
            }
            Err(e) => return Err(e),
        };
        self.read_ahead(ledger_id, entry_id);
        Ok(entry)
    }

    /// The entry from the read cache, waiting first for a read from disk in progress that
    /// covers it; else (or after `read_wait_max`) the claim to read it and its read-ahead
    /// from disk, registered in the same critical section as the check.
    fn cached_or_claim(
        &self,
        ledger_id: LedgerId,
        entry_id: EntryId,
    ) -> std::result::Result<Entry, ReadingFromDisk<'_>> {
        let deadline = std::time::Instant::now() + self.config.read_wait_max;
        let mut reading = self.reads_from_disk.lock().expect("reads from disk lock");
        loop {
            if let Some(e) =
                self.read_cache.lock().expect("read cache lock").get(ledger_id, entry_id)
            {
                return Ok(e);
            }
            let covered = reading
                .iter()
                .any(|(l, from, end)| *l == ledger_id && (*from..*end).contains(&entry_id));
            let now = std::time::Instant::now();
            if !covered || now >= deadline {
                let end = entry_id.saturating_add(1 + self.config.read_ahead_entries as i64);
                let span = (ledger_id, entry_id, end);
                reading.push(span);
                return Err(ReadingFromDisk { inner: self, span });
            }
            reading = self
                .reads_from_disk_done
                .wait_timeout(reading, deadline - now)
                .expect("reads from disk lock")
                .0;
        }
    }

    /// Loads the entries that follow `entry_id` into the read cache: at most
    /// `read_ahead_entries` entries and `read_ahead_bytes` bytes, up to the first one cached
    /// already or being read by another reader; nothing when the next entry is cached (the
    /// reader is inside a window read before). Best effort: a failure here is logged, never
    /// returned.
    ///
    /// In single-write mode a ledger's entries come in runs between other ledgers' in the
    /// data files, so a window is several reads (`Run`s). Before reading them, this asks the
    /// kernel for all of them and for the next window's runs at once: the disk reads them in
    /// parallel, the reader's next window comes from the page cache, and no other ledger's
    /// bytes are fetched beyond the gaps a run steps over (data files are written with
    /// O_DIRECT, so nothing of them is in the page cache otherwise).
    pub(super) fn read_ahead(&self, ledger_id: LedgerId, entry_id: EntryId) {
        let n = self.config.read_ahead_entries;
        if n == 0 {
            return;
        }
        if self.read_cache.lock().expect("read cache lock").contains(ledger_id, entry_id + 1) {
            return;
        }
        let bytes_max = self.config.read_ahead_bytes.min(self.config.read_cache_bytes / 2) as u64;
        // Up to the next entry another read is reading from disk now (it reads ahead from
        // there itself).
        let stop = self
            .reads_from_disk
            .lock()
            .expect("reads from disk lock")
            .iter()
            .filter(|(l, from, _)| *l == ledger_id && *from > entry_id)
            .map(|(_, from, _)| *from)
            .min()
            .unwrap_or(i64::MAX)
            .min(entry_id.saturating_add(1 + n as i64));
        let Ok(runs) = self.window(ledger_id, entry_id + 1, stop, bytes_max, true) else { return };
        let Some(last) = runs.last().map(|r| r.last) else { return };
        let next_from = last.saturating_add(1);
        let next = next_from.saturating_add(n as i64);
        for run in runs.iter().skip(1) {
            self.reader.prefetch(run.log_id, run.start, run.end - run.start);
        }
        if let Ok(next_runs) = self.window(ledger_id, next_from, next, bytes_max, false) {
            for run in &next_runs {
                self.reader.prefetch(run.log_id, run.start, run.end - run.start);
            }
        }
        for run in runs {
            let len = (run.end - run.start) as usize;
            match self.reader.read_frames(run.log_id, run.start, len, &run.frames) {
                Ok(entries) => {
                    let mut rc = self.read_cache.lock().expect("read cache lock");
                    for e in entries {
                        rc.insert(e);
                    }
                }
                Err(e) => {
                    tracing::warn!(error = %e, "read-ahead failed");
                    return;
                }
            }
        }
    }

    /// The reads that load a ledger's entries `from..stop` (in entry order, at most
    /// `bytes_max` bytes of file in all), up to the first entry the read cache holds when
    /// `until_cached` (a read that overtook this one read it and its read-ahead already).
    /// A run steps over other ledgers' bytes between two of its entries as long as it reads
    /// at most `READ_AHEAD_GAP_MAX_OF_USEFUL` more bytes than it loads; else the next
    /// entry starts a new run.
    fn window(
        &self,
        ledger_id: LedgerId,
        from: EntryId,
        stop: EntryId,
        bytes_max: u64,
        until_cached: bool,
    ) -> Result<Vec<Run>> {
        let n = usize::try_from(stop.saturating_sub(from)).unwrap_or(0);
        if n == 0 {
            return Ok(Vec::new());
        }
        let start = index::location_key(ledger_id, from);
        let end = index::location_key(ledger_id, stop);
        let located = self.kv.range(Table::Locations, &start, &end, n)?;
        let cache = until_cached.then(|| self.read_cache.lock().expect("read cache lock"));
        let mut runs: Vec<Run> = Vec::new();
        let mut covering = 0u64;
        for (k, v) in located {
            let (loc, (_, entry_id)) = (EntryLocation::decode(&v)?, index::parse_location_key(&k)?);
            if cache.as_ref().is_some_and(|c| c.contains(ledger_id, entry_id)) {
                break;
            }
            let len = crate::frame::FRAME_HEADER_BYTES as u64 + u64::from(loc.len);
            let extends = runs.last().and_then(|r| {
                let gap = loc.offset.checked_sub(r.end).filter(|_| r.log_id == loc.log_id)?;
                let gaps = r.end - r.start - r.useful + gap;
                let fits = gaps as f64 <= (r.useful + len) as f64 * READ_AHEAD_GAP_MAX_OF_USEFUL;
                fits.then_some(gap)
            });
            let added = extends.map_or(len, |gap| gap + len);
            if covering + added > bytes_max {
                break;
            }
            covering += added;
            match (extends, runs.last_mut()) {
                (Some(_), Some(r)) => {
                    r.frames.push(loc.offset - r.start);
                    r.last = entry_id;
                    r.useful += len;
                    r.end = loc.offset + len;
                }
                _ => runs.push(Run {
                    log_id: loc.log_id,
                    start: loc.offset,
                    end: loc.offset + len,
                    useful: len,
                    frames: vec![0],
                    last: entry_id,
                }),
            }
        }
        Ok(runs)
    }

    pub(super) fn read_lac(&self, ledger_id: LedgerId) -> Result<EntryId> {
        self.check_poison()?;
        let (explicit, piggybacked) = match self.lock_ledgers().get(&ledger_id) {
            None => return Err(StorageError::NoLedger(ledger_id)),
            Some(l) => (l.state.explicit_lac, l.piggybacked_lac),
        };
        let piggybacked = match piggybacked {
            Some(p) => p,
            None => {
                let p = match self.last_entry(ledger_id)? {
                    Some(e) => self.read_entry(ledger_id, e)?.last_add_confirmed(),
                    None => INVALID_ENTRY_ID,
                };
                if let Some(l) = self.lock_ledgers().get_mut(&ledger_id) {
                    l.piggybacked_lac = Some(l.piggybacked_lac.map_or(p, |x| x.max(p)));
                }
                p
            }
        };
        let lac = explicit.map_or(piggybacked, |x| x.max(piggybacked));
        if lac == INVALID_ENTRY_ID
            && self.lock_ledgers().get(&ledger_id).is_some_and(|l| l.state.limbo)
        {
            return Err(StorageError::Unknown(ledger_id, INVALID_ENTRY_ID));
        }
        Ok(lac)
    }

    pub(super) fn storage_flags(&self) -> Result<u64> {
        match self.kv.get(Table::Meta, index::META_FLAGS)? {
            None => Ok(0),
            Some(v) => v
                .try_into()
                .map(u64::from_le_bytes)
                .map_err(|_| StorageError::corruption("index", "storage flags value")),
        }
    }
}
