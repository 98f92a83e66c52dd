//! Every file corral creates (`corral run --report`, the batch and merge
//! `--report`, `--junit`, `--export-markdown`, `--events`, and the
//! `--output-dir` captures) is made here, so none can be turned against the
//! user who runs corral (for example a root corral made to write a
//! predictable `<path>.tmp<pid>` through a symlink a local user planted).
//!
//! The rules:
//! * a file is never written through a name another user can plant: the
//!   new content goes to a fresh temporary beside the target, created
//!   `O_CREAT|O_EXCL` (so never through a symlink or an existing file)
//!   under an unpredictable name, and renamed over the target (which
//!   replaces the directory entry, never what a link points to). A
//!   whole-file write is flushed to disk (`fsync`) before the rename, so
//!   a reader sees the old file or the new one, never half of one;
//! * a symbolic link named by the user is followed only when it belongs to
//!   corral's own user or to root (no other user can plant such a link);
//!   one owned by anyone else is refused with a clear error. Names corral
//!   makes up (`--output-dir` files) never follow a link: whatever is there
//!   is replaced;
//! * a FIFO, a terminal or another device (`--report /dev/stderr`) is
//!   written in place, never replaced, and never created;
//! * mode: a new file gets 0666 minus the umask, as a shell's `>`; a
//!   regular file corral replaces keeps its permission bits when it
//!   belonged to corral's user (so a private 0600 report stays private),
//!   and otherwise gets 0666 minus the umask (another user's file cannot
//!   lend its mode, e.g. 0666, to root's report). The new file belongs to
//!   corral's user.

use std::fs::File;
use std::io::{self, Write};
use std::path::{Path, PathBuf};

/// Whether a symbolic link at the target's own name may be followed.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Links {
    /// A name the user gave: follow a link that corral's user or root owns.
    FollowTrusted,
    /// A name corral made up: never follow, replace whatever is there.
    Replace,
}

/// Where the bytes go.
enum Dest {
    /// A regular file (or nothing yet) at this path: a fresh temporary is
    /// renamed over it, with this mode (None: 0666 minus the umask).
    Replace { path: PathBuf, mode: Option<u32> },
    /// A FIFO or device: opened for writing in place.
    InPlace(PathBuf),
}

fn is_dir_error(path: &Path) -> io::Error {
    io::Error::other(format!("{} is a directory", path.display()))
}

/// The mode a replaced regular file passes on: its permission bits when it
/// belongs to corral's user.
#[cfg(unix)]
fn kept_mode(m: &std::fs::Metadata) -> Option<u32> {
    use std::os::unix::fs::MetadataExt;
    (m.uid() == rustix::process::geteuid().as_raw()).then_some(m.mode() & 0o777)
}

#[cfg(not(unix))]
fn kept_mode(_m: &std::fs::Metadata) -> Option<u32> {
    None
}

/// A link corral may follow: owned by corral's user or by root.
#[cfg(unix)]
fn trusted_link(m: &std::fs::Metadata) -> Result<(), io::Error> {
    use std::os::unix::fs::MetadataExt;
    let me = rustix::process::geteuid().as_raw();
    if m.uid() == me || m.uid() == 0 {
        Ok(())
    } else {
        Err(io::Error::new(
            io::ErrorKind::PermissionDenied,
            format!(
                "it is a symbolic link owned by another user (uid {}); corral does not write \
                 through it (remove it, or name the file it points to)",
                m.uid()
            ),
        ))
    }
}

#[cfg(not(unix))]
fn trusted_link(_m: &std::fs::Metadata) -> Result<(), io::Error> {
    Ok(())
}

fn dest(path: &Path, links: Links) -> io::Result<Dest> {
    dest_at(path, links, 0)
}

/// Symbolic links followed at most, as the kernel's own limit.
const MAX_LINKS: u32 = 40;

