//! The file layer every on-disk component goes through, so tests can crash it.
//!
//! Production uses [`RealFs`]; crash tests use [`FaultFs`], which keeps a live and a durable
//! image of every file and can produce the image a power cut would leave (unsynced writes
//! dropped, applied or torn at sector granularity), fail an fsync, or refuse writes.
//!
//! **Architecture invariant:** nothing in `folio-storage` or `folio-bookie` opens a file
//! except through [`FileSystem`]. The key-value index is the one exception: it is an
//! embedded engine with its own durability, reached through `index::KvStore`, which tests
//! replace with `MemKv`.

#[cfg(feature = "testing")]
mod fault;
mod real;

use std::fmt::Debug;
use std::io;
use std::path::Path;
use std::sync::Arc;

#[cfg(feature = "testing")]
pub use fault::{CrashPlan, FaultFs};
pub use real::RealFs;

/// How to open a file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OpenOptions {
    /// Create the file if it does not exist.
    pub create: bool,
    /// Fail if the file exists (implies `create`).
    pub create_new: bool,
    /// Ask for O_DIRECT. Falls back to buffered I/O where the file system refuses it;
    /// [`FileHandle::is_direct`] tells which one the caller got. Writes to a direct handle
    /// must be aligned to [`DIRECT_IO_ALIGN`] in offset, length and memory.
    pub direct: bool,
}

impl OpenOptions {
    /// Open a file that exists.
    pub const EXISTING: OpenOptions =
        OpenOptions { create: false, create_new: false, direct: false };
    /// Open a file, creating it if missing.
    pub const CREATE: OpenOptions = OpenOptions { create: true, create_new: false, direct: false };
    /// Create a file that must not exist yet.
    pub const CREATE_NEW: OpenOptions =
        OpenOptions { create: true, create_new: true, direct: false };
}

/// Alignment of offsets, lengths and buffers for O_DIRECT I/O.
pub const DIRECT_IO_ALIGN: usize = 4096;

/// One open file. Positional I/O only, so a handle can be shared between threads.
#[allow(clippy::len_without_is_empty)] // `len` is a file size, not a collection's.
pub trait FileHandle: Send + Sync + Debug {
    /// Reads up to `buf.len()` bytes at `offset`; returns how many were read (0 at the end).
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize>;
    fn write_all_at(&self, buf: &[u8], offset: u64) -> io::Result<()>;
    /// `fdatasync`. An error here means data may be lost: callers must not retry it but
    /// treat the file (and the instance owning it) as poisoned.
    fn sync_data(&self) -> io::Result<()>;
    fn len(&self) -> io::Result<u64>;
    fn set_len(&self, len: u64) -> io::Result<()>;
    fn is_direct(&self) -> bool;
    /// Tells the kernel `len` bytes at `offset` will be read soon, so it reads them into the
    /// page cache in the background. A hint: nothing to do where there is no page cache.
    fn will_need(&self, _offset: u64, _len: u64) -> io::Result<()> {
        Ok(())
    }
    /// Starts writing back `len` bytes at `offset` and lets the page cache drop them once
    /// written, without waiting. A hint: durability still needs `sync_data`.
    fn start_writeback(&self, _offset: u64, _len: u64) -> io::Result<()> {
        Ok(())
    }

    /// Reads exactly `buf.len()` bytes at `offset`, or fails with `UnexpectedEof`.
    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        let mut done = 0;
        while done < buf.len() {
            let n = self.read_at(&mut buf[done..], offset + done as u64)?;
            if n == 0 {
                return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "read past end of file"));
            }
            done += n;
        }
        Ok(())
    }
}

/// A file system. Names created, renamed or removed are durable only after `sync_dir` of
/// their parent directory.
pub trait FileSystem: Send + Sync + Debug {
    fn create_dir_all(&self, path: &Path) -> io::Result<()>;
    fn open(&self, path: &Path, options: OpenOptions) -> io::Result<Arc<dyn FileHandle>>;
    fn remove_file(&self, path: &Path) -> io::Result<()>;
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()>;
    /// The names of the regular files in `path`, sorted.
    fn list_dir(&self, path: &Path) -> io::Result<Vec<String>>;
    fn sync_dir(&self, path: &Path) -> io::Result<()>;
    fn exists(&self, path: &Path) -> bool;

