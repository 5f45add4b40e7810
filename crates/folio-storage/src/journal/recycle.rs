//! The recycle pool: journal files no longer needed, kept to be written over.
//!
//! Overwriting blocks a file already has is the fastest durable write this machine has
//! (O_DIRECT + fdatasync on written blocks: no size or extent change to sync), so a file
//! that is done with is renamed to `<id>.recycled` instead of being deleted, and the next
//! journal file is such a file renamed to its new id. Done with means: in two-write mode,
//! a checkpoint covers it (`Journal::release_before`); in single-write mode, GC deleted or
//! compacted the data file (`Journal::recycle`).
//!
//! At most `n_files_recycled_max` files wait (the disk they hold is that many times
//! `file_bytes_max`); more are deleted. The pool is the `.recycled` files in the journal
//! dir, so it survives a restart. Crash states, each safe:
//! - a rename to `.recycled` lost: the file keeps its journal name; a two-write replay
//!   releases it again, a single-write open removes it as an orphan (its index record went
//!   first);
//! - the rename to the new id done but its header not written: replay ignores a last file
//!   whose header names another id (`replay`), and the file is released or sealed later;
//! - bytes of an earlier incarnation never validate: every record's checksum covers the
//!   file id (`format`), and a read that looked its entry up before the file was recycled
//!   fails its checksum and looks it up again (`Storage::read_entry`).
//!
//! **Architecture invariant:** a file enters the pool only after nothing refers to it (the
//! checkpoint or the index moved past it first); the pool never decides that itself.

use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use super::format::file_name;
use crate::fs::FileSystem;

const SUFFIX: &str = ".recycled";

/// The name a file waits under in the pool.
pub fn recycled_name(file_id: u64) -> String {
    format!("{file_id:016x}{SUFFIX}")
}

/// Whether `name` is a file waiting in the pool.
pub fn is_recycled_name(name: &str) -> bool {
    name.strip_suffix(SUFFIX)
        .is_some_and(|hex| hex.len() == 16 && u64::from_str_radix(hex, 16).is_ok())
}

/// Files waiting to be written over, shared by the journal's writer (takes) and whoever
/// releases files (gives).
#[derive(Debug)]
pub(super) struct RecyclePool {
    fs: Arc<dyn FileSystem>,
    /// The journal dir.
    dir: PathBuf,
    files: Mutex<VecDeque<PathBuf>>,
    max: usize,
    n_reused: AtomicU64,
}

impl RecyclePool {
    /// The pool of `dir`: the `.recycled` files there, oldest first; files beyond `max`
    /// are deleted.
    pub(super) fn load(fs: Arc<dyn FileSystem>, dir: &Path, max: usize) -> std::io::Result<Self> {
        let mut names: Vec<String> =
            fs.list_dir(dir)?.into_iter().filter(|n| is_recycled_name(n)).collect();
        names.sort_unstable();
        let files = Mutex::new(VecDeque::new());
        let pool = RecyclePool { fs, dir: dir.to_path_buf(), files, max, n_reused: 0.into() };
        for name in names {
            pool.keep_or_remove(dir.join(name))?;
        }
        Ok(pool)
    }

    /// Puts journal file `file_id` into the pool (renamed), or deletes it when the pool is
    /// full; durable (the directory is synced) when this returns.
    pub(super) fn give(&self, file_id: u64) -> std::io::Result<()> {
        let path = self.dir.join(file_name(file_id));
        if self.is_full() {
            self.fs.remove_file(&path)?;
        } else {
            let pooled = self.dir.join(recycled_name(file_id));
            self.fs.rename(&path, &pooled)?;
            self.keep_or_remove(pooled)?;
        }
        self.fs.sync_dir(&self.dir)
    }

    fn is_full(&self) -> bool {
        self.files.lock().expect("recycle pool lock").len() >= self.max
    }

    /// Keeps a `.recycled` file, or deletes it if the pool filled up meanwhile.
    fn keep_or_remove(&self, pooled: PathBuf) -> std::io::Result<()> {
        let mut files = self.files.lock().expect("recycle pool lock");
        if files.len() < self.max {
            files.push_back(pooled);
            return Ok(());
        }
        drop(files);
        self.fs.remove_file(&pooled)
    }

    /// Renames the oldest file waiting to `to` (the caller writes its header and syncs the
    /// directory). Whether there was one.
    pub(super) fn take(&self, to: &Path) -> std::io::Result<bool> {
        let Some(from) = self.files.lock().expect("recycle pool lock").pop_front() else {
            return Ok(false);
        };
        self.fs.rename(&from, to)?;
        self.n_reused.fetch_add(1, Ordering::Relaxed);
        Ok(true)
    }

    /// Files waiting now.
    pub(super) fn len(&self) -> usize {
        self.files.lock().expect("recycle pool lock").len()
    }

    /// Journal files that were recycled files, since the journal started.
    pub(super) fn n_reused(&self) -> u64 {
        self.n_reused.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fs::{FaultFs, OpenOptions};

    fn journal_file(fs: &FaultFs, dir: &Path, id: u64) {
        let f = fs.open(&dir.join(file_name(id)), OpenOptions::CREATE_NEW).unwrap();
        f.write_all_at(&[7u8; 4096], 0).unwrap();
        f.sync_data().unwrap();
    }

    #[test]
    fn given_files_wait_under_their_pool_name_up_to_the_limit_and_are_taken_oldest_first() {
        let fs = FaultFs::new();
        let dir = Path::new("/j");
        fs.create_dir_all(dir).unwrap();
        for id in 1..=3 {
            journal_file(&fs, dir, id);
        }
        let pool = RecyclePool::load(Arc::new(fs.mount()), dir, 2).unwrap();
        for id in 1..=3 {
            pool.give(id).unwrap();
        }
        let mut names = fs.list_dir(dir).unwrap();
        names.sort();
        assert_eq!(names, vec![recycled_name(1), recycled_name(2)], "the third was deleted");
        // A restart finds the same pool.
        let pool = RecyclePool::load(Arc::new(fs.mount()), dir, 2).unwrap();
        assert_eq!(pool.len(), 2);
        assert!(pool.take(&dir.join(file_name(9))).unwrap(), "a file to take");
        assert_eq!(fs.contents(&dir.join(file_name(9))).unwrap().len(), 4096, "file 1's blocks");
        assert!(!fs.exists(&dir.join(recycled_name(1))));
        assert_eq!((pool.len(), pool.n_reused()), (1, 1));
        // A smaller limit after a restart deletes what is over it.
        assert_eq!(RecyclePool::load(Arc::new(fs.mount()), dir, 0).unwrap().len(), 0);
        assert!(!fs.exists(&dir.join(recycled_name(2))));
        assert!(!is_recycled_name("0000000000000002.jnl") && !is_recycled_name("x.recycled"));
    }
}
