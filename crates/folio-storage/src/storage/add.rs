use super::*;

impl Inner {
    pub(super) fn add_entry(
        &self,
        bytes: Bytes,
        key: &MasterKey,
        recovery: bool,
        done: AddCallback,
    ) -> Result<()> {
        self.check_poison()?;
        let entry = Entry::decode(bytes)?;
        let ledger_id = entry.ledger_id();
        // The key's flag while its record may not be synced (journal-less adds wait for it).
        let key_pending;
        {
            let mut ledgers = self.lock_ledgers();
            let ledger = self.live_entry(&mut ledgers, ledger_id)?;
            match ledger.state.master_key {
                Some(k) if k != *key => return Err(StorageError::Unauthorized(ledger_id)),
                Some(_) => key_pending = ledger.key_pending(),
                None => {
                    ledger.state.master_key = Some(*key);
                    ledger.dirty = true;
                    let record = JournalRecord::MasterKey { ledger_id, key: *key };
                    self.journal().append(record, Box::new(|_| {}));
                    key_pending = Some(ledger.key_learned());
                }
            }
            if ledger.state.fenced && !recovery {
                return Err(StorageError::Fenced(ledger_id));
            }
            if recovery {
                // A copy coming in (autorecovery, or a recovering writer): GC keeps it.
                ledger.incoming_ms = Some(self.config.clock.now_ms());
                if !ledger.state.incoming {
                    ledger.state.incoming = true;
                    ledger.dirty = true;
                }
            }
            let lac = entry.last_add_confirmed();
            ledger.piggybacked_lac = Some(ledger.piggybacked_lac.map_or(lac, |l| l.max(lac)));
        }
        // Stepped, nothing may wait: there is no flusher thread to make room meanwhile.
        let wait_max = match self.config.stepped() {
            Some(_) => std::time::Duration::ZERO,
            None => self.config.write_cache_throttle_max,
        };
        self.cache.insert(entry.clone(), wait_max, &|| self.request_flush())?;
        if self.config.journal.write_data {
            self.journal()
                .append(JournalRecord::Entry(entry), Box::new(move |r| done(r.map(|_| ()))));
        } else if let Some(flag) = key_pending {
            // Journal-less: acknowledged once cached, and once the ledger's newly learned
            // key is durable (also for the adds after the one that brought it): the
            // barrier runs after the key's record (queued before it) is.
            self.journal().barrier(Box::new(move |r| {
                if r.is_ok() {
                    flag.store(true, Ordering::SeqCst);
                }
                done(r.map(|_| ()))
            }));
        } else {
            done(Ok(()));
        }
        Ok(())
    }

    pub(super) fn update_ledger(
        &self,
        ledger_id: LedgerId,
        key: &MasterKey,
        record: JournalRecord,
        done: AddCallback,
    ) -> Result<()> {
        self.check_poison()?;
        let mut ledgers = self.lock_ledgers();
        let ledger = self.live_entry(&mut ledgers, ledger_id)?;
        let mut done = done;
        match ledger.state.master_key {
            Some(k) if k != *key => return Err(StorageError::Unauthorized(ledger_id)),
            Some(_) => {}
            None => {
                ledger.state.master_key = Some(*key);
                self.journal()
                    .append(JournalRecord::MasterKey { ledger_id, key: *key }, Box::new(|_| {}));
                // Durable with the update's record, which is queued after it.
                let flag = ledger.key_learned();
                let then = done;
                done = Box::new(move |r: Result<()>| {
                    if r.is_ok() {
                        flag.store(true, Ordering::SeqCst);
                    }
                    then(r)
                });
            }
        }
        match &record {
            JournalRecord::Fence { .. } => ledger.state.fenced = true,
            JournalRecord::ExplicitLac { lac, .. } => {
                ledger.state.explicit_lac =
                    Some(ledger.state.explicit_lac.map_or(*lac, |l| l.max(*lac)));
            }
            other => unreachable!("not a ledger update: {other:?}"),
        }
        ledger.dirty = true;
        // Submitted under the ledger lock: journal order matches the order of state changes.
        self.journal().append(record, Box::new(move |r| done(r.map(|_| ()))));
        Ok(())
    }

    pub(super) fn set_limbo(&self, ledger_id: LedgerId, limbo: bool) -> Result<()> {
        self.check_poison()?;
        let mut ledgers = self.lock_ledgers();
        let ledger = self.live_entry(&mut ledgers, ledger_id)?;
        ledger.state.limbo = limbo;
        let mut b = KvBatch::default();
        b.put(Table::Ledgers, index::ledger_key(ledger_id), ledger.state.encode());
        self.kv.commit(b)
    }

    pub(super) fn delete_ledger(&self, ledger_id: LedgerId, tombstone: bool) -> Result<()> {
        self.check_poison()?;
        {
            // The tombstone is durable before anything of the ledger is dropped, and the
            // state goes under the same lock: no add can create the ledger again between.
            let mut ledgers = self.lock_ledgers();
            if tombstone {
                let mut tombstones = self.tombstones.lock().expect("tombstones lock");
                let mut b = KvBatch::default();
                tombstones.insert(ledger_id, &mut b);
                self.kv.commit(b)?;
            }
            ledgers.remove(&ledger_id);
        }
        self.cache.remove_ledger(ledger_id);
        self.read_cache.lock().expect("read cache lock").remove_ledger(ledger_id);
        // The flush lock keeps a concurrent flush from re-adding this ledger's locations.
        let mut flush = self.flush.lock().expect("flush lock");
        self.located.forget_ledger(ledger_id);
        self.location_pages(ledger_id, |page, last| {
            let mut b = KvBatch::default();
            for (k, _) in page {
                b.delete(Table::Locations, k);
            }
            if last {
                b.delete(Table::Ledgers, index::ledger_key(ledger_id));
                // Per-ledger mode: its log is sealed now, so GC can take it back.
                flush.logs.seal_ledger_log(ledger_id, &mut b)?;
            }
            self.kv.commit(b)
        })?;
        tracing::info!(ledger_id, tombstone, "ledger deleted locally");
        Ok(())
    }
}
