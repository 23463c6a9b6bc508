//! `SharedResource`: host memory that other processes on the same machine map without a copy.
//!
//! Each allocation is one anonymous shared-memory file (Linux `memfd_create`), sized, sealed
//! against shrinking and growing, and mapped `MAP_SHARED`. The seals matter: a process that
//! could truncate the file would turn every other process's reads of the lost pages into
//! SIGBUS, so attaching refuses files without them.
//!
//! A [`SharedHandle`] names a segment as plain data: the machine's boot id, the pid and file
//! descriptor number of a process that holds it, and the file's identity (device and inode).
//! Another process attaches by opening `/proc/<pid>/fd/<fd>`, which works while that process
//! lives and holds the segment, and then compares the identity, so a pid or fd number reused
//! since the handle was made is refused instead of mapped. A process that has attached holds
//! the segment too and makes handles of its own.
//!
//! Lifetime is the kernel's reference count: a memfd has no name in any file system, and its
//! memory is freed when the last descriptor and the last mapping of it close, in whatever
//! process and however that process ends (SIGKILL included). Nothing can be left behind.
//!
//! The pure parts (range lookup, handle checks, sizes) are separate from the system calls so
//! that Miri checks them; the system calls live in `sys`.

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::fs::File;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};

use super::{MemoryResource, Stream};
use crate::buffer::Buffer;
use crate::device::Device;
use crate::error::{Error, Result};

/// Where one shared allocation (or a range of it) lives, as plain data another process on the
/// same machine can attach to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SharedHandle {
    /// The segment's name (`zerohop-<creator pid>-<n>`), for messages and diagnostics.
    pub name: String,
    /// `/proc/sys/kernel/random/boot_id` of the machine that made the handle.
    pub boot_id: String,
    /// A process holding the segment, and the descriptor number it holds it under.
    pub pid: u32,
    pub fd: i32,
    /// The file's identity, checked after opening so a reused fd or pid is refused.
    pub dev: u64,
    pub ino: u64,
    /// Bytes of the whole segment (a multiple of the page size).
    pub segment_len: usize,
    /// The range the handle is for, within the segment.
    pub offset: usize,
    pub len: usize,
}

fn bad_handle(reason: String) -> Error {
    Error::Resource {
        what: "shared-memory handle".into(),
        reason,
    }
}

impl SharedHandle {
    /// Checks what can be checked without the segment: the range lies inside it and every
    /// number is one a real segment could have.
    pub fn check(&self) -> Result<()> {
        if self.segment_len == 0 || isize::try_from(self.segment_len).is_err() {
            return Err(bad_handle(format!(
                "segment {} has an impossible size of {} bytes",
                self.name, self.segment_len
            )));
        }
        let inside = self
            .offset
            .checked_add(self.len)
            .is_some_and(|end| end <= self.segment_len);
        if !inside {
            return Err(bad_handle(format!(
                "bytes {}..{}+{} lie outside segment {} of {} bytes",
                self.offset, self.offset, self.len, self.name, self.segment_len
            )));
        }
        if self.pid == 0 || self.fd < 0 {
            return Err(bad_handle(format!(
                "process {} / descriptor {} cannot hold segment {}",
                self.pid, self.fd, self.name
            )));
        }
        Ok(())
    }

    /// Checks that the handle was made on this machine (since it last booted): pids and
    /// descriptor numbers mean nothing anywhere else.
    fn check_machine(&self, boot_id: &str) -> Result<()> {
        if self.boot_id != boot_id {
            return Err(bad_handle(format!(
                "segment {} lives on another machine (or before a reboot): boot id {} here, \
                 {} in the handle; shared-memory handles work between processes of one \
                 machine only",
                self.name, boot_id, self.boot_id
            )));
        }
        Ok(())
    }

    /// Checks the file this handle led to: the same file, of the size the handle says.
    fn check_file(&self, dev: u64, ino: u64, file_len: u64) -> Result<()> {
        if (self.dev, self.ino) != (dev, ino) {
            return Err(bad_handle(format!(
                "stale handle: descriptor {} of process {} is no longer segment {} (it was \
                 freed and the number reused); keep the producer's object alive until \
                 every consumer has loaded it",
                self.fd, self.pid, self.name
            )));
        }
        if file_len != self.segment_len as u64 {
            return Err(bad_handle(format!(
                "segment {} has {file_len} bytes, the handle says {}",
                self.name, self.segment_len
            )));
        }
        Ok(())
    }
}

