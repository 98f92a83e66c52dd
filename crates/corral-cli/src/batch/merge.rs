pub fn main(_o: crate::args::MergeOpts) -> i32 { 0 }
