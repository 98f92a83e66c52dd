//! Shared by the sandbox suites: victims outside every tree, and a run
//! under a policy.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::time::Duration;

use corral::{Output, Report, Sandbox};

/// A directory outside the sandboxed tree's writable paths (and outside
/// /tmp, which a sandbox replaces): under /var/tmp, removed on drop. Its
/// files are recorded with their content and metadata, to be checked from
/// the host after a run.
pub struct Victims {
    dir: PathBuf,
    files: Vec<(PathBuf, String, Meta)>,
    dirs: Vec<(PathBuf, Meta)>,
}

/// What a write of any kind changes: content size, mode, owner, times
/// (the change time moves with chmod, chown, utimes, xattrs and links), link
/// count, inode.
#[derive(Debug, PartialEq, Eq)]
pub struct Meta {
    ino: u64,
    mode: u32,
    uid: u32,
    gid: u32,
    nlink: u64,
    size: u64,
    mtime: (i64, i64),
    ctime: (i64, i64),
}

pub fn meta(p: &Path) -> Meta {
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::symlink_metadata(p).unwrap();
    Meta {
        ino: m.ino(),
        mode: m.mode(),
        uid: m.uid(),
        gid: m.gid(),
        nlink: m.nlink(),
        size: m.size(),
        mtime: (m.mtime(), m.mtime_nsec()),
        ctime: (m.ctime(), m.ctime_nsec()),
    }
}

impl Victims {
    pub fn new() -> Victims {
        use std::sync::atomic::{AtomicUsize, Ordering};
        static N: AtomicUsize = AtomicUsize::new(0);
        let n = N.fetch_add(1, Ordering::SeqCst);
        let dir = PathBuf::from(format!(
            "/var/tmp/corral-victims-{}-{n}",
            std::process::id()
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        Victims {
            dir,
            files: Vec::new(),
            dirs: Vec::new(),
        }
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    pub fn file(&mut self, name: &str, content: &str) -> PathBuf {
        let p = self.dir.join(name);
        std::fs::write(&p, content).unwrap();
        std::fs::set_permissions(&p, std::os::unix::fs::PermissionsExt::from_mode(0o644)).unwrap();
        self.files.push((p.clone(), content.to_string(), meta(&p)));
        p
    }

    pub fn subdir(&mut self, name: &str) -> PathBuf {
        let p = self.dir.join(name);
        std::fs::create_dir(&p).unwrap();
        self.dirs.push((p.clone(), meta(&p)));
        p
    }

    /// Nothing new in the directory, every file with its content and
    /// metadata (change time included), every directory unchanged.
    pub fn assert_untouched(&self) {
        let mut names: Vec<String> = std::fs::read_dir(&self.dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        let mut expected: Vec<String> = self
            .files
            .iter()
            .map(|(p, _, _)| p.file_name().unwrap().to_string_lossy().into_owned())
            .chain(
                self.dirs
                    .iter()
                    .map(|(p, _)| p.file_name().unwrap().to_string_lossy().into_owned()),
            )
            .collect();
        expected.sort();
        assert_eq!(
            names, expected,
            "entries appeared or vanished in {:?}",
            self.dir
        );
        for (p, content, m) in &self.files {
            assert_eq!(
                &std::fs::read_to_string(p).unwrap(),
                content,
                "{p:?} changed"
            );
            assert_eq!(&meta(p), m, "{p:?} changed");
        }
        for (p, m) in &self.dirs {
            assert_eq!(&meta(p), m, "{p:?} changed");
        }
    }
}

impl Drop for Victims {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Runs `sh -c script` in `s`'s directory under `policy` (captured output,
/// a 30 s deadline).
pub fn run(s: &corral_testkit::Scratch, script: &str, policy: Sandbox) -> Report {
    command(s, script, policy)
        .run()
        .expect("the sandboxed run starts")
}

pub fn command(s: &corral_testkit::Scratch, script: &str, policy: Sandbox) -> corral::Command {
    let mut c = s.sh(script);
    c.current_dir(s.dir())
        .stdout(Output::capture())
        .stderr(Output::capture())
        .timeout(Duration::from_secs(30))
        .sandbox(policy);
    c
}

pub fn text(c: &corral::Captured) -> String {
    String::from_utf8_lossy(c.head()).into_owned()
}

/// A host process (outside every sandbox) whose working directory is `dir`
/// and which holds `file` open for appending as descriptor 3; killed and
/// reaped on drop (it exits by itself after 30 s).
pub struct HostHolder {
    child: std::process::Child,
}

impl HostHolder {
    pub fn new(dir: &Path, file: &Path) -> HostHolder {
        let child = std::process::Command::new("/bin/sh")
            .arg("-c")
            .arg("exec 3>>\"$1\"; exec sleep 30")
            .arg("sh")
            .arg(file)
            .current_dir(dir)
            .spawn()
            .unwrap();
        // Wait until the exec'd sleep holds the descriptor.
        let fd3 = format!("/proc/{}/fd/3", child.id());
        let end = std::time::Instant::now() + Duration::from_secs(10);
        while std::fs::read_link(&fd3).is_err()
            || std::fs::read_to_string(format!("/proc/{}/comm", child.id()))
                .map_or(true, |c| c.trim() != "sleep")
        {
            assert!(
                std::time::Instant::now() < end,
                "the host holder did not start"
            );
            std::thread::sleep(Duration::from_millis(5));
        }
        HostHolder { child }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for HostHolder {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
