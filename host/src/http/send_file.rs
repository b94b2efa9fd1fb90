//! Files sent with `sendfile(2)`: a response body that is a region of an open file goes from
//! the page cache to the socket without being copied through the server. hyper owns the
//! connection's writes, so the body it is given holds placeholders of the region's length
//! (slices of one static buffer that is never read), and the connection's writer (`conn::Io`)
//! sends the file's bytes where it meets them.

use std::collections::VecDeque;
use std::fs::File;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::{Arc, Mutex, OnceLock};
use std::task::{Context, Poll, ready};

/// The placeholders' bytes: untouched zero pages (no memory is spent on them), never sent.
static PLACEHOLDER: [u8; 1 << 20] = [0; 1 << 20];

/// A response's body as a region of an open file, put in the response's extensions by the
/// handler next to an ordinary body of the same bytes. The HTTP layer sends the region instead
/// when it can (a `GET` on a hyper connection, a kernel with `cachestat(2)`), else the body.
#[derive(Debug, Clone)]
pub(crate) struct SendFile {
    file: Arc<File>,
    at: u64,
    left: u64,
}

impl SendFile {
    pub(crate) fn new(file: Arc<File>, start: u64, len: u64) -> Self {
        Self {
            file,
            at: start,
            left: len,
        }
    }

    pub(super) fn len(&self) -> u64 {
        self.left
    }
}

/// Whether `bytes` are (part of) a placeholder.
pub(super) fn is_placeholder(bytes: &[u8]) -> bool {
    let base = PLACEHOLDER.as_ptr() as usize;
    let p = bytes.as_ptr() as usize;
    !bytes.is_empty() && p >= base && p < base + PLACEHOLDER.len()
}

/// The next placeholder of a body with `left` bytes to go.
pub(super) fn placeholder(left: u64) -> bytes::Bytes {
    let n = usize::try_from(left)
        .unwrap_or(PLACEHOLDER.len())
        .min(PLACEHOLDER.len());
    bytes::Bytes::from_static(&PLACEHOLDER[..n])
}

/// Whether files may be sent so here: the kernel must say which pages it caches
/// (`cachestat(2)`, Linux 6.5), since a `sendfile` of pages on disk would hold an async worker
/// while they are read. Asked once; a seccomp filter that refuses it answers no too.
pub(super) fn available() -> bool {
    static AVAILABLE: OnceLock<bool> = OnceLock::new();
    *AVAILABLE.get_or_init(|| {
        // An invalid descriptor: the call exists when it says so.
        matches!(cachestat(-1, 0, 1), Err(e) if e.raw_os_error() == Some(libc::EBADF))
    })
}

/// The regions hyper's bodies announced on one connection, in the order their placeholders
/// reach the writer.
#[derive(Debug, Default)]
pub(super) struct Queue(Mutex<VecDeque<SendFile>>);

impl Queue {
    pub(super) fn push(&self, region: SendFile) {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .push_back(region);
    }

    fn pop(&self) -> Option<SendFile> {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .pop_front()
    }
}

/// The writer's side: the region being sent and, when its next bytes are not in the page cache,
/// their read on the blocking pool.
#[derive(Default)]
pub(super) struct Sender {
    current: Option<SendFile>,
    warming: Option<tokio::task::JoinHandle<io::Result<()>>>,
    /// The file offset up to which bytes were just read into the page cache.
    warmed_to: u64,
}