/// Bytes a segment for a request of `bytes` occupies: whole pages, at least one.
fn segment_len(bytes: usize, page: usize) -> Result<usize> {
    bytes
        .max(1)
        .checked_next_multiple_of(page)
        .filter(|&n| isize::try_from(n).is_ok())
        .ok_or_else(|| Error::OutOfMemory {
            requested: bytes,
            device: Device::CPU,
            reason: format!("the size overflows when rounded up to pages of {page} bytes"),
        })
}

/// Address ranges → values, for finding the segment that holds a pointer.
#[derive(Debug)]
struct RangeMap<T> {
    ranges: BTreeMap<usize, (usize, T)>,
}

impl<T> RangeMap<T> {
    const fn new() -> Self {
        RangeMap {
            ranges: BTreeMap::new(),
        }
    }

    fn insert(&mut self, start: usize, len: usize, value: T) {
        self.ranges.insert(start, (len, value));
    }

    fn remove(&mut self, start: usize) -> Option<T> {
        self.ranges.remove(&start).map(|(_, v)| v)
    }

    /// The range holding all of `start..start + len`, with its start address.
    fn find(&self, start: usize, len: usize) -> Option<(usize, &T)> {
        let (&base, (size, value)) = self.ranges.range(..=start).next_back()?;
        let range_end = base.checked_add(*size)?;
        let end = start.checked_add(len)?;
        (start < range_end && end <= range_end).then_some((base, value))
    }

    fn values(&self) -> impl Iterator<Item = &T> {
        self.ranges.values().map(|(_, v)| v)
    }
}

/// One mapped segment in this process.
struct Segment {
    ptr: NonNull<u8>,
    len: usize,
    file: File,
    dev: u64,
    ino: u64,
    name: String,
    writable: bool,
}

// SAFETY: a Segment owns its mapping and descriptor; both may be used and released from any
// thread (munmap and close have no thread affinity). The address is only handed out.
unsafe impl Send for Segment {}
// SAFETY: shared access reads immutable fields only.
unsafe impl Sync for Segment {}

impl fmt::Debug for Segment {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Segment")
            .field("name", &self.name)
            .field("ptr", &self.ptr)
            .field("len", &self.len)
            .field("writable", &self.writable)
            .finish()
    }
}

/// A mapped segment as the registry knows it: weakly, plus its file identity, which can be
/// compared without upgrading (an upgraded Arc dropped under the lock could be the last one,
/// and its Drop takes the lock).
#[derive(Debug)]
struct Entry {
    segment: Weak<Segment>,
    dev: u64,
    ino: u64,
}

/// Every segment mapped in this process (made here or attached), by address. Weak: the
/// segments belong to their allocations and buffers; this only finds them.
static SEGMENTS: Mutex<RangeMap<Entry>> = Mutex::new(RangeMap::new());

fn segments() -> MutexGuard<'static, RangeMap<Entry>> {
    SEGMENTS.lock().unwrap_or_else(|p| p.into_inner())
}

static NEXT_SEGMENT: AtomicU64 = AtomicU64::new(0);

impl Segment {
    fn create(len: usize) -> Result<Arc<Segment>> {
        let n = NEXT_SEGMENT.fetch_add(1, Ordering::Relaxed);
        let name = format!("zerohop-{}-{n}", std::process::id());
        let file = sys::create(&name, len)?;
        let (dev, ino, _) = sys::identity(&file)?;
        let ptr = sys::map(&file, len, true)?;
        Ok(Segment::register(Segment {
            ptr,
            len,
            file,
            dev,
            ino,
            name,
            writable: true,
        }))
    }

    fn register(segment: Segment) -> Arc<Segment> {
        let segment = Arc::new(segment);
        let entry = Entry {
            segment: Arc::downgrade(&segment),
            dev: segment.dev,
            ino: segment.ino,
        };
        segments().insert(segment.ptr.as_ptr() as usize, segment.len, entry);
        segment
    }

    fn handle(&self, offset: usize, len: usize) -> Result<SharedHandle> {
        Ok(SharedHandle {
            name: self.name.clone(),
            boot_id: sys::boot_id()?,
            pid: std::process::id(),
            fd: sys::raw_fd(&self.file),
            dev: self.dev,
            ino: self.ino,
            segment_len: self.len,
            offset,
            len,
        })
    }
}

