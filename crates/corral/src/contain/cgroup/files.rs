//! Reading and writing cgroup interface files, removing cgroup directories.

use std::fs::{self, OpenOptions};
use std::io::{self, Write};
use std::path::Path;

pub(super) fn write_file(path: &Path, data: &str) -> io::Result<()> {
    let mut f = OpenOptions::new().write(true).open(path)?;
    f.write_all(data.as_bytes())
}

pub(super) fn kv(text: &str, key: &str) -> Option<u64> {
    text.lines().find_map(|l| {
        let (k, v) = l.split_once(' ')?;
        (k == key).then(|| v.trim().parse().ok()).flatten()
    })
}

pub(super) fn read_kv(path: &Path, key: &str) -> Option<u64> {
    kv(&fs::read_to_string(path).ok()?, key)
}

pub(super) fn read_u64(path: &Path) -> Option<u64> {
    fs::read_to_string(path).ok()?.trim().parse().ok()
}

/// Removes a cgroup directory and the cgroups below it, leaves first.
pub(super) fn remove_tree(dir: &Path) -> io::Result<()> {
    if let Ok(rd) = fs::read_dir(dir) {
        for e in rd.flatten() {
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                let _ = remove_tree(&e.path());
            }
        }
    }
    fs::remove_dir(dir)
}
