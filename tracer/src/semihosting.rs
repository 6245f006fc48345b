//! Arm semihosting: the calls a program built with newlib's
//! `--specs=rdimon.specs` makes through `BKPT 0xAB` (Thumb) to print, read
//! its command line, find its heap and stack, and exit — answered as an Arm
//! FVP or a debugger would, for the console only (no host files).
//!
//! The operation number is in r0, its argument (a value, or the address of
//! a parameter block of words) in r1; the result goes back in r0. The
//! calls are decoded here against [`GuestMemory`], so they are tested
//! without an emulator; `program.rs` owns the machine. (About 700 lines
//! with its tests: one function per call would only spread one table.)

use std::io::Write;

/// Guest memory as the semihosting calls see it.
pub trait GuestMemory {
    /// Reads `out.len()` bytes at `address`; false when any is unmapped.
    fn read(&self, address: u64, out: &mut [u8]) -> bool;
    /// Writes `bytes` at `address` (the host's own write: a buffer the call
    /// fills); false when any byte is unmapped.
    fn write(&mut self, address: u64, bytes: &[u8]) -> bool;
    /// Reads like [`GuestMemory::read`] bytes the call only looks at, not
    /// ones it takes (the chunks scanned for a string's end).
    fn peek(&self, address: u64, out: &mut [u8]) -> bool {
        self.read(address, out)
    }
}

/// Operation numbers (Arm's "Semihosting for AArch32 and AArch64").
pub mod op {
    /// Open a file (here: the console `:tt` and the features file).
    pub const OPEN: u32 = 0x01;
    /// Close a handle.
    pub const CLOSE: u32 = 0x02;
    /// Write one character to the console.
    pub const WRITEC: u32 = 0x03;
    /// Write a NUL-terminated string to the console.
    pub const WRITE0: u32 = 0x04;
    /// Write a buffer to a handle.
    pub const WRITE: u32 = 0x05;
    /// Read from a handle.
    pub const READ: u32 = 0x06;
    /// Read one character from the console.
    pub const READC: u32 = 0x07;
    /// Whether a status is an error.
    pub const ISERROR: u32 = 0x08;
    /// Whether a handle is interactive.
    pub const ISTTY: u32 = 0x09;
    /// Set a handle's position.
    pub const SEEK: u32 = 0x0A;
    /// Length of a handle's file.
    pub const FLEN: u32 = 0x0C;
    /// Centiseconds since the program started.
    pub const CLOCK: u32 = 0x10;
    /// Seconds since 1970.
    pub const TIME: u32 = 0x11;
    /// The last call's errno.
    pub const ERRNO: u32 = 0x13;
    /// The command line.
    pub const GET_CMDLINE: u32 = 0x15;
    /// Heap and stack bounds.
    pub const HEAPINFO: u32 = 0x16;
    /// Exit (AArch32: r1 is the reason code itself).
    pub const EXIT: u32 = 0x18;
    /// Exit with a reason and a status (r1: a block of both).
    pub const EXIT_EXTENDED: u32 = 0x20;
    /// Ticks since the program started (64 bits).
    pub const ELAPSED: u32 = 0x30;
    /// Ticks per second of `ELAPSED`.
    pub const TICKFREQ: u32 = 0x31;
}

/// `ADP_Stopped_ApplicationExit`: a normal exit.
pub const APPLICATION_EXIT: u32 = 0x20026;
/// `ADP_Stopped_RunTimeErrorUnknown`: what newlib's `abort` reports.
pub const RUNTIME_ERROR: u32 = 0x20023;

/// The clock every time call reads: one instruction per cycle at this
/// frequency, so that a program's timings are the same in every run.
pub const CLOCK_HZ: u64 = 100_000_000;

/// The features file's contents: magic, then feature byte 0 with
/// `SH_EXT_EXIT_EXTENDED` (exit codes reach the host) and
/// `SH_EXT_STDOUT_STDERR` (`:tt` opened for append is stderr).
const FEATURES: &[u8] = b"SHFB\x03";
const FEATURES_NAME: &[u8] = b":semihosting-features";

/// `ENOENT`, `EBADF`, `EFAULT`, `EINVAL`, `EMFILE` as newlib numbers them.
const ENOENT: u32 = 2;
const EBADF: u32 = 9;
const EFAULT: u32 = 14;
const EINVAL: u32 = 22;
const EMFILE: u32 = 24;