impl Drop for Segment {
    fn drop(&mut self) {
        let start = self.ptr.as_ptr() as usize;
        {
            // Forget the address before unmapping it, so a segment mapped there next is
            // never mistaken for this one. Only this segment's own entry goes.
            let mut map = segments();
            let ours = map
                .find(start, 0)
                .is_some_and(|(base, e)| base == start && std::ptr::eq(e.segment.as_ptr(), self));
            if ours {
                map.remove(start);
            }
        }
        // SAFETY: `ptr..ptr+len` is the mapping `sys::map` made for this segment; the last
        // reference to it (every buffer holds one) is going, so nothing uses it any more.
        unsafe { sys::unmap(self.ptr, self.len) };
        // `file` closes itself.
    }
}

/// Host memory other processes can attach to: one sealed memfd per allocation (Linux).
///
/// Wrap it in a `PoolResource` to put many small allocations into a few segments (each
/// segment holds one file descriptor in every process that maps it).
#[derive(Debug)]
pub struct SharedResource {
    /// The allocations this resource handed out, by address, until they are freed.
    live: Mutex<HashMap<usize, Arc<Segment>>>,
}

impl SharedResource {
    /// Fails on systems without memfd (anything but Linux), saying so.
    pub fn new() -> Result<Self> {
        sys::supported()?;
        Ok(SharedResource {
            live: Mutex::new(HashMap::new()),
        })
    }
}

impl MemoryResource for SharedResource {
    fn allocate(&self, bytes: usize, align: usize, _stream: Stream) -> Result<NonNull<u8>> {
        let page = sys::page_size();
        if !align.is_power_of_two() || align > page {
            return Err(Error::Layout {
                what: "alignment".into(),
                reason: format!(
                    "{align}: shared memory is page-aligned, so the alignment must be a power \
                     of two of at most {page}"
                ),
            });
        }
        let segment = Segment::create(segment_len(bytes, page)?)?;
        let ptr = segment.ptr;
        self.live
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(ptr.as_ptr() as usize, segment);
        Ok(ptr)
    }

    unsafe fn deallocate(&self, ptr: NonNull<u8>, _bytes: usize, _align: usize, _stream: Stream) {
        let segment = self
            .live
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&(ptr.as_ptr() as usize));
        debug_assert!(
            segment.is_some(),
            "freeing a block this resource never gave"
        );
        // Dropped outside the lock: the mapping goes once buffers that attached to it in
        // this process (a pickle loaded here) are gone too.
        drop(segment);
    }

    fn device(&self) -> Device {
        Device::CPU
    }
}

/// A handle for `ptr..ptr + len` when that range lies in one shared segment mapped in this
/// process (allocated here, through any adaptor, or attached); None otherwise.
pub fn handle_for(ptr: *const u8, len: usize) -> Result<Option<SharedHandle>> {
    let start = ptr as usize;
    let found = segments()
        .find(start, len)
        .and_then(|(base, e)| Some((base, e.segment.upgrade()?)));
    match found {
        Some((base, segment)) => segment.handle(start - base, len).map(Some),
        None => Ok(None),
    }
}

/// A handle's range mapped into this process.
#[derive(Debug)]
pub struct Attached {
    /// The range, kept mapped while the buffer (or a clone) lives.
    pub buffer: Buffer,
    /// False when this process could map the segment read-only only.
    pub writable: bool,
}

/// Maps the range `handle` names: the mapping this process already has of that segment,
/// else a new one through the holder's `/proc/<pid>/fd/<fd>`. Refuses, with the reason,
/// handles from another machine, from a process that has exited or freed the segment, and
/// handles whose sizes disagree with the segment.
pub fn attach(handle: &SharedHandle) -> Result<Attached> {
    handle.check()?;
    handle.check_machine(&sys::boot_id()?)?;
    let known = segments()
        .values()
        .find(|e| (e.dev, e.ino) == (handle.dev, handle.ino))
        .and_then(|e| e.segment.upgrade());
    let segment = match known {
        Some(segment) => {
            handle.check_file(segment.dev, segment.ino, segment.len as u64)?;
            segment
        }
        None => map_remote(handle)?,
    };
    let ptr = segment.ptr.as_ptr().wrapping_add(handle.offset);
    let ptr = NonNull::new(ptr).ok_or_else(|| bad_handle("a NULL address".into()))?;
    let writable = segment.writable;
    // SAFETY: `offset + len <= segment_len` (checked above and against the file), so the
    // range lies in the segment's mapping, which the owner (the segment itself) keeps alive.
    let buffer = unsafe { Buffer::from_foreign(ptr, handle.len, Device::CPU, segment) };
    Ok(Attached { buffer, writable })
}

