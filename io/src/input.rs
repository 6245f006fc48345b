//! Reading input files with a bound: only regular files, and never more than
//! a stated number of bytes. A FIFO, `/dev/zero` or any other special file
//! would otherwise be read until memory runs out (or block forever).

use std::io::Read;
use std::path::Path;

/// Largest `.tflite` model the model import reads.
pub const MAX_TFLITE_FILE: u64 = 256 << 20;

/// Largest `verify --input` file: a graph input is one tensor, which
/// [`MAX_TFLITE_FILE`] already bounds in practice.
pub const MAX_INPUT_FILE: u64 = 256 << 20;

/// Largest text file (plan JSON, baseline JSON, configs file) the commands
/// read.
pub const MAX_TEXT_FILE: u64 = 64 << 20;

/// Why a file was not read.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    /// The operating system refused (missing file, permissions, ...).
    #[error("cannot read {path}: {source}")]
    Io {
        /// The file.
        path: String,
        /// What the OS said.
        #[source]
        source: std::io::Error,
    },
    /// A directory, FIFO, device or socket.
    #[error("cannot read {path}: it is {kind}, not a regular file")]
    NotRegular {
        /// The path.
        path: String,
        /// What it is (`a directory`, `a FIFO`, ...).
        kind: &'static str,
    },
    /// Larger than the limit for this kind of file.
    #[error("cannot read {path}: it is larger than the {limit}-byte limit for {what}")]
    TooLarge {
        /// The file.
        path: String,
        /// The limit in bytes.
        limit: u64,
        /// What kind of input it was read as.
        what: String,
    },
}

/// What a non-regular file is, for error messages.
pub fn file_kind(kind: &std::fs::FileType) -> &'static str {
    use std::os::unix::fs::FileTypeExt;
    if kind.is_file() {
        "a regular file"
    } else if kind.is_dir() {
        "a directory"
    } else if kind.is_fifo() {
        "a FIFO"
    } else if kind.is_char_device() {
        "a character device"
    } else if kind.is_block_device() {
        "a block device"
    } else if kind.is_socket() {
        "a socket"
    } else {
        "a special file"
    }
}

/// Opens `path` for reading if it is a regular file, without ever waiting:
/// the open does not block (`O_NONBLOCK`, so a FIFO swapped in after any
/// earlier look cannot hang the process) and the handle's own metadata
/// decides, not a look at the path that may since have changed. With
/// `follow_links` false a symbolic link is refused (`O_NOFOLLOW`).
pub fn open_regular(path: &Path, follow_links: bool) -> Result<std::fs::File, ReadError> {
    use std::os::unix::fs::OpenOptionsExt;
    let io = |source: std::io::Error| ReadError::Io {
        path: path.display().to_string(),
        source,
    };
    // A first look spares opening devices at all; the handle decides.
    let looked = if follow_links {
        std::fs::metadata(path)
    } else {
        std::fs::symlink_metadata(path)
    };
    let kind = looked.map_err(io)?.file_type();
    if !kind.is_file() {
        return Err(ReadError::NotRegular {
            path: path.display().to_string(),
            kind: if kind.is_symlink() {
                "a symbolic link"
            } else {
                file_kind(&kind)
            },
        });
    }
    let mut flags = libc::O_NONBLOCK;
    if !follow_links {
        flags |= libc::O_NOFOLLOW;
    }
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(flags)
        .open(path)
        .map_err(|e| {
            // O_NOFOLLOW on a link fails with ELOOP: say what it is.
            if !follow_links && e.raw_os_error() == Some(libc::ELOOP) {
                ReadError::NotRegular {
                    path: path.display().to_string(),
                    kind: "a symbolic link",
                }
            } else {
                io(e)
            }
        })?;
    let kind = file.metadata().map_err(io)?.file_type();
    if !kind.is_file() {
        return Err(ReadError::NotRegular {
            path: path.display().to_string(),
            kind: file_kind(&kind),
        });
    }
    Ok(file)
}

/// Reads the regular file `path` (symbolic links followed) of at most
/// `limit` bytes; `what` names the kind of file in the error ("`.tflite`
/// models"). Never reads more than `limit + 1` bytes, and never blocks on a
/// FIFO, even one put in place while it looks ([`open_regular`]).
pub fn read_limited(path: &Path, limit: u64, what: &str) -> Result<Vec<u8>, ReadError> {
    read_open_limited(path, open_regular(path, true)?, limit, what)
}

