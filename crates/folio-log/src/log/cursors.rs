//! Durable cursors: a consumer's position, moved in memory and written to the metadata
//! store in batches (`cursor_flush_interval`) or by `flush_cursors`; the slowest one holds
//! trimming back when the log requires consumption.

use std::collections::BTreeMap;

use folio_meta::Expect;
use folio_meta::list_all;
use folio_meta::records::Record;

use super::{Command, CursorState, ManagedLog};
use crate::env::LogEnv;
use crate::error::{LogError, Result};
use crate::records::CursorRecord;

impl ManagedLog {
    /// Creates the durable cursor `name` at `offset` (clamped into the log) if it does not
    /// exist; returns its position.
    pub async fn cursor_open(&self, name: &str, offset: u64) -> Result<u64> {
        if name.is_empty() || name.contains('/') {
            return Err(LogError::Invalid(format!("cursor name {name:?}: non-empty, no '/'")));
        }
        if let Some(c) = self.shared.cursors.lock().expect("cursor lock").get(name) {
            return Ok(c.offset);
        }
        let s = self.status();
        let offset = offset.clamp(s.start_offset, s.end_offset);
        let env = &self.shared.env;
        let key = env.keys.cursor(&self.shared.name, name);
        let rec = CursorRecord { offset, updated_ms: env.now_ms() };
        env.meta.put(&key, rec.encode(), Expect::Any).await?;
        let offset = {
            let mut cursors = self.shared.cursors.lock().expect("cursor lock");
            let c = cursors
                .entry(name.into())
                .or_insert(CursorState { offset, persisted: Some(offset) });
            c.offset
        };
        // The actor flushes cursors only while there are some: a round trip makes it look
        // again (nothing is dirty yet, so it writes nothing). A closed log has no actor
        // to wake and flushes nothing either.
        let _ = self.flush_cursors().await;
        Ok(offset)
    }

    /// Moves the cursor to `offset` (the next offset its consumer reads). Written to the
    /// metadata store in batches (`cursor_flush_interval`) or by `flush_cursors`.
    pub fn cursor_commit(&self, name: &str, offset: u64) -> Result<()> {
        let end = self.end_offset();
        if offset > end {
            return Err(LogError::OffsetOutOfRange { offset, start: self.start_offset(), end });
        }
        let mut cursors = self.shared.cursors.lock().expect("cursor lock");
        let c = cursors.get_mut(name).ok_or_else(|| LogError::NoSuchCursor {
            log: self.shared.name.clone(),
            cursor: name.into(),
        })?;
        c.offset = offset;
        Ok(())
    }

    /// The offset cursor `name` has acknowledged up to, if it exists.
    pub fn cursor(&self, name: &str) -> Option<u64> {
        self.shared.cursors.lock().expect("cursor lock").get(name).map(|c| c.offset)
    }

    /// Deletes a durable cursor: it no longer holds back trimming.
    pub async fn cursor_delete(&self, name: &str) -> Result<bool> {
        let env = &self.shared.env;
        env.meta.delete(&env.keys.cursor(&self.shared.name, name), Expect::Any).await?;
        Ok(self.shared.cursors.lock().expect("cursor lock").remove(name).is_some())
    }

    /// Writes every moved cursor position now.
    pub async fn flush_cursors(&self) -> Result<()> {
        self.call(|reply| Command::FlushCursors { reply }).await
    }
}

pub(super) async fn load_cursors(env: &LogEnv, log: &str) -> Result<BTreeMap<String, CursorState>> {
    let prefix = env.keys.cursors(log);
    let mut out = BTreeMap::new();
    for v in list_all(env.meta.as_ref(), &prefix).await? {
        let name = v.key[prefix.len()..].to_string();
        let c = CursorRecord::decode(&v.key, &v.value)?;
        out.insert(name, CursorState { offset: c.offset, persisted: Some(c.offset) });
    }
    Ok(out)
}
