//! The production file layer: std files, positional I/O, O_DIRECT where the file system
//! supports it.

use std::fs::{File, OpenOptions as StdOpenOptions};
use std::io;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::Path;
use std::sync::Arc;

use super::{FileHandle, FileSystem, OpenOptions};

/// The operating system's file system (with `O_DIRECT` where asked).
#[derive(Debug, Default, Clone, Copy)]
pub struct RealFs;

#[derive(Debug)]
struct RealFile {
    file: File,
    direct: bool,
}

impl FileHandle for RealFile {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        self.file.read_at(buf, offset)
    }
    fn write_all_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        self.file.write_all_at(buf, offset)
    }
    fn sync_data(&self) -> io::Result<()> {
        self.file.sync_data()
    }
    fn len(&self) -> io::Result<u64> {
        Ok(self.file.metadata()?.len())
    }
    fn set_len(&self, len: u64) -> io::Result<()> {
        self.file.set_len(len)
    }
    fn is_direct(&self) -> bool {
        self.direct
    }
    fn will_need(&self, offset: u64, len: u64) -> io::Result<()> {
        let len = std::num::NonZeroU64::new(len);
        rustix::fs::fadvise(&self.file, offset, len, rustix::fs::Advice::WillNeed)
            .map_err(io::Error::from)
    }
    fn start_writeback(&self, offset: u64, len: u64) -> io::Result<()> {
        // POSIX_FADV_DONTNEED on Linux starts asynchronous writeback of the range's dirty
        // pages (and drops the clean ones).
        let len = std::num::NonZeroU64::new(len);
        rustix::fs::fadvise(&self.file, offset, len, rustix::fs::Advice::DontNeed)
            .map_err(io::Error::from)
    }
}

fn std_options(options: OpenOptions) -> StdOpenOptions {
    let mut o = StdOpenOptions::new();
    o.read(true).write(true);
    if options.create_new {
        o.create_new(true);
    } else if options.create {
        o.create(true);
    }
    o
}

impl FileSystem for RealFs {
    fn create_dir_all(&self, path: &Path) -> io::Result<()> {
        std::fs::create_dir_all(path)
    }

    fn open(&self, path: &Path, options: OpenOptions) -> io::Result<Arc<dyn FileHandle>> {
        if options.direct {
            let mut o = std_options(options);
            o.custom_flags(libc::O_DIRECT);
            match o.open(path) {
                Ok(file) => return Ok(Arc::new(RealFile { file, direct: true })),
                // tmpfs and some others refuse O_DIRECT with EINVAL: fall back to buffered.
                Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {
                    tracing::debug!(path = %path.display(), "O_DIRECT refused, using buffered I/O");
                }
                Err(e) => return Err(e),
            }
        }
        let file = std_options(options).open(path)?;
        Ok(Arc::new(RealFile { file, direct: false }))
    }

    fn remove_file(&self, path: &Path) -> io::Result<()> {
        std::fs::remove_file(path)
    }

    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        std::fs::rename(from, to)
    }

    fn list_dir(&self, path: &Path) -> io::Result<Vec<String>> {
        let mut names = Vec::new();
        for entry in std::fs::read_dir(path)? {
            let entry = entry?;
            if entry.file_type()?.is_file() {
                names.push(entry.file_name().to_string_lossy().into_owned());
            }
        }
        names.sort();
        Ok(names)
    }

    fn sync_dir(&self, path: &Path) -> io::Result<()> {
        File::open(path)?.sync_all()
    }

    fn exists(&self, path: &Path) -> bool {
        path.exists()
    }
}