/// [`read_limited`] of an opened regular file; `path` names it in errors.
pub fn read_open_limited(
    path: &Path,
    file: std::fs::File,
    limit: u64,
    what: &str,
) -> Result<Vec<u8>, ReadError> {
    let shown = || path.display().to_string();
    let io = |source: std::io::Error| ReadError::Io {
        path: shown(),
        source,
    };
    let too_large = || ReadError::TooLarge {
        path: shown(),
        limit,
        what: what.to_string(),
    };
    let meta = file.metadata().map_err(io)?;
    if meta.len() > limit {
        return Err(too_large());
    }
    let mut bytes = Vec::with_capacity(meta.len() as usize);
    file.take(limit.saturating_add(1))
        .read_to_end(&mut bytes)
        .map_err(io)?;
    if bytes.len() as u64 > limit {
        return Err(too_large());
    }
    Ok(bytes)
}

/// The first bytes of a file in words, for saying what it is when it is
/// not what was asked for: up to eight, in hex, and as text when they are
/// printable (`7f 45 4c 46 01 01 01 00`, `74 68 69 73 20 69 73 20
/// ("this is ")`, `none: it is empty`).
pub fn first_bytes(bytes: &[u8]) -> String {
    if bytes.is_empty() {
        return "none: it is empty".to_owned();
    }
    let head = &bytes[..bytes.len().min(8)];
    let hex: Vec<String> = head.iter().map(|b| format!("{b:02x}")).collect();
    let text: String = head.iter().map(|&b| b as char).collect();
    if head.iter().all(|b| b.is_ascii_graphic() || *b == b' ') {
        format!("{} (\"{text}\")", hex.join(" "))
    } else {
        hex.join(" ")
    }
}

/// [`read_limited`] for UTF-8 text.
pub fn read_text_limited(path: &Path, limit: u64, what: &str) -> Result<String, ReadError> {
    let bytes = read_limited(path, limit, what)?;
    String::from_utf8(bytes).map_err(|e| ReadError::Io {
        path: path.display().to_string(),
        source: std::io::Error::new(std::io::ErrorKind::InvalidData, e),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn special_files_are_refused_without_reading() {
        let e = read_limited(Path::new("/dev/zero"), 1 << 20, "models").unwrap_err();
        assert!(
            matches!(
                e,
                ReadError::NotRegular {
                    kind: "a character device",
                    ..
                }
            ),
            "{e}"
        );
        assert!(e.to_string().contains("/dev/zero"), "{e}");
        let dir = std::env::temp_dir();
        let e = read_limited(&dir, 1 << 20, "models").unwrap_err();
        assert!(e.to_string().contains("a directory"), "{e}");
    }

    #[test]
    fn a_fifo_is_refused_without_waiting_for_a_writer() {
        let dir = std::env::temp_dir().join(format!("memtrace-fifo-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let fifo = dir.join("fifo");
        let c = std::ffi::CString::new(fifo.as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: a valid NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        let e = read_limited(&fifo, 1 << 20, "models").unwrap_err();
        assert!(e.to_string().contains("a FIFO"), "{e}");
        let link = dir.join("link");
        std::os::unix::fs::symlink(&fifo, &link).unwrap();
        let e = open_regular(&link, false).unwrap_err();
        assert!(e.to_string().contains("a symbolic link"), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn first_bytes_are_shown_in_hex_and_as_text_when_printable() {
        assert_eq!(
            first_bytes(b"this is not an ELF"),
            "74 68 69 73 20 69 73 20 (\"this is \")"
        );
        assert_eq!(first_bytes(&[0x7f, 0x45, 0x4c]), "7f 45 4c");
        assert_eq!(first_bytes(&[]), "none: it is empty");
    }

    #[test]
    fn the_limit_is_exact() {
        let dir = std::env::temp_dir().join(format!("memtrace-input-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let f = dir.join("ten");
        std::fs::write(&f, [7u8; 10]).unwrap();
        assert_eq!(read_limited(&f, 10, "x").unwrap(), vec![7u8; 10]);
        let e = read_limited(&f, 9, "test files").unwrap_err();
        assert!(e.to_string().contains("9-byte limit for test files"), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