impl Sender {
    /// Send up to `want` bytes of the current region (the next one in `queue` when none is)
    /// on `stream`, in place of a placeholder of that length.
    pub(super) fn poll_send(
        &mut self,
        cx: &mut Context<'_>,
        stream: &tokio::net::TcpStream,
        queue: &Queue,
        want: usize,
    ) -> Poll<io::Result<usize>> {
        if self.current.is_none() {
            self.current = queue.pop();
            self.warmed_to = 0;
        }
        let Some(region) = self.current.as_mut() else {
            // Sending the placeholder's zeros would corrupt the body: end the connection.
            return Poll::Ready(Err(io::Error::other("a file's placeholder with no file")));
        };
        // A body's placeholders add up to its region exactly: anything else is a bug, and
        // would send the next region's bytes in this one's place.
        if want == 0 || want as u64 > region.left {
            return Poll::Ready(Err(io::Error::other(
                "a placeholder past its file's region",
            )));
        }
        let n = want;
        loop {
            if let Some(read) = self.warming.as_mut() {
                let done = ready!(Pin::new(read).poll(cx));
                self.warming = None;
                done.map_err(io::Error::other)??;
                self.warmed_to = region.at + n as u64;
            } else if region.at + n as u64 > self.warmed_to
                && !cached(&region.file, region.at, n as u64)
            {
                let (file, at) = (Arc::clone(&region.file), region.at);
                self.warming = Some(tokio::task::spawn_blocking(move || warm(&file, at, n)));
                continue;
            }
            ready!(stream.poll_write_ready(cx))?;
            let sent = stream.try_io(tokio::io::Interest::WRITABLE, || {
                let mut at = region.at;
                rustix::fs::sendfile(stream, &*region.file, Some(&mut at), n).map_err(Into::into)
            });
            match sent {
                // The file is shorter than the length already announced.
                Ok(0) => return Poll::Ready(Err(io::ErrorKind::UnexpectedEof.into())),
                Ok(k) => {
                    region.at += k as u64;
                    region.left -= k as u64;
                    if region.left == 0 {
                        self.current = None;
                    }
                    return Poll::Ready(Ok(k));
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                Err(e) => return Poll::Ready(Err(e)),
            }
        }
    }
}

/// Write `bufs` (the head before a file's bytes) held back for the file's first bytes
/// (`MSG_MORE`), so that they leave together, as one segment: a head of its own costs the client
/// a wake-up and a read.
pub(super) fn poll_send_before(
    cx: &mut Context<'_>,
    stream: &tokio::net::TcpStream,
    bufs: &[io::IoSlice<'_>],
) -> Poll<io::Result<usize>> {
    use rustix::net::{SendAncillaryBuffer, SendFlags};
    loop {
        ready!(stream.poll_write_ready(cx))?;
        let sent = stream.try_io(tokio::io::Interest::WRITABLE, || {
            let flags = SendFlags::MORE | SendFlags::NOSIGNAL;
            rustix::net::sendmsg(stream, bufs, &mut SendAncillaryBuffer::default(), flags)
                .map_err(Into::into)
        });
        match sent {
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
            r => return Poll::Ready(r),
        }
    }
}

/// Read `n` bytes of `file` from `at` (on the blocking pool), so that the page cache holds them
/// when `sendfile` copies them.
fn warm(file: &File, at: u64, n: usize) -> io::Result<()> {
    use std::os::unix::fs::FileExt as _;
    let mut buf = vec![0u8; n.min(256 << 10)];
    let (mut at, end) = (at, at + n as u64);
    while at < end {
        let want = usize::try_from(end - at)
            .unwrap_or(buf.len())
            .min(buf.len());
        match file.read_at(&mut buf[..want], at)? {
            0 => break,
            k => at += k as u64,
        }
    }
    Ok(())
}

/// Whether the page cache holds every page of `n` bytes of `file` from `at`.
fn cached(file: &File, at: u64, n: u64) -> bool {
    use std::os::fd::AsRawFd as _;
    const PAGE: u64 = 4096;
    let (first, last) = (at / PAGE, (at + n - 1) / PAGE);
    let pages = last - first + 1;
    matches!(cachestat(file.as_raw_fd(), first * PAGE, pages * PAGE), Ok(c) if c >= pages)
}

/// `cachestat(2)`: how many pages of `len` bytes from `off` the page cache holds.
#[cfg(all(
    target_os = "linux",
    any(target_arch = "x86_64", target_arch = "aarch64")
))]
fn cachestat(fd: std::os::fd::RawFd, off: u64, len: u64) -> io::Result<u64> {
    /// Its number in both architectures' tables (libc does not name it yet).
    const SYS_CACHESTAT: libc::c_long = 451;
    #[repr(C)]
    struct Range {
        off: u64,
        len: u64,
    }
    #[repr(C)]
    #[derive(Default)]
    struct Stat {
        nr_cache: u64,
        nr_dirty: u64,
        nr_writeback: u64,
        nr_evicted: u64,
        nr_recently_evicted: u64,
    }
    let range = Range { off, len };
    let mut stat = Stat::default();
    #[allow(unsafe_code, reason = "a plain syscall libc does not wrap; see SAFETY")]
    // SAFETY: the kernel reads `range` and writes `stat`, both live, sized and laid out as its
    // `struct cachestat_range` and `struct cachestat`; the flags must be 0.
    let r = unsafe {
        libc::syscall(
            SYS_CACHESTAT,
            fd,
            &range as *const Range,
            &mut stat as *mut Stat,
            0 as libc::c_uint,
        )
    };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(stat.nr_cache)
}