fn map_remote(handle: &SharedHandle) -> Result<Arc<Segment>> {
    let (file, writable) = sys::open_holder(handle.pid, handle.fd, (handle.dev, handle.ino))
        .map_err(|e| holder_error(handle, e))?;
    let (dev, ino, file_len) = sys::identity(&file)?;
    handle.check_file(dev, ino, file_len)?;
    let seals = sys::seals(&file)?;
    if !seals.shrink {
        return Err(bad_handle(format!(
            "{} is not a zerohop segment: it is not sealed against shrinking, so mapping it \
             could crash this process",
            handle.name
        )));
    }
    if seals.write {
        return Err(bad_handle(format!(
            "{} is not a zerohop segment: it is sealed against writes, which zerohop's \
             segments never are",
            handle.name
        )));
    }
    let ptr = sys::map(&file, handle.segment_len, writable)?;
    Ok(Segment::register(Segment {
        ptr,
        len: handle.segment_len,
        file,
        dev,
        ino,
        name: handle.name.clone(),
        writable,
    }))
}

/// The seals of a segment that matter for mapping it: shrinking (a mapping could fault) and
/// writing (zerohop's own segments are never write-sealed).
struct Seals {
    shrink: bool,
    write: bool,
}

/// Why the holder's descriptor could not be opened, in words that point at the cause.
fn holder_error(handle: &SharedHandle, error: sys::HolderError) -> Error {
    match error {
        sys::HolderError::NotASegment(what) => bad_handle(format!(
            "descriptor {} of process {} is {what}, not shared memory: the handle does not name \
             a zerohop segment (refused before opening it)",
            handle.fd, handle.pid
        )),
        sys::HolderError::Replaced => bad_handle(format!(
            "stale handle: descriptor {} of process {} is no longer segment {} (it was freed \
             and the number reused); keep the producer's object alive until every consumer has \
             loaded it",
            handle.fd, handle.pid, handle.name
        )),
        sys::HolderError::Io(e)
            if matches!(e.raw_os_error(), Some(libc::EMFILE | libc::ENFILE)) =>
        {
            Error::System {
                what: format!("attaching shared-memory segment {}", handle.name),
                errno: e.raw_os_error().unwrap_or(0),
                reason: format!(
                    "{e}: this process holds too many open files; raise the limit (ulimit -n) \
                     or release tensors it no longer needs"
                ),
            }
        }
        sys::HolderError::Io(e) => bad_handle(format!(
            "stale handle: segment {} cannot be opened through process {} (descriptor {}): \
             {e}. The process has exited or freed it; keep the producer's object alive until \
             every consumer has loaded it",
            handle.name, handle.pid, handle.fd
        )),
    }
}

/// This boot of this machine (Linux's boot id): handles that only work between processes of
/// one machine (shared memory, CUDA IPC) carry it, and are refused anywhere else.
pub fn machine_boot_id() -> Result<String> {
    sys::boot_id()
}

/// Segments mapped in this process now (for tests and diagnostics).
pub fn mapped_segments() -> usize {
    segments()
        .values()
        .filter(|e| e.segment.strong_count() > 0)
        .count()
}

#[cfg(target_os = "linux")]
mod sys {
    use std::ffi::CString;
    use std::fs::{File, OpenOptions};
    use std::io;
    use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
    use std::os::unix::fs::MetadataExt;
    use std::ptr::NonNull;
    use std::sync::OnceLock;

    use crate::device::Device;
    use crate::error::{Error, Result};

    /// Newer kernels may insist on it (vm.memfd_noexec = 2); older ones refuse it (EINVAL).
    const MFD_NOEXEC_SEAL: libc::c_uint = 0x0008;

    /// A failed system call: out of memory when the OS says so (no memory, no room in the
    /// memory-backed file system), an OS error with its code otherwise.
    fn os_error(what: &str, err: io::Error) -> Error {
        match err.raw_os_error() {
            Some(libc::ENOMEM | libc::ENOSPC) => Error::OutOfMemory {
                requested: 0,
                device: Device::CPU,
                reason: format!("{what}: {err}"),
            },
            errno => Error::System {
                what: what.to_owned(),
                errno: errno.unwrap_or(0),
                reason: err.to_string(),
            },
        }
    }

    pub fn supported() -> Result<()> {
        boot_id().map(|_| ())
    }