/// Most bytes one `SYS_WRITE` writes (the rest it returns as not written,
/// as a host's pipe may; newlib's stdio writes it in further calls) and
/// one `SYS_WRITE0` reads: a call's host work stays small whatever length
/// the program gives, so its instruction budget bounds a loop of calls.
pub const MAX_TRANSFER: u32 = 64 << 10;

/// Most handles open at once: past them `SYS_OPEN` fails with `EMFILE`,
/// as a host's `open` does at its descriptor limit (`ulimit -n`, 1024 by
/// default). newlib itself keeps at most 20 files open.
pub const MAX_HANDLES: usize = 1024;

/// The name of semihosting operation `number` (`SYS_WRITE`), for messages.
pub fn op_name(number: u32) -> &'static str {
    match number {
        op::OPEN => "SYS_OPEN",
        op::CLOSE => "SYS_CLOSE",
        op::WRITEC => "SYS_WRITEC",
        op::WRITE0 => "SYS_WRITE0",
        op::WRITE => "SYS_WRITE",
        op::READ => "SYS_READ",
        op::READC => "SYS_READC",
        op::ISERROR => "SYS_ISERROR",
        op::ISTTY => "SYS_ISTTY",
        op::SEEK => "SYS_SEEK",
        op::FLEN => "SYS_FLEN",
        op::CLOCK => "SYS_CLOCK",
        op::TIME => "SYS_TIME",
        op::ERRNO => "SYS_ERRNO",
        op::GET_CMDLINE => "SYS_GET_CMDLINE",
        op::HEAPINFO => "SYS_HEAPINFO",
        op::EXIT => "SYS_EXIT",
        op::EXIT_EXTENDED => "SYS_EXIT_EXTENDED",
        op::ELAPSED => "SYS_ELAPSED",
        op::TICKFREQ => "SYS_TICKFREQ",
        _ => "a semihosting call",
    }
}

/// What a handle refers to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Handle {
    Stdin,
    Stdout,
    Stderr,
    /// The features file, at a position.
    Features(usize),
}

/// The heap and stack a program is told about (`SYS_HEAPINFO`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct HeapInfo {
    /// Lowest heap address.
    pub heap_base: u32,
    /// One past the highest heap address.
    pub heap_limit: u32,
    /// Initial stack pointer (one past the highest stack address).
    pub stack_base: u32,
    /// Lowest stack address.
    pub stack_limit: u32,
}

/// How a program ended through semihosting.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Exit {
    /// A normal exit with this status (`exit(status)`, `return` from main).
    Status(i32),
    /// Any other reason code (newlib's `abort` says
    /// [`RUNTIME_ERROR`]), with the status when the call carried one.
    Reason {
        /// The `ADP_Stopped_*` code.
        reason: u32,
        /// The subcode (`SYS_EXIT_EXTENDED`; for `abort`, the signal).
        subcode: Option<u32>,
    },
}

/// What one semihosting call asks of the machine.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Put this in r0 and go on.
    Return(u32),
    /// The program ended.
    Exit(Exit),
    /// The program asked for its command line with a buffer too small for
    /// it: memtrace stops with an error rather than run it without its
    /// arguments (a host's `SYS_GET_CMDLINE` would fail, and newlib's
    /// `crt0` would then start `main` with `argc` 0).
    CommandLineTooLong {
        /// Bytes of the command line with its terminating NUL.
        bytes: usize,
        /// Bytes of the program's buffer (its request's length word).
        buffer: u32,
    },
}

/// A semihosting call memtrace does not answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Unsupported(pub String);

/// Where the program's console goes.
pub struct Console {
    /// Everything written to stdout.
    pub stdout: Vec<u8>,
    /// Everything written to stderr.
    pub stderr: Vec<u8>,
    /// Also written, as it comes, to memtrace's own stdout and stderr.
    pub echo: bool,
    /// Most bytes kept of each stream (the rest is still echoed).
    pub keep: usize,
}