    /// Writes `bytes` to `path` atomically: temporary file, fsync, rename, fsync directory.
    fn write_atomic(&self, path: &Path, bytes: &[u8]) -> io::Result<()> {
        let parent = path.parent().unwrap_or(Path::new("."));
        let mut tmp_name = path.file_name().unwrap_or_default().to_os_string();
        tmp_name.push(".tmp");
        let tmp = parent.join(tmp_name);
        let step = |what: &str, p: &Path| {
            let what = format!("{what} {}", p.display());
            move |e: io::Error| io::Error::new(e.kind(), format!("{what}: {e}"))
        };
        let file = self.open(&tmp, OpenOptions::CREATE).map_err(step("creating", &tmp))?;
        file.set_len(0).map_err(step("truncating", &tmp))?;
        file.write_all_at(bytes, 0).map_err(step("writing", &tmp))?;
        file.sync_data().map_err(step("syncing", &tmp))?;
        drop(file);
        self.rename(&tmp, path).map_err(step("renaming into place", path))?;
        self.sync_dir(parent).map_err(step("syncing directory", parent))
    }

    /// Reads a whole (small) file.
    fn read_all(&self, path: &Path) -> io::Result<Vec<u8>> {
        let file = self.open(path, OpenOptions::EXISTING)?;
        let len = usize::try_from(file.len()?)
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidData, "file too large"))?;
        let mut buf = vec![0u8; len];
        file.read_exact_at(&mut buf, 0)?;
        Ok(buf)
    }
}

/// A buffer whose data starts at a [`DIRECT_IO_ALIGN`]-aligned address, built without
/// `unsafe`: an over-allocated `Vec` and the aligned window inside it.
#[derive(Debug)]
pub struct AlignedBuf {
    raw: Vec<u8>,
    start: usize,
    len: usize,
}

impl AlignedBuf {
    /// A zeroed buffer of `capacity` bytes (rounded up to the alignment), length 0.
    pub fn with_capacity(capacity: usize) -> AlignedBuf {
        let capacity = capacity.next_multiple_of(DIRECT_IO_ALIGN);
        let raw = vec![0u8; capacity + DIRECT_IO_ALIGN];
        let start = raw.as_ptr().align_offset(DIRECT_IO_ALIGN);
        assert!(start < DIRECT_IO_ALIGN);
        AlignedBuf { raw, start, len: 0 }
    }

    /// Bytes the buffer can hold without growing.
    pub fn capacity(&self) -> usize {
        self.raw.len() - DIRECT_IO_ALIGN
    }

    /// Bytes in the buffer.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the buffer holds nothing.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Grows the capacity to at least `capacity`, keeping the contents.
    pub fn reserve_total(&mut self, capacity: usize) {
        if capacity > self.capacity() {
            let mut bigger = AlignedBuf::with_capacity(capacity.max(self.capacity() * 2));
            bigger.extend_from_slice(self.as_slice());
            *self = bigger;
        }
    }

    /// Appends `bytes`, growing (aligned) if needed.
    pub fn extend_from_slice(&mut self, bytes: &[u8]) {
        self.reserve_total(self.len + bytes.len());
        let at = self.start + self.len;
        self.raw[at..at + bytes.len()].copy_from_slice(bytes);
        self.len += bytes.len();
    }

    /// Pads with zeros to the next multiple of the alignment.
    pub fn pad_to_alignment(&mut self) {
        let target = self.len.next_multiple_of(DIRECT_IO_ALIGN);
        self.reserve_total(target);
        self.raw[self.start + self.len..self.start + target].fill(0);
        self.len = target;
    }

    /// Empties the buffer, keeping its memory.
    pub fn clear(&mut self) {
        self.len = 0;
    }

    /// The bytes in the buffer.
    pub fn as_slice(&self) -> &[u8] {
        &self.raw[self.start..self.start + self.len]
    }

    /// The bytes in the buffer, writable.
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        &mut self.raw[self.start..self.start + self.len]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn aligned_buf_is_aligned_and_keeps_contents_when_growing() {
        let mut b = AlignedBuf::with_capacity(10);
        assert_eq!(b.as_slice().as_ptr() as usize % DIRECT_IO_ALIGN, 0);
        b.extend_from_slice(b"hello");
        b.extend_from_slice(&vec![7u8; 3 * DIRECT_IO_ALIGN]);
        assert_eq!(b.as_slice().as_ptr() as usize % DIRECT_IO_ALIGN, 0);
        assert_eq!(&b.as_slice()[..5], b"hello");
        b.pad_to_alignment();
        assert_eq!(b.len(), 4 * DIRECT_IO_ALIGN);
        assert!(b.as_slice()[5 + 3 * DIRECT_IO_ALIGN..].iter().all(|x| *x == 0));
    }
}
