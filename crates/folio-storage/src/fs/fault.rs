//! A fault-injecting, in-memory file system for crash tests.
//!
//! Every file keeps two images: `live` (what reads see now) and `durable` (what survives a
//! crash for sure), plus the writes made since the last `sync_data`. [`FaultFs::crash`] builds
//! the image a power cut could leave: each unsynced write is dropped, applied, or torn (a
//! random subset of its 512-byte sectors applied), chosen by a seeded RNG so a run replays.
//! Names (create, rename, remove) become durable only when their directory is synced.
//!
//! Faults on demand: [`FaultFs::fail_sync_after`] makes a later `sync_data` fail and lose that
//! file's unsynced writes (what Linux does after a failed fsync), and
//! [`FaultFs::fail_writes`] makes writes fail (a full or broken disk).
//!
//! An instance under test gets a [`FaultFs::mount`]: after a crash, that mount and every
//! handle opened through it fail every call, so the crashed instance's threads cannot touch
//! the recovered image. [`FaultFs::crash_after_ops`] crashes from inside the N-th mutating
//! call (write, set_len, sync, create, rename, remove), which puts crash points inside a
//! flush, a rotation or a checkpoint.

use std::collections::{BTreeMap, HashMap};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use super::{FileHandle, FileSystem, OpenOptions};

const SECTOR_BYTES: usize = 512;

/// What happens to unsynced writes at a crash.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CrashPlan {
    /// Each unsynced write is independently dropped, applied or torn (seeded).
    Random { seed: u64 },
    /// Every unsynced write is lost.
    LoseAllUnsynced,
}

#[derive(Debug, Clone)]
enum Pending {
    Write { offset: u64, data: Vec<u8> },
    SetLen(u64),
}

#[derive(Debug, Default)]
struct Inode {
    live: Vec<u8>,
    durable: Vec<u8>,
    pending: Vec<Pending>,
}

#[derive(Debug, Default)]
struct State {
    generation: u64,
    next_ino: u64,
    inodes: HashMap<u64, Inode>,
    live_names: BTreeMap<PathBuf, u64>,
    durable_names: BTreeMap<PathBuf, u64>,
    syncs_until_failure: Option<u64>,
    fail_writes: bool,
    n_syncs: u64,
    n_mutations: u64,
    n_bytes_read: u64,
    /// Ranges asked for with `will_need`: (inode, start, end).
    hinted: Vec<(u64, u64, u64)>,
    crash_countdown: Option<(u64, CrashPlan)>,
}

impl State {
    /// Counts a mutating call; crashes when the countdown runs out.
    fn tick(&mut self) -> io::Result<()> {
        self.n_mutations += 1;
        if let Some((n, plan)) = self.crash_countdown {
            if n == 0 {
                self.crash_countdown = None;
                crash_state(self, plan);
                return Err(crashed());
            }
            self.crash_countdown = Some((n - 1, plan));
        }
        Ok(())
    }
}

/// See the module docs. Cloning shares the same file system (and the same mount).
#[derive(Debug, Clone, Default)]
pub struct FaultFs {
    state: Arc<Mutex<State>>,
    /// `None` for the controlling handle; the generation for a mount.
    mounted: Option<u64>,
}

#[derive(Debug)]
struct FaultFile {
    state: Arc<Mutex<State>>,
    ino: u64,
    generation: u64,
}

fn crashed() -> io::Error {
    io::Error::other("file handle from before a simulated crash")
}

fn apply(data: &mut Vec<u8>, op: &Pending) {
    match op {
        Pending::Write { offset, data: bytes } => write_into(data, *offset as usize, bytes),
        Pending::SetLen(len) => data.resize(*len as usize, 0),
    }
}

fn write_into(data: &mut Vec<u8>, offset: usize, bytes: &[u8]) {
    if data.len() < offset + bytes.len() {
        data.resize(offset + bytes.len(), 0);
    }
    data[offset..offset + bytes.len()].copy_from_slice(bytes);
}

impl FaultFile {
    fn lock(&self) -> io::Result<MutexGuard<'_, State>> {
        let state = self.state.lock().expect("fault fs lock poisoned");
        if state.generation != self.generation {
            return Err(crashed());
        }
        Ok(state)
    }

    fn lock_mut(&self) -> io::Result<MutexGuard<'_, State>> {
        let mut state = self.lock()?;
        state.tick()?;
        Ok(state)
    }
}