impl Console {
    fn put(&mut self, handle: Handle, bytes: &[u8]) {
        let (kept, live): (&mut Vec<u8>, Box<dyn Write>) = match handle {
            Handle::Stderr => (&mut self.stderr, Box::new(std::io::stderr())),
            _ => (&mut self.stdout, Box::new(std::io::stdout())),
        };
        let room = self.keep.saturating_sub(kept.len());
        kept.extend_from_slice(&bytes[..bytes.len().min(room)]);
        if self.echo {
            let mut live = live;
            // A closed terminal must not stop the program under test.
            let _ = live.write_all(bytes).and_then(|()| live.flush());
        }
    }
}

/// The host side of semihosting for one program run.
pub struct Semihost {
    /// The console streams.
    pub console: Console,
    /// Open handles by number − 1; `None` is a closed slot.
    handles: Vec<Option<Handle>>,
    /// The closed slots, reused before the table grows (so an open is
    /// O(1), however many handles were opened before).
    free: Vec<u32>,
    errno: u32,
    cmdline: Vec<u8>,
    heap: HeapInfo,
}

impl Semihost {
    /// A host whose program's command line is `cmdline` (program name and
    /// arguments, joined by spaces) and whose memory is `heap`.
    pub fn new(cmdline: &str, heap: HeapInfo, console: Console) -> Semihost {
        Semihost {
            console,
            handles: Vec::new(),
            free: Vec::new(),
            errno: 0,
            cmdline: cmdline.as_bytes().to_vec(),
            heap,
        }
    }

    /// Answers operation `number` with argument `arg`; `instructions`
    /// retired so far is the program's clock.
    pub fn call(
        &mut self,
        mem: &mut dyn GuestMemory,
        number: u32,
        arg: u32,
        instructions: u64,
    ) -> Result<Outcome, Unsupported> {
        let word = |mem: &dyn GuestMemory, i: u32| read_word(mem, arg.wrapping_add(4 * i));
        let ret = |v: u32| Ok(Outcome::Return(v));
        const FAIL: u32 = u32::MAX;
        match number {
            op::OPEN => self.open_file(mem, arg),
            op::CLOSE => match word(mem, 0) {
                Some(h) if self.close(h) => ret(0),
                _ => self.fail(EBADF),
            },
            op::WRITEC => {
                let mut c = [0u8];
                if mem.read(arg as u64, &mut c) {
                    self.console.put(Handle::Stdout, &c);
                }
                ret(0)
            }
            op::WRITE0 => {
                let text = read_string(mem, arg as u64);
                self.console.put(Handle::Stdout, &text);
                ret(0)
            }
            op::WRITE => self.write(mem, arg),
            op::READ => {
                let (Some(h), Some(buf), Some(len)) = (word(mem, 0), word(mem, 1), word(mem, 2))
                else {
                    return self.fail(EINVAL);
                };
                self.read(mem, h, buf, len)
            }
            op::READC => ret(FAIL),
            op::ISERROR => ret(word(mem, 0).is_some_and(|s| (s as i32) < 0) as u32),
            op::ISTTY => match word(mem, 0).and_then(|h| self.handle(h)) {
                Some(Handle::Features(_)) => ret(0),
                Some(_) => ret(1),
                None => self.fail(EBADF),
            },
            op::SEEK => self.seek(mem, arg),
            op::FLEN => match word(mem, 0).and_then(|h| self.handle(h)) {
                Some(Handle::Features(_)) => ret(FEATURES.len() as u32),
                Some(_) => ret(0),
                None => self.fail(EBADF),
            },
            op::CLOCK => ret((instructions / (CLOCK_HZ / 100)) as u32),
            op::TIME => ret((instructions / CLOCK_HZ) as u32),
            op::ERRNO => ret(self.errno),
            op::GET_CMDLINE => self.command_line(mem, arg),
            op::HEAPINFO => self.heap_info(mem, arg),
            op::EXIT => Ok(Outcome::Exit(exit_of(arg, None))),
            op::EXIT_EXTENDED => match (word(mem, 0), word(mem, 1)) {
                (Some(reason), Some(sub)) => Ok(Outcome::Exit(exit_of(reason, Some(sub)))),
                _ => self.fail(EINVAL),
            },
            op::ELAPSED => {
                if !mem.write(arg as u64, &instructions.to_le_bytes()) {
                    return self.fail(EFAULT);
                }
                ret(0)
            }
            op::TICKFREQ => ret(CLOCK_HZ as u32),
            other => Err(Unsupported(format!(
                "semihosting operation {other:#x} (memtrace answers the console, exit, heap, clock and command-line calls; docs/check.md)"
            ))),
        }
    }

