//! A check of fjall's own files before fjall opens them, for the embedded store and the
//! bookie's index (both fjall 3 databases).
//!
//! fjall keeps each keyspace's table layout in a version file `keyspaces/<n>/v<id>` and
//! names the current one in `keyspaces/<n>/current`:
//!
//! ```text
//! current := id: u64 LE | checksum: u128 LE | checksum type: u8 (0 = xxh3-128)
//! v<id>   := an sfa archive; checksum = xxh3-128 of all its bytes
//! ```
//!
//! fjall 3.1 reads `current`'s id but does not verify the checksum, and asserts on the
//! version file's contents: one flipped bit there panicked inside fjall while its locks
//! were held, and its destructor then panicked again, aborting the process (found by the
//! disk-damage suite, issue #21). Checking the checksum first turns that into a refusal
//! naming the file.

mod error;
pub mod limits;

use std::path::Path;

pub use error::FjallFilesError;

use crate::limits::VERSION_FILE_BYTES_MAX;

/// The error for an I/O failure on `path`.
fn io(path: &Path) -> impl FnOnce(std::io::Error) -> FjallFilesError + '_ {
    move |source| FjallFilesError::Io { path: path.to_path_buf(), source }
}

/// Bytes of a `current` file.
const CURRENT_BYTES: usize = 8 + 16 + 1;

/// Verifies every keyspace's current version file under the fjall database `dir` against
/// the checksum fjall recorded for it. A database not created yet passes. The error names
/// the damaged file.
pub fn check_versions(dir: &Path) -> Result<(), FjallFilesError> {
    let keyspaces = dir.join("keyspaces");
    let Ok(entries) = std::fs::read_dir(&keyspaces) else {
        return Ok(()); // nothing written yet
    };
    for e in entries {
        let ks = e.map_err(io(&keyspaces))?.path();
        let current = ks.join("current");
        let bytes = match std::fs::read(&current) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue, // not flushed yet
            Err(e) => return Err(io(&current)(e)),
        };
        if bytes.len() != CURRENT_BYTES || bytes[24] != 0 {
            let detail = format!(
                "{} bytes, checksum type {:?} (expected {CURRENT_BYTES} bytes, type 0)",
                bytes.len(),
                bytes.get(24)
            );
            return Err(FjallFilesError::Damaged { path: current, detail });
        }
        let id = u64::from_le_bytes(bytes[0..8].try_into().expect("8 bytes"));
        let want = u128::from_le_bytes(bytes[8..24].try_into().expect("16 bytes"));
        let version = ks.join(format!("v{id}"));
        let len = std::fs::metadata(&version).map_err(io(&version))?.len();
        if len > VERSION_FILE_BYTES_MAX {
            let detail =
                format!("{len} bytes, above the {VERSION_FILE_BYTES_MAX} a version file can be");
            return Err(FjallFilesError::Damaged { path: version, detail });
        }
        let contents = std::fs::read(&version).map_err(io(&version))?;
        let got = xxhash_rust::xxh3::xxh3_128(&contents);
        if got != want {
            let detail = format!(
                "its checksum {got:032x} is not the {want:032x} recorded in {}",
                current.display()
            );
            return Err(FjallFilesError::Damaged { path: version, detail });
        }
    }
    Ok(())
}
