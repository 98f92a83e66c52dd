use std::time::{Duration, Instant};

use corral::Outcome;
use corral_testkit::{assert_between, Scratch, Watch};

#[test]
fn grandchild_holding_stdout_is_killed_after_wait_delay() {
    let s = Scratch::new();
    let w = Watch::new(&s);
    let t = Instant::now();
    let r = s
        .sh(r#""$H" gc & echo started; exit 0"#)
        .wait_delay(Duration::from_millis(300))
        .run()
        .unwrap();
    assert_between(
        t.elapsed(),
        Duration::from_millis(300),
        Duration::from_secs(2),
    );
    assert_eq!(r.outcome, Outcome::OutputHeld);
    assert!(w.pid("gc", Duration::from_secs(1)).is_some());
    assert!(w.wait_dead("gc", Duration::from_secs(2)));
}