impl FileHandle for FaultFile {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        let mut state = self.lock()?;
        let live = &state.inodes[&self.ino].live;
        let offset = offset as usize;
        if offset >= live.len() {
            return Ok(0);
        }
        let n = buf.len().min(live.len() - offset);
        buf[..n].copy_from_slice(&live[offset..offset + n]);
        state.n_bytes_read += n as u64;
        Ok(n)
    }

    fn write_all_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        let mut state = self.lock_mut()?;
        if state.fail_writes {
            return Err(io::Error::other("injected write failure"));
        }
        let inode = state.inodes.get_mut(&self.ino).expect("inode of open handle");
        write_into(&mut inode.live, offset as usize, buf);
        inode.pending.push(Pending::Write { offset, data: buf.to_vec() });
        Ok(())
    }

    fn sync_data(&self) -> io::Result<()> {
        let mut state = self.lock_mut()?;
        state.n_syncs += 1;
        if let Some(n) = state.syncs_until_failure {
            if n == 0 {
                state.syncs_until_failure = None;
                // Like Linux after a failed fsync: the dirty data is gone, and a retry would
                // report success without bringing it back.
                let inode = state.inodes.get_mut(&self.ino).expect("inode of open handle");
                inode.pending.clear();
                inode.live = inode.durable.clone();
                return Err(io::Error::other("injected fsync failure"));
            }
            state.syncs_until_failure = Some(n - 1);
        }
        let inode = state.inodes.get_mut(&self.ino).expect("inode of open handle");
        // The durable image plus the writes since the last sync is the live one: applying
        // them copies what changed, not the whole file (the simulator syncs often).
        for op in std::mem::take(&mut inode.pending) {
            apply(&mut inode.durable, &op);
        }
        debug_assert_eq!(inode.durable.len(), inode.live.len());
        Ok(())
    }

    fn len(&self) -> io::Result<u64> {
        let state = self.lock()?;
        Ok(state.inodes[&self.ino].live.len() as u64)
    }

    fn set_len(&self, len: u64) -> io::Result<()> {
        let mut state = self.lock_mut()?;
        let inode = state.inodes.get_mut(&self.ino).expect("inode of open handle");
        inode.live.resize(len as usize, 0);
        inode.pending.push(Pending::SetLen(len));
        Ok(())
    }

    fn is_direct(&self) -> bool {
        false
    }

    fn will_need(&self, offset: u64, len: u64) -> io::Result<()> {
        let mut state = self.lock()?;
        state.hinted.push((self.ino, offset, offset.saturating_add(len)));
        Ok(())
    }
}

impl FaultFs {
    /// A fault file system with nothing on it and no fault planned.
    pub fn new() -> FaultFs {
        FaultFs::default()
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().expect("fault fs lock poisoned")
    }

    /// The `n`-th `sync_data` from now (0 = the next one) fails and loses that file's
    /// unsynced writes.
    pub fn fail_sync_after(&self, n: u64) {
        self.lock().syncs_until_failure = Some(n);
    }

    /// From now on every write fails (or succeeds again with `false`).
    pub fn fail_writes(&self, fail: bool) {
        self.lock().fail_writes = fail;
    }

    /// How many `sync_data` calls have been made.
    pub fn n_syncs(&self) -> u64 {
        self.lock().n_syncs
    }

    /// Simulates a power cut and reboot. Mounts and handles from before stop working.
    pub fn crash(&self, plan: CrashPlan) {
        crash_state(&mut self.lock(), plan);
    }

    /// Crashes from inside the `n`-th mutating call from now (0 = the next one).
    pub fn crash_after_ops(&self, n: u64, plan: CrashPlan) {
        self.lock().crash_countdown = Some((n, plan));
    }

    /// Whether a crash has happened since `mount` was made.
    pub fn has_crashed_since(&self, mount: &FaultFs) -> bool {
        mount.mounted.is_some_and(|g| g != self.lock().generation)
    }

    /// Bytes read through file handles so far.
    pub fn n_bytes_read(&self) -> u64 {
        self.lock().n_bytes_read
    }

    /// Bytes asked for with `will_need` so far, each byte of a file counted once however
    /// often it was asked for (what a kernel would read ahead into its page cache).
    pub fn n_bytes_hinted(&self) -> u64 {
        let mut ranges = self.lock().hinted.clone();
        ranges.sort_unstable();
        // Sorted by inode, then start: what a range adds is what lies past the furthest
        // end of its file's ranges before it.
        let (mut total, mut covered) = (0u64, None::<(u64, u64)>);
        for (ino, start, end) in ranges {
            let before = covered.filter(|(i, _)| *i == ino).map_or(0, |(_, c)| c);
            total += end.saturating_sub(start.max(before));
            covered = Some((ino, before.max(end)));
        }
        total
    }

