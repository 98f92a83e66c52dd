//! `corral merge`'s target (see `crate::merge`).

pub fn run(data: &[u8]) {
    let _ = data;
}