    /// SYS_OPEN: a handle on the console (`:tt`) or the features file.
    fn open_file(&mut self, mem: &mut dyn GuestMemory, arg: u32) -> Result<Outcome, Unsupported> {
        let word = |mem: &dyn GuestMemory, i: u32| read_word(mem, arg.wrapping_add(4 * i));
        let ret = |v: u32| Ok(Outcome::Return(v));
        let (Some(name), Some(mode), Some(len)) = (word(mem, 0), word(mem, 1), word(mem, 2)) else {
            return self.fail(EINVAL);
        };
        let mut text = vec![0u8; len.min(4096) as usize];
        if !mem.read(name as u64, &mut text) {
            return self.fail(EFAULT);
        }
        match open(&text, mode) {
            Some(handle) => match self.add_handle(handle) {
                Some(h) => ret(h),
                None => self.fail(EMFILE),
            },
            None => self.fail(ENOENT),
        }
    }

    /// SYS_WRITE to the console; the bytes not written.
    fn write(&mut self, mem: &mut dyn GuestMemory, arg: u32) -> Result<Outcome, Unsupported> {
        let word = |mem: &dyn GuestMemory, i: u32| read_word(mem, arg.wrapping_add(4 * i));
        let ret = |v: u32| Ok(Outcome::Return(v));
        let (Some(h), Some(buf), Some(len)) = (word(mem, 0), word(mem, 1), word(mem, 2)) else {
            return self.fail(EINVAL);
        };
        match self.handle(h) {
            Some(handle @ (Handle::Stdout | Handle::Stderr)) => {
                let mut bytes = vec![0u8; len.min(MAX_TRANSFER) as usize];
                if !mem.read(buf as u64, &mut bytes) {
                    return self.fail(EFAULT);
                }
                self.console.put(handle, &bytes);
                ret(len - bytes.len() as u32)
            }
            _ => {
                self.errno = EBADF;
                ret(len)
            }
        }
    }

    /// SYS_SEEK within the features file.
    fn seek(&mut self, mem: &mut dyn GuestMemory, arg: u32) -> Result<Outcome, Unsupported> {
        let word = |mem: &dyn GuestMemory, i: u32| read_word(mem, arg.wrapping_add(4 * i));
        let ret = |v: u32| Ok(Outcome::Return(v));
        let (Some(h), Some(pos)) = (word(mem, 0), word(mem, 1)) else {
            return self.fail(EINVAL);
        };
        match self.slot(h) {
            Some(Some(Handle::Features(at))) => {
                *at = (pos as usize).min(FEATURES.len());
                ret(0)
            }
            Some(Some(_)) => ret(0),
            _ => self.fail(EBADF),
        }
    }

    /// SYS_GET_CMDLINE: the program's name and arguments.
    fn command_line(
        &mut self,
        mem: &mut dyn GuestMemory,
        arg: u32,
    ) -> Result<Outcome, Unsupported> {
        let word = |mem: &dyn GuestMemory, i: u32| read_word(mem, arg.wrapping_add(4 * i));
        let ret = |v: u32| Ok(Outcome::Return(v));
        let (Some(buf), Some(len)) = (word(mem, 0), word(mem, 1)) else {
            return self.fail(EINVAL);
        };
        let mut text = self.cmdline.clone();
        text.push(0);
        if text.len() > len as usize {
            return Ok(Outcome::CommandLineTooLong {
                bytes: text.len(),
                buffer: len,
            });
        }
        let n = (text.len() - 1) as u32;
        if !mem.write(buf as u64, &text) || !mem.write(arg as u64 + 4, &n.to_le_bytes()) {
            return self.fail(EFAULT);
        }
        ret(0)
    }

    /// SYS_HEAPINFO: the heap and stack the layout gives the program.
    fn heap_info(&mut self, mem: &mut dyn GuestMemory, arg: u32) -> Result<Outcome, Unsupported> {
        let ret = |v: u32| Ok(Outcome::Return(v));
        let Some(block) = read_word(mem, arg) else {
            return self.fail(EINVAL);
        };
        let h = self.heap;
        let words = [h.heap_base, h.heap_limit, h.stack_base, h.stack_limit];
        let bytes: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
        if !mem.write(block as u64, &bytes) {
            return self.fail(EFAULT);
        }
        ret(0)
    }