    /// Mutating calls made so far.
    pub fn n_mutations(&self) -> u64 {
        self.lock().n_mutations
    }

    /// A view for one instance under test; it dies at the next crash.
    pub fn mount(&self) -> FaultFs {
        let generation = self.lock().generation;
        FaultFs { state: self.state.clone(), mounted: Some(generation) }
    }

    /// Locks the state for a call through this view; fails if the view died in a crash.
    fn lock_view(&self, mutating: bool) -> io::Result<MutexGuard<'_, State>> {
        let mut state = self.lock();
        if self.mounted.is_some_and(|g| g != state.generation) {
            return Err(crashed());
        }
        if mutating {
            state.tick()?;
        }
        Ok(state)
    }

    /// A file's current contents (for tests that corrupt or inspect files).
    pub fn contents(&self, path: &Path) -> Option<Vec<u8>> {
        let state = self.lock();
        let ino = state.live_names.get(path)?;
        Some(state.inodes[ino].live.clone())
    }

    /// Overwrites bytes of a file durably, as bit rot or a buggy tool would.
    pub fn corrupt(&self, path: &Path, offset: usize, bytes: &[u8]) {
        let mut state = self.lock();
        let ino = *state.live_names.get(path).expect("file to corrupt exists");
        let inode = state.inodes.get_mut(&ino).expect("named inode");
        write_into(&mut inode.live, offset, bytes);
        write_into(&mut inode.durable, offset, bytes);
    }
}

fn crash_state(state: &mut State, plan: CrashPlan) {
    let mut rng = match plan {
        CrashPlan::Random { seed } => Some(SmallRng::seed_from_u64(seed)),
        CrashPlan::LoseAllUnsynced => None,
    };
    let mut inos: Vec<u64> = state.inodes.keys().copied().collect();
    inos.sort_unstable();
    for ino in inos {
        let inode = state.inodes.get_mut(&ino).expect("listed inode");
        let mut image = std::mem::take(&mut inode.durable);
        for op in std::mem::take(&mut inode.pending) {
            let Some(rng) = rng.as_mut() else { continue };
            match rng.random_range(0..3) {
                0 => {}
                1 => apply(&mut image, &op),
                _ => tear(&mut image, &op, rng),
            }
        }
        inode.live = image.clone();
        inode.durable = image;
    }
    state.live_names = state.durable_names.clone();
    let named: std::collections::HashSet<u64> = state.live_names.values().copied().collect();
    state.inodes.retain(|ino, _| named.contains(ino));
    state.generation += 1;
    state.syncs_until_failure = None;
    state.fail_writes = false;
    state.crash_countdown = None;
}

fn tear(image: &mut Vec<u8>, op: &Pending, rng: &mut SmallRng) {
    match op {
        Pending::SetLen(_) => {
            if rng.random_bool(0.5) {
                apply(image, op);
            }
        }
        Pending::Write { offset, data } => {
            for (i, sector) in data.chunks(SECTOR_BYTES).enumerate() {
                if rng.random_bool(0.5) {
                    write_into(image, *offset as usize + i * SECTOR_BYTES, sector);
                }
            }
        }
    }
}

impl FileSystem for FaultFs {
    fn create_dir_all(&self, _path: &Path) -> io::Result<()> {
        // Directories are implicit: a name's parent always exists.
        Ok(())
    }

    fn open(&self, path: &Path, options: OpenOptions) -> io::Result<Arc<dyn FileHandle>> {
        let creates =
            (options.create || options.create_new) && !self.lock().live_names.contains_key(path);
        let mut state = self.lock_view(creates)?;
        let ino = match state.live_names.get(path) {
            Some(_) if options.create_new => {
                return Err(io::Error::new(
                    io::ErrorKind::AlreadyExists,
                    path.display().to_string(),
                ));
            }
            Some(ino) => *ino,
            None if options.create || options.create_new => {
                let ino = state.next_ino;
                state.next_ino += 1;
                state.inodes.insert(ino, Inode::default());
                state.live_names.insert(path.to_path_buf(), ino);
                ino
            }
            None => {
                return Err(io::Error::new(io::ErrorKind::NotFound, path.display().to_string()));
            }
        };
        let generation = state.generation;
        drop(state);
        Ok(Arc::new(FaultFile { state: self.state.clone(), ino, generation }))
    }