    pub fn page_size() -> usize {
        // SAFETY: sysconf only reads a constant of the running system.
        let n = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
        usize::try_from(n).ok().filter(|&n| n > 0).unwrap_or(4096)
    }

    pub fn boot_id() -> Result<String> {
        static BOOT_ID: OnceLock<std::result::Result<String, String>> = OnceLock::new();
        BOOT_ID
            .get_or_init(|| {
                std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
                    .map(|s| s.trim().to_string())
                    .map_err(|e| e.to_string())
            })
            .clone()
            .map_err(|e| Error::Resource {
                what: "shared memory".into(),
                reason: format!("cannot read this machine's boot id (is /proc mounted?): {e}"),
            })
    }

    pub fn raw_fd(file: &File) -> i32 {
        file.as_raw_fd()
    }

    /// A memfd of `len` bytes, sealed so it can neither shrink nor grow.
    pub fn create(name: &str, len: usize) -> Result<File> {
        let cname = CString::new(name).map_err(|_| Error::Resource {
            what: "segment name".into(),
            reason: format!("{name:?} contains a NUL byte"),
        })?;
        let flags = libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING;
        // SAFETY: `cname` is a NUL-terminated string that outlives the call.
        let mut fd = unsafe { libc::memfd_create(cname.as_ptr(), flags | MFD_NOEXEC_SEAL) };
        if fd < 0 && io::Error::last_os_error().raw_os_error() == Some(libc::EINVAL) {
            // SAFETY: as above.
            fd = unsafe { libc::memfd_create(cname.as_ptr(), flags) };
        }
        if fd < 0 {
            return Err(os_error("memfd_create", io::Error::last_os_error()));
        }
        // SAFETY: `fd` is a fresh descriptor nothing else owns.
        let file = File::from(unsafe { OwnedFd::from_raw_fd(fd) });
        file.set_len(len as u64)
            .map_err(|e| os_error(&format!("sizing a {len}-byte segment"), e))?;
        let seals = libc::F_SEAL_SHRINK | libc::F_SEAL_GROW | libc::F_SEAL_SEAL;
        // SAFETY: fcntl on a descriptor this function owns, with an int argument.
        if unsafe { libc::fcntl(file.as_raw_fd(), libc::F_ADD_SEALS, seals) } < 0 {
            return Err(os_error("sealing a segment", io::Error::last_os_error()));
        }
        Ok(file)
    }

    /// (device, inode, size) of an open file.
    pub fn identity(file: &File) -> Result<(u64, u64, u64)> {
        let meta = file
            .metadata()
            .map_err(|e| os_error("fstat of a segment", e))?;
        Ok((meta.dev(), meta.ino(), meta.size()))
    }

    /// Which seals the file has (none for a file that cannot be sealed: not a memfd).
    pub fn seals(file: &File) -> Result<super::Seals> {
        // SAFETY: fcntl F_GET_SEALS on an open descriptor only reads its seals.
        let seals = unsafe { libc::fcntl(file.as_raw_fd(), libc::F_GET_SEALS) };
        // Files that cannot be sealed at all answer EINVAL.
        let seals = seals.max(0);
        Ok(super::Seals {
            shrink: seals & libc::F_SEAL_SHRINK != 0,
            write: seals & (libc::F_SEAL_WRITE | libc::F_SEAL_FUTURE_WRITE) != 0,
        })
    }

