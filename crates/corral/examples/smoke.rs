use std::time::{Duration, Instant};
fn main() {
    let script = std::env::args().nth(1).unwrap();
    let t = Instant::now();
    let r = corral::Command::new("sh")
        .args(["-c", &script])
        .timeout(Duration::from_secs(3))
        .wait_delay(Duration::from_millis(500))
        .grace(Duration::from_millis(300))
        .run();
    println!("{:?} in {:?}", r, t.elapsed());
}