    fn read(
        &mut self,
        mem: &mut dyn GuestMemory,
        h: u32,
        buf: u32,
        len: u32,
    ) -> Result<Outcome, Unsupported> {
        match self.slot(h) {
            Some(Some(Handle::Features(at))) => {
                let start = (*at).min(FEATURES.len());
                let n = (FEATURES.len() - start).min(len as usize);
                // The position moves only when the bytes arrived.
                let pos = start + n;
                if !mem.write(buf as u64, &FEATURES[start..pos]) {
                    return self.fail(EFAULT);
                }
                if let Some(Some(Handle::Features(at))) = self.slot(h) {
                    *at = pos;
                }
                Ok(Outcome::Return(len - n as u32))
            }
            // The console's input is empty: end of file at once.
            Some(Some(Handle::Stdin)) => Ok(Outcome::Return(len)),
            _ => self.fail(EBADF),
        }
    }

    fn fail(&mut self, errno: u32) -> Result<Outcome, Unsupported> {
        self.errno = errno;
        Ok(Outcome::Return(u32::MAX))
    }

    /// A new handle for `handle`; `None` when [`MAX_HANDLES`] are open.
    fn add_handle(&mut self, handle: Handle) -> Option<u32> {
        // Handle 0 is never given out: some C libraries read it as "none".
        if let Some(i) = self.free.pop() {
            self.handles[i as usize] = Some(handle);
            return Some(i + 1);
        }
        if self.handles.len() >= MAX_HANDLES {
            return None;
        }
        self.handles.push(Some(handle));
        Some(self.handles.len() as u32)
    }

    /// Closes handle `h`; false when it is not open.
    fn close(&mut self, h: u32) -> bool {
        match self.slot(h) {
            Some(slot) => {
                *slot = None;
                self.free.push(h - 1);
                true
            }
            None => false,
        }
    }

    fn slot(&mut self, h: u32) -> Option<&mut Option<Handle>> {
        let i = (h as usize).checked_sub(1)?;
        self.handles.get_mut(i).filter(|s| s.is_some())
    }

    fn handle(&self, h: u32) -> Option<Handle> {
        let i = (h as usize).checked_sub(1)?;
        self.handles.get(i).copied().flatten()
    }
}

/// The handle `SYS_OPEN` gives `name` in fopen `mode` (0–11: r, rb, r+,
/// r+b, w, wb, w+, w+b, a, ab, a+, a+b): the console `:tt` (read modes are
/// stdin, write modes stdout, append modes stderr) and the features file.
fn open(name: &[u8], mode: u32) -> Option<Handle> {
    match name {
        b":tt" => Some(match mode {
            0..=3 => Handle::Stdin,
            4..=7 => Handle::Stdout,
            _ => Handle::Stderr,
        }),
        FEATURES_NAME if mode <= 3 => Some(Handle::Features(0)),
        _ => None,
    }
}

fn exit_of(reason: u32, subcode: Option<u32>) -> Exit {
    match (reason, subcode) {
        (APPLICATION_EXIT, Some(status)) => Exit::Status(status as i32),
        (APPLICATION_EXIT, None) => Exit::Status(0),
        (reason, subcode) => Exit::Reason { reason, subcode },
    }
}

fn read_word(mem: &dyn GuestMemory, address: u32) -> Option<u32> {
    let mut b = [0u8; 4];
    mem.read(address as u64, &mut b)
        .then(|| u32::from_le_bytes(b))
}