    /// A shared mapping of the first `len` bytes of `file`, which has at least that many.
    pub fn map(file: &File, len: usize, writable: bool) -> Result<NonNull<u8>> {
        let prot = libc::PROT_READ | if writable { libc::PROT_WRITE } else { 0 };
        // SAFETY: a new mapping at an address the kernel picks, so no existing memory is
        // affected; callers pass a length the file covers (they sized it or checked st_size,
        // and its seals keep it from shrinking).
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                prot,
                libc::MAP_SHARED,
                file.as_raw_fd(),
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            let err = io::Error::last_os_error();
            if err.raw_os_error() == Some(libc::ENOMEM) {
                return Err(Error::OutOfMemory {
                    requested: len,
                    device: Device::CPU,
                    reason: format!("mmap of a shared segment: {err}"),
                });
            }
            return Err(os_error("mmap of a shared segment", err));
        }
        NonNull::new(ptr.cast()).ok_or_else(|| os_error("mmap", io::Error::other("NULL")))
    }

    /// # Safety
    /// `ptr..ptr+len` must be a mapping made by [`map`] that nothing uses any more.
    pub unsafe fn unmap(ptr: NonNull<u8>, len: usize) {
        // SAFETY: per this function's contract.
        unsafe { libc::munmap(ptr.as_ptr().cast(), len) };
    }

    /// Why a holder's descriptor was not opened.
    pub enum HolderError {
        /// It names a FIFO, socket, device or directory (what it is, in words).
        NotASegment(&'static str),
        /// It names another file than the handle's (the number was reused).
        Replaced,
        Io(io::Error),
    }

    /// Opens descriptor `fd` of process `pid` anew, read-write if allowed, else read-only,
    /// once it is known to be the regular file `(dev, ino)`: a FIFO, a device or a socket is
    /// refused before it is opened (opening a FIFO would block until a writer comes), and the
    /// open itself never blocks and never acquires a controlling terminal.
    pub fn open_holder(
        pid: u32,
        fd: i32,
        identity: (u64, u64),
    ) -> Result<(File, bool), HolderError> {
        use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};

        let path = format!("/proc/{pid}/fd/{fd}");
        let meta = std::fs::metadata(&path).map_err(HolderError::Io)?;
        let kind = meta.file_type();
        if !kind.is_file() {
            return Err(HolderError::NotASegment(if kind.is_fifo() {
                "a FIFO"
            } else if kind.is_socket() {
                "a socket"
            } else if kind.is_char_device() || kind.is_block_device() {
                "a device"
            } else if kind.is_dir() {
                "a directory"
            } else {
                "not a regular file"
            }));
        }
        if (meta.dev(), meta.ino()) != identity {
            return Err(HolderError::Replaced);
        }
        let open = |write: bool| {
            OpenOptions::new()
                .read(true)
                .write(write)
                .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY | libc::O_CLOEXEC)
                .open(&path)
        };
        let (file, writable) = match open(true) {
            Ok(file) => (file, true),
            Err(e) if e.kind() == io::ErrorKind::PermissionDenied => {
                (open(false).map_err(HolderError::Io)?, false)
            }
            Err(e) => return Err(HolderError::Io(e)),
        };
        // The descriptor may have been replaced between the look and the open: look again
        // at what was opened.
        let opened = file.metadata().map_err(HolderError::Io)?;
        if !opened.file_type().is_file() {
            return Err(HolderError::NotASegment("not a regular file"));
        }
        if (opened.dev(), opened.ino()) != identity {
            return Err(HolderError::Replaced);
        }
        Ok((file, writable))
    }
}

#[cfg(not(target_os = "linux"))]
mod sys {
    //! Shared segments need memfd and /proc: everything refuses, saying so.
    use std::fs::File;
    use std::io;
    use std::ptr::NonNull;

    use crate::error::{Error, Result};

    fn unsupported() -> Error {
        Error::Resource {
            what: "shared memory".into(),
            reason: "zerohop's shared memory needs Linux (memfd_create and /proc)".into(),
        }
    }

    pub fn supported() -> Result<()> {
        Err(unsupported())
    }
    pub fn page_size() -> usize {
        4096
    }
    pub fn boot_id() -> Result<String> {
        Err(unsupported())
    }
    pub fn raw_fd(_file: &File) -> i32 {
        -1
    }
    pub fn create(_name: &str, _len: usize) -> Result<File> {
        Err(unsupported())
    }
    pub fn identity(_file: &File) -> Result<(u64, u64, u64)> {
        Err(unsupported())
    }
    pub fn seals(_file: &File) -> Result<super::Seals> {
        Err(unsupported())
    }
    pub fn map(_file: &File, _len: usize, _writable: bool) -> Result<NonNull<u8>> {
        Err(unsupported())
    }
    /// # Safety
    /// Never called: no segment is ever mapped here.
    pub unsafe fn unmap(_ptr: NonNull<u8>, _len: usize) {}
    pub enum HolderError {
        #[allow(dead_code)] // the Linux variants, never made here
        NotASegment(&'static str),
        #[allow(dead_code)]
        Replaced,
        Io(io::Error),
    }
    pub fn open_holder(
        _pid: u32,
        _fd: i32,
        _identity: (u64, u64),
    ) -> Result<(File, bool), HolderError> {
        Err(HolderError::Io(io::Error::new(
            io::ErrorKind::Unsupported,
            unsupported().to_string(),
        )))
    }
}

#[cfg(test)]
#[path = "shared_tests.rs"]
mod tests;
