//! A cgroup-v1 freezer cgroup of a test (hybrid machines mount the v1
//! freezer at [`FREEZER`]): a frozen process does not act on SIGKILL until
//! it is thawed, so a test can make processes that survive corral's kill.
//! Thawed and removed on drop (the killed processes then die).

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// The cgroup v1 freezer hierarchy.
pub const FREEZER: &str = "/sys/fs/cgroup/freezer";

/// A freezer cgroup of this test, thawed and removed on drop.
pub struct Frozen(PathBuf);

impl Frozen {
    /// A new freezer cgroup named after this process and `tag`.
    pub fn new(tag: &str) -> Frozen {
        let root = Path::new(FREEZER);
        assert!(
            root.join("freezer.state").exists() || root.join("cgroup.procs").exists(),
            "this test needs the cgroup v1 freezer at {FREEZER} (mounted on hybrid machines)"
        );
        let dir = root.join(format!("corral-frozen-{}-{tag}", std::process::id()));
        std::fs::create_dir(&dir).expect("mkdir in the v1 freezer");
        Frozen(dir)
    }

    /// Moves process `pid` into the cgroup.
    pub fn take(&self, pid: u32) {
        std::fs::write(self.0.join("cgroup.procs"), pid.to_string())
            .expect("move a process into the freezer cgroup");
    }

    /// Freezes the cgroup and waits (at most 5 s) until it is frozen.
    pub fn freeze(&self) {
        std::fs::write(self.0.join("freezer.state"), "FROZEN").unwrap();
        let end = Instant::now() + Duration::from_secs(5);
        while std::fs::read_to_string(self.0.join("freezer.state"))
            .unwrap_or_default()
            .trim()
            != "FROZEN"
        {
            assert!(Instant::now() < end, "the freezer cgroup did not freeze");
            std::thread::sleep(Duration::from_millis(5));
        }
    }
}

impl Drop for Frozen {
    fn drop(&mut self) {
        let _ = std::fs::write(self.0.join("freezer.state"), "THAWED");
        // The processes had SIGKILL pending: thawed, they die, and the
        // empty cgroup can go.
        let end = Instant::now() + Duration::from_secs(5);
        while std::fs::remove_dir(&self.0).is_err() && Instant::now() < end {
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}