fn dest_at(path: &Path, links: Links, depth: u32) -> io::Result<Dest> {
    let m = match std::fs::symlink_metadata(path) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            return Ok(Dest::Replace {
                path: path.to_owned(),
                mode: None,
            })
        }
        Err(e) => return Err(e),
        Ok(m) => m,
    };
    let ft = m.file_type();
    if ft.is_dir() {
        return Err(is_dir_error(path));
    }
    if ft.is_file() || links == Links::Replace {
        return Ok(Dest::Replace {
            path: path.to_owned(),
            mode: ft.is_file().then(|| kept_mode(&m)).flatten(),
        });
    }
    if !ft.is_symlink() {
        return Ok(Dest::InPlace(path.to_owned()));
    }
    trusted_link(&m)?;
    match std::fs::metadata(path) {
        Ok(t) if t.is_dir() => Err(is_dir_error(path)),
        Ok(t) if t.is_file() => Ok(Dest::Replace {
            path: std::fs::canonicalize(path)?,
            mode: kept_mode(&t),
        }),
        // A device or FIFO (`/dev/stderr`, `/dev/fd/3`): through the link.
        Ok(_) => Ok(Dest::InPlace(path.to_owned())),
        // A link to a file not there yet: made where the link points,
        // each further link checked the same way.
        Err(e) if e.kind() == io::ErrorKind::NotFound && depth < MAX_LINKS => {
            let to = std::fs::read_link(path)?;
            let to = match path.parent() {
                Some(d) if to.is_relative() => d.join(to),
                _ => to,
            };
            dest_at(&to, links, depth + 1)
        }
        Err(e) => Err(io::Error::new(
            e.kind(),
            format!("it is a symbolic link to a file that cannot be reached: {e}"),
        )),
    }
}

/// A FIFO or device, opened without creating or truncating anything; a
/// regular file found there now (the name was swapped since it was looked
/// at) is refused.
fn open_in_place(path: &Path) -> io::Result<File> {
    let f = std::fs::OpenOptions::new().write(true).open(path)?;
    if f.metadata()?.is_file() {
        return Err(io::Error::other(
            "it changed from a device or FIFO to a regular file while corral opened it",
        ));
    }
    Ok(f)
}

/// A fresh temporary beside `path`: `O_CREAT|O_EXCL`, unpredictable name,
/// 0666 minus the umask, or `mode`.
fn temporary(path: &Path, mode: Option<u32>) -> io::Result<tempfile::NamedTempFile> {
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    let mut prefix = std::ffi::OsString::from(".");
    prefix.push(path.file_name().unwrap_or_default());
    prefix.push(".");
    let mut b = tempfile::Builder::new();
    b.prefix(&prefix).suffix(".corral-tmp");
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        b.permissions(std::fs::Permissions::from_mode(0o666));
    }
    let tmp = b.tempfile_in(dir)?;
    #[cfg(unix)]
    if let Some(mode) = mode {
        use std::os::unix::fs::PermissionsExt;
        tmp.as_file()
            .set_permissions(std::fs::Permissions::from_mode(mode))?;
    }
    #[cfg(not(unix))]
    let _ = mode;
    Ok(tmp)
}

/// Flushes the directory holding `path` (the rename), best effort.
fn sync_dir(path: &Path) {
    #[cfg(unix)]
    {
        let dir = match path.parent() {
            Some(d) if !d.as_os_str().is_empty() => d,
            _ => Path::new("."),
        };
        if let Ok(d) = File::open(dir) {
            let _ = d.sync_all();
        }
    }
    #[cfg(not(unix))]
    let _ = path;
}

/// Writes `data` as the whole content of `path` (see the module's rules):
/// a reader sees the old file or the new one, never half of one.
pub fn write_atomic(path: &Path, data: &[u8]) -> io::Result<()> {
    match dest(path, Links::FollowTrusted)? {
        Dest::InPlace(p) => {
            let mut f = open_in_place(&p)?;
            f.write_all(data)?;
            f.flush()
        }
        Dest::Replace { path, mode } => {
            let mut tmp = temporary(&path, mode)?;
            tmp.write_all(data)?;
            tmp.as_file().sync_all()?;
            tmp.persist(&path).map_err(|e| e.error)?;
            sync_dir(&path);
            Ok(())
        }
    }
}

/// Creates `path` empty (a fresh file renamed into place at once) and
/// returns it open for writing, for content that streams in (`--events`,
/// `--output-dir`).
pub fn create(path: &Path, links: Links) -> io::Result<File> {
    match dest(path, links)? {
        Dest::InPlace(p) => open_in_place(&p),
        Dest::Replace { path, mode } => {
            let tmp = temporary(&path, mode)?;
            tmp.persist(&path).map_err(|e| e.error)
        }
    }
}
