//! The one way the readers open a user's file: without blocking (a FIFO would wait for a
//! writer forever), as a regular file (judged on the opened descriptor, so a path swapped
//! after a check cannot slip a device in), and read into memory no further than the caller
//! needs, with a fallible allocation. A file that shrinks or grows while it is read is an
//! error naming it, where a memory map would have faulted (SIGBUS) or read a torn line.

use std::fs::File;
use std::io::{self, Read};
#[cfg(unix)]
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::path::Path;

use zerohop::Device;

use crate::error::{invalid, EcgError, Result};

/// Bytes asked of the kernel per read: large enough that the calls cost nothing next to the
/// copy, small enough that a test can change the file between two of them.
const CHUNK: usize = 8 << 20;

fn io_error(path: &Path) -> impl Fn(io::Error) -> EcgError + '_ {
    move |source| EcgError::Io {
        path: path.to_owned(),
        source,
    }
}

/// What a file that is not a regular file is, for the error.
fn kind_of(meta: &std::fs::Metadata) -> &'static str {
    let t = meta.file_type();
    if t.is_dir() {
        return "a folder";
    }
    #[cfg(unix)]
    {
        if t.is_fifo() {
            return "a FIFO (named pipe)";
        }
        if t.is_char_device() {
            return "a character device";
        }
        if t.is_block_device() {
            return "a block device";
        }
        if t.is_socket() {
            return "a socket";
        }
    }
    "not a file"
}

/// Opens `path` for reading as a regular file and returns it with its length. `what` names
/// the input in errors ("WFDB signal file", "CSV").
pub(crate) fn open_regular(path: &Path, what: &str) -> Result<(File, u64)> {
    let mut options = std::fs::OpenOptions::new();
    options.read(true);
    // O_NONBLOCK: opening a FIFO returns at once instead of waiting for a writer; reads of a
    // regular file ignore the flag. O_NOCTTY: a terminal device never becomes ours.
    #[cfg(unix)]
    options.custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY);
    let file = options.open(path).map_err(io_error(path))?;
    // fstat of the descriptor just opened: what will be read, not what the path named before.
    let meta = file.metadata().map_err(io_error(path))?;
    if !meta.file_type().is_file() {
        return Err(invalid(
            what,
            format!("{}: {}, not a regular file", path.display(), kind_of(&meta)),
        ));
    }
    Ok((file, meta.len()))
}

/// The first `limit` bytes of a regular file (all of it when shorter).
pub(crate) fn read_prefix(path: &Path, what: &str, limit: u64) -> Result<Vec<u8>> {
    read_with(path, what, limit, &mut |_| {})
}

/// A whole regular file of at most `max` bytes; a longer one is refused, not cut.
pub(crate) fn read_small(path: &Path, what: &str, max: u64) -> Result<Vec<u8>> {
    let bytes = read_with(path, what, max.saturating_add(1), &mut |_| {})?;
    if bytes.len() as u64 > max {
        return Err(invalid(
            what,
            format!(
                "{}: more than {max} bytes, more than a {what} has",
                path.display()
            ),
        ));
    }
    Ok(bytes)
}

/// A whole regular file.
pub(crate) fn read_whole(path: &Path, what: &str) -> Result<Vec<u8>> {
    read_with(path, what, u64::MAX, &mut |_| {})
}

/// [`read_prefix`] that calls `after_chunk(bytes so far)` after each read: the tests change
/// the file there.
pub(crate) fn read_with(
    path: &Path,
    what: &str,
    limit: u64,
    after_chunk: &mut dyn FnMut(usize),
) -> Result<Vec<u8>> {
    let (mut file, len) = open_regular(path, what)?;
    let want = len.min(limit);
    let too_big = || EcgError::Zerohop(out_of_memory(want, path, "more than the address space"));
    let want = usize::try_from(want).map_err(|_| too_big())?;
    let mut bytes = Vec::new();
    bytes
        .try_reserve_exact(want)
        .map_err(|e| EcgError::Zerohop(out_of_memory(want as u64, path, &e.to_string())))?;
    let changed = |detail: String| EcgError::Io {
        path: path.to_owned(),
        source: io::Error::new(
            io::ErrorKind::UnexpectedEof,
            format!("the file changed while it was read: {detail}"),
        ),
    };
    while bytes.len() < want {
        let step = (want - bytes.len()).min(CHUNK) as u64;
        let got = (&mut file)
            .take(step)
            .read_to_end(&mut bytes)
            .map_err(io_error(path))?;
        if got == 0 {
            return Err(changed(format!(
                "it had {len} bytes, then ended after {}",
                bytes.len()
            )));
        }
        after_chunk(bytes.len());
    }
    if want as u64 == len {
        // Past the length fstat gave: more bytes mean a writer appended meanwhile, and the
        // last line or frame read may be torn.
        let mut probe = [0u8; 1];
        if file.read(&mut probe).map_err(io_error(path))? != 0 {
            return Err(changed(format!("it had {len} bytes, then more")));
        }
    }
    Ok(bytes)
}

fn out_of_memory(requested: u64, path: &Path, reason: &str) -> zerohop::Error {
    zerohop::Error::OutOfMemory {
        requested: usize::try_from(requested).unwrap_or(usize::MAX),
        device: Device::CPU,
        reason: format!("reading {}: {reason}", path.display()),
    }
}

#[cfg(test)]
mod tests;