/// A NUL-terminated guest string (at most [`MAX_TRANSFER`] bytes), found a
/// chunk at a time (byte by byte where a chunk would cross into unmapped
/// memory), then read: the string and its NUL are what the call takes.
fn read_string(mem: &dyn GuestMemory, start: u64) -> Vec<u8> {
    const CHUNK: usize = 256;
    let (mut len, mut nul) = (0usize, false);
    let mut chunk = [0u8; CHUNK];
    while len < MAX_TRANSFER as usize && !nul {
        let room = (MAX_TRANSFER as usize - len).min(CHUNK);
        let at = start + len as u64;
        let n = if mem.peek(at, &mut chunk[..room]) {
            room
        } else if mem.peek(at, &mut chunk[..1]) {
            1
        } else {
            break;
        };
        match chunk[..n].iter().position(|&b| b == 0) {
            Some(end) => (len, nul) = (len + end, true),
            None => len += n,
        }
    }
    let mut out = vec![0u8; len + nul as usize];
    if !mem.read(start, &mut out) {
        return Vec::new();
    }
    out.truncate(len);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Flat(Vec<u8>);
    impl GuestMemory for Flat {
        fn read(&self, address: u64, out: &mut [u8]) -> bool {
            let a = address as usize;
            match self.0.get(a..a + out.len()) {
                Some(src) => {
                    out.copy_from_slice(src);
                    true
                }
                None => false,
            }
        }
        fn write(&mut self, address: u64, bytes: &[u8]) -> bool {
            let a = address as usize;
            match self.0.get_mut(a..a + bytes.len()) {
                Some(dst) => {
                    dst.copy_from_slice(bytes);
                    true
                }
                None => false,
            }
        }
    }

    fn host() -> Semihost {
        let console = Console {
            stdout: Vec::new(),
            stderr: Vec::new(),
            echo: false,
            keep: 1 << 20,
        };
        let heap = HeapInfo {
            heap_base: 0x1000,
            heap_limit: 0x2000,
            stack_base: 0x4000,
            stack_limit: 0x3000,
        };
        Semihost::new("prog a b", heap, console)
    }

    fn put_words(mem: &mut Flat, at: u64, words: &[u32]) {
        let bytes: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
        assert!(mem.write(at, &bytes));
    }

    fn returned(o: Result<Outcome, Unsupported>) -> u32 {
        match o {
            Ok(Outcome::Return(v)) => v,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn console_handles_split_stdout_and_stderr_by_open_mode() {
        let mut mem = Flat(vec![0; 0x100]);
        let mut h = host();
        mem.write(0x80, b":tt\0hello\0oops").then_some(()).unwrap();
        put_words(&mut mem, 0x10, &[0x80, 4, 3]);
        let out = returned(h.call(&mut mem, op::OPEN, 0x10, 0));
        put_words(&mut mem, 0x10, &[0x80, 8, 3]);
        let err = returned(h.call(&mut mem, op::OPEN, 0x10, 0));
        assert_ne!(out, err);
        put_words(&mut mem, 0x20, &[out, 0x84, 5]);
        assert_eq!(returned(h.call(&mut mem, op::WRITE, 0x20, 0)), 0);
        put_words(&mut mem, 0x20, &[err, 0x8a, 4]);
        assert_eq!(returned(h.call(&mut mem, op::WRITE, 0x20, 0)), 0);
        assert_eq!(h.console.stdout, b"hello");
        assert_eq!(h.console.stderr, b"oops");
        // A handle never opened is an error, with errno set.
        put_words(&mut mem, 0x20, &[77, 0x84, 5]);
        assert_eq!(returned(h.call(&mut mem, op::WRITE, 0x20, 0)), 5);
        assert_eq!(returned(h.call(&mut mem, op::ERRNO, 0, 0)), EBADF);
    }

    #[test]
    fn the_features_file_announces_extended_exit_and_exit_codes_come_back() {
        let mut mem = Flat(vec![0; 0x100]);
        let mut h = host();
        mem.write(0x80, FEATURES_NAME).then_some(()).unwrap();
        put_words(&mut mem, 0x10, &[0x80, 0, FEATURES_NAME.len() as u32]);
        let f = returned(h.call(&mut mem, op::OPEN, 0x10, 0));
        put_words(&mut mem, 0x20, &[f]);
        assert_eq!(returned(h.call(&mut mem, op::FLEN, 0x20, 0)), 5);
        put_words(&mut mem, 0x20, &[f, 0x40, 5]);
        assert_eq!(returned(h.call(&mut mem, op::READ, 0x20, 0)), 0);
        assert_eq!(&mem.0[0x40..0x45], FEATURES);
        put_words(&mut mem, 0x30, &[APPLICATION_EXIT, 7]);
        assert_eq!(
            h.call(&mut mem, op::EXIT_EXTENDED, 0x30, 0),
            Ok(Outcome::Exit(Exit::Status(7)))
        );
        assert_eq!(
            h.call(&mut mem, op::EXIT, RUNTIME_ERROR, 0),
            Ok(Outcome::Exit(Exit::Reason {
                reason: RUNTIME_ERROR,
                subcode: None
            }))
        );
    }

    #[test]
    fn heapinfo_and_cmdline_fill_the_blocks_the_program_points_at() {
        let mut mem = Flat(vec![0; 0x100]);
        let mut h = host();
        put_words(&mut mem, 0x10, &[0x40]);
        assert_eq!(returned(h.call(&mut mem, op::HEAPINFO, 0x10, 0)), 0);
        let got: Vec<u32> = mem.0[0x40..0x50]
            .chunks(4)
            .map(|c| u32::from_le_bytes(c.try_into().unwrap()))
            .collect();
        assert_eq!(got, [0x1000, 0x2000, 0x4000, 0x3000]);
        put_words(&mut mem, 0x20, &[0x60, 32]);
        assert_eq!(returned(h.call(&mut mem, op::GET_CMDLINE, 0x20, 0)), 0);
        assert_eq!(&mem.0[0x60..0x69], b"prog a b\0");
        assert_eq!(mem.0[0x24], 8);
        // Too small a buffer is refused, neither truncated nor dropped.
        put_words(&mut mem, 0x20, &[0x60, 8]);
        assert_eq!(
            h.call(&mut mem, op::GET_CMDLINE, 0x20, 0),
            Ok(Outcome::CommandLineTooLong {
                bytes: 9,
                buffer: 8
            })
        );
        assert!(h.call(&mut mem, 0x99, 0, 0).is_err());
    }

    #[test]
    fn a_string_without_its_nul_is_read_up_to_the_end_of_memory() {
        let mut mem = Flat(vec![b'a'; 0x300]);
        let mut h = host();
        assert_eq!(returned(h.call(&mut mem, op::WRITE0, 0x10, 0)), 0);
        assert_eq!(h.console.stdout, vec![b'a'; 0x2f0]);
        // A write of a huge length writes at most MAX_TRANSFER bytes and
        // says how many it did not.
        let mut mem = Flat(vec![0; 0x20000]);
        mem.write(0x80, b":tt\0").then_some(()).unwrap();
        put_words(&mut mem, 0x10, &[0x80, 4, 3]);
        let out = returned(h.call(&mut mem, op::OPEN, 0x10, 0));
        put_words(&mut mem, 0x20, &[out, 0x100, 0x10_0000]);
        let left = returned(h.call(&mut mem, op::WRITE, 0x20, 0));
        assert_eq!(left, 0x10_0000 - MAX_TRANSFER);
        assert_eq!(h.console.stdout.len(), 0x2f0 + MAX_TRANSFER as usize);
    }

    #[test]
    fn opens_past_the_handle_limit_fail_with_emfile_and_closed_handles_are_reused() {
        let mut mem = Flat(vec![0; 0x100]);
        let mut h = host();
        mem.write(0x80, b":tt\0").then_some(()).unwrap();
        put_words(&mut mem, 0x10, &[0x80, 4, 3]);
        let handles: Vec<u32> = (0..MAX_HANDLES + 5)
            .map(|_| returned(h.call(&mut mem, op::OPEN, 0x10, 0)))
            .collect();
        let opened: Vec<u32> = handles.iter().copied().filter(|&r| r != u32::MAX).collect();
        assert_eq!(opened, (1..=MAX_HANDLES as u32).collect::<Vec<_>>());
        assert_eq!(returned(h.call(&mut mem, op::ERRNO, 0, 0)), EMFILE);
        // Closing one makes room for exactly one more, with its number.
        put_words(&mut mem, 0x20, &[7]);
        assert_eq!(returned(h.call(&mut mem, op::CLOSE, 0x20, 0)), 0);
        assert_eq!(returned(h.call(&mut mem, op::CLOSE, 0x20, 0)), u32::MAX);
        assert_eq!(returned(h.call(&mut mem, op::OPEN, 0x10, 0)), 7);
        assert_eq!(returned(h.call(&mut mem, op::OPEN, 0x10, 0)), u32::MAX);
    }
}
