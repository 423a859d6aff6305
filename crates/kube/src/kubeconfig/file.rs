//! Reading the files a kubeconfig is or names (the kubeconfig, its CA file, its tokenFile):
//! regular files only, never blocking, at most [`MAX_KUBECONFIG`] bytes.

use std::path::Path;

/// Reads a file the kubeconfig names or is, never blocking on it and never without end: refused
/// unless `stat` says regular file (symlinks followed; a FIFO, device, socket or directory is
/// refused, and a device is never opened), then opened once with `O_NONBLOCK` (so a FIFO swapped
/// in meanwhile cannot hang the caller — tern's STATUS has no deadline) and checked again with
/// `fstat`, so the file checked is the file read; read up to [`MAX_KUBECONFIG`] bytes.
///
/// # Errors
/// The `stat`'s, open's or read's error; `InvalidInput` naming the kind of file when it is not a
/// regular one, or when it is larger than [`MAX_KUBECONFIG`].
pub fn read_regular_file(path: &Path) -> std::io::Result<Vec<u8>> {
    use std::io::{Error, ErrorKind, Read};
    use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
    // Looked at before it is opened (a device is never opened), and again through the open file
    // (what is read is what was checked, whatever was swapped in between).
    let regular_or_why = |ty: std::fs::FileType| -> std::io::Result<()> {
        if ty.is_file() {
            return Ok(());
        }
        let what = if ty.is_fifo() {
            "a FIFO"
        } else if ty.is_dir() {
            "a directory"
        } else if ty.is_char_device() || ty.is_block_device() {
            "a device"
        } else if ty.is_socket() {
            "a socket"
        } else {
            "something else"
        };
        Err(Error::new(
            ErrorKind::InvalidInput,
            format!("{what}, not a regular file"),
        ))
    };
    regular_or_why(std::fs::metadata(path)?.file_type())?;
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)?;
    regular_or_why(file.metadata()?.file_type())?;
    let mut bytes = Vec::new();
    file.take(MAX_KUBECONFIG + 1).read_to_end(&mut bytes)?;
    if bytes.len() as u64 > MAX_KUBECONFIG {
        return Err(Error::new(
            ErrorKind::InvalidInput,
            format!("larger than {MAX_KUBECONFIG} bytes"),
        ));
    }
    Ok(bytes)
}

/// The largest kubeconfig (or CA file, or tokenFile) read; a real one is a few KiB, and a runaway
/// file must not make a plugin, the helper or the agent read without end.
pub const MAX_KUBECONFIG: u64 = 1 << 20;