#[cfg(not(all(
    target_os = "linux",
    any(target_arch = "x86_64", target_arch = "aarch64")
)))]
fn cachestat(_fd: i32, _off: u64, _len: u64) -> io::Result<u64> {
    Err(io::ErrorKind::Unsupported.into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn placeholders_are_recognised_and_nothing_else_is() {
        let p = placeholder(3 << 20);
        assert_eq!(p.len(), PLACEHOLDER.len());
        assert!(is_placeholder(&p));
        assert!(is_placeholder(&p[PLACEHOLDER.len() - 1..]));
        assert!(!is_placeholder(&p[..0]));
        assert_eq!(placeholder(10).len(), 10);
        let zeros = vec![0u8; 100];
        assert!(!is_placeholder(&zeros));
        assert!(!is_placeholder(b"HTTP/1.1 200 OK\r\n"));
    }

    #[test]
    fn the_cache_check_sees_a_file_just_written_and_not_one_evicted() {
        if !available() {
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        std::fs::write(&path, vec![7u8; 300_000]).unwrap();
        let file = File::open(&path).unwrap();
        assert!(cached(&file, 0, 300_000));
        assert!(cached(&file, 299_999, 1));
        evict(&file);
        assert!(!cached(&file, 0, 300_000));
        warm(&file, 0, 300_000).unwrap();
        assert!(cached(&file, 0, 300_000));
    }

    /// Drop `file`'s pages from the page cache (clean pages go with POSIX_FADV_DONTNEED).
    fn evict(file: &File) {
        file.sync_all().unwrap();
        rustix::fs::fadvise(file, 0, None, rustix::fs::Advice::DontNeed).unwrap();
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn regions_queued_in_turn_are_sent_in_place_of_their_placeholders() {
        use tokio::io::AsyncReadExt as _;
        if !available() {
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let bytes: Vec<u8> = (0..3_000_001u32).map(|i| (i * 7 + i / 251) as u8).collect();
        let path = dir.path().join("f");
        std::fs::write(&path, &bytes).unwrap();
        let file = Arc::new(File::open(&path).unwrap());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let reader = tokio::spawn(async move {
            let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
            let mut got = Vec::new();
            s.read_to_end(&mut got).await.unwrap();
            got
        });
        let (stream, _) = listener.accept().await.unwrap();
        // Three regions: the whole file from disk (evicted first), a range of it from the
        // cache, and its last byte; written as hyper would, in placeholders of odd sizes.
        let regions = [(0u64, 3_000_001u64), (1_234_567, 1_048_577), (3_000_000, 1)];
        let queue = Queue::default();
        let mut sender = Sender::default();
        let mut want = Vec::new();
        evict(&file);
        for (i, &(at, len)) in regions.iter().enumerate() {
            queue.push(SendFile::new(Arc::clone(&file), at, len));
            want.extend_from_slice(&bytes[at as usize..(at + len) as usize]);
            let mut left = len;
            while left > 0 {
                let step = placeholder(left).len().min(100_003 * (i + 1));
                let mut done = 0;
                while done < step {
                    let n = std::future::poll_fn(|cx| {
                        sender.poll_send(cx, &stream, &queue, step - done)
                    })
                    .await
                    .unwrap();
                    done += n;
                }
                left -= step as u64;
            }
        }
        // Nothing queued: a placeholder is refused, never sent as zeros; nor is one longer
        // than what is left of its region.
        let err = std::future::poll_fn(|cx| sender.poll_send(cx, &stream, &queue, 10)).await;
        assert!(err.is_err());
        queue.push(SendFile::new(Arc::clone(&file), 0, 5));
        let err = std::future::poll_fn(|cx| sender.poll_send(cx, &stream, &queue, 6)).await;
        assert!(err.is_err());
        drop(stream);
        let got = reader.await.unwrap();
        assert_eq!(got.len(), want.len());
        assert!(got == want, "the bytes sent differ from the file's");
    }
}