    fn remove_file(&self, path: &Path) -> io::Result<()> {
        let mut state = self.lock_view(true)?;
        match state.live_names.remove(path) {
            Some(_) => Ok(()),
            None => Err(io::Error::new(io::ErrorKind::NotFound, path.display().to_string())),
        }
    }

    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        let mut state = self.lock_view(true)?;
        let ino = state
            .live_names
            .remove(from)
            .ok_or_else(|| io::Error::new(io::ErrorKind::NotFound, from.display().to_string()))?;
        state.live_names.insert(to.to_path_buf(), ino);
        Ok(())
    }

    fn list_dir(&self, path: &Path) -> io::Result<Vec<String>> {
        let state = self.lock_view(false)?;
        Ok(state
            .live_names
            .keys()
            .filter(|p| p.parent() == Some(path))
            .filter_map(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
            .collect())
    }

    fn sync_dir(&self, path: &Path) -> io::Result<()> {
        let mut state = self.lock_view(true)?;
        let state = &mut *state;
        state.durable_names.retain(|p, _| p.parent() != Some(path));
        for (p, ino) in &state.live_names {
            if p.parent() == Some(path) {
                state.durable_names.insert(p.clone(), *ino);
            }
        }
        Ok(())
    }

    fn exists(&self, path: &Path) -> bool {
        // Directories are implicit: one exists while a name below it does.
        self.lock_view(false).is_ok_and(|s| s.live_names.keys().any(|p| p.starts_with(path)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(s: &str) -> PathBuf {
        PathBuf::from(s)
    }

    #[test]
    fn synced_data_and_names_survive_a_crash_and_unsynced_ones_may_not() {
        let fs = FaultFs::new();
        let f = fs.open(&p("/d/a"), OpenOptions::CREATE).unwrap();
        f.write_all_at(b"durable", 0).unwrap();
        f.sync_data().unwrap();
        fs.sync_dir(&p("/d")).unwrap();
        f.write_all_at(b"lost", 7).unwrap();
        let g = fs.open(&p("/d/b"), OpenOptions::CREATE).unwrap();
        g.write_all_at(b"x", 0).unwrap();
        g.sync_data().unwrap();
        fs.crash(CrashPlan::LoseAllUnsynced);
        assert!(f.read_at(&mut [0u8; 1], 0).is_err(), "old handles die with the crash");
        assert_eq!(fs.contents(&p("/d/a")).unwrap(), b"durable");
        assert!(!fs.exists(&p("/d/b")), "a name whose directory was never synced is lost");
    }

    #[test]
    fn a_mount_dies_with_the_crash_and_a_countdown_crashes_inside_a_call() {
        let fs = FaultFs::new();
        let m = fs.mount();
        let f = m.open(&p("/a"), OpenOptions::CREATE).unwrap();
        m.sync_dir(&p("/")).unwrap();
        fs.crash_after_ops(1, CrashPlan::LoseAllUnsynced);
        f.write_all_at(b"x", 0).unwrap();
        assert!(f.sync_data().is_err(), "the second call crashes");
        assert!(fs.has_crashed_since(&m));
        assert!(m.rename(&p("/a"), &p("/b")).is_err(), "the dead mount cannot rename");
        assert!(m.list_dir(&p("/")).is_err());
        assert_eq!(fs.contents(&p("/a")).unwrap(), b"", "the unsynced write is gone");
        let m2 = fs.mount();
        assert!(m2.rename(&p("/a"), &p("/b")).is_ok());
    }

    #[test]
    fn random_crash_images_replay_from_their_seed() {
        let image = |seed| {
            let fs = FaultFs::new();
            let f = fs.open(&p("/a"), OpenOptions::CREATE).unwrap();
            fs.sync_dir(&p("/")).unwrap();
            for i in 0..20u8 {
                f.write_all_at(&[i; 1500], u64::from(i) * 1500).unwrap();
            }
            fs.crash(CrashPlan::Random { seed });
            fs.contents(&p("/a")).unwrap()
        };
        assert_eq!(image(7), image(7));
        assert_ne!(image(7), image(8));
    }

    #[test]
    fn a_failed_fsync_loses_the_unsynced_writes() {
        let fs = FaultFs::new();
        let f = fs.open(&p("/a"), OpenOptions::CREATE).unwrap();
        f.write_all_at(b"one", 0).unwrap();
        f.sync_data().unwrap();
        f.write_all_at(b"two", 3).unwrap();
        fs.fail_sync_after(0);
        assert!(f.sync_data().is_err());
        assert!(f.sync_data().is_ok(), "the retry succeeds, which is why retrying is wrong");
        assert_eq!(fs.contents(&p("/a")).unwrap(), b"one");
    }
}
