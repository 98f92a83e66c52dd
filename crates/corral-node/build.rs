fn main() {
    let var = |name: &str| std::env::var(name).unwrap_or_default();
    if var("CARGO_CFG_TARGET_OS") == "windows" && var("CARGO_CFG_TARGET_ENV") == "gnu" {
        // napi-build links a windows-gnu addon against `libnode.dll`, which
        // Node's Windows builds do not ship (node.exe exports Node-API
        // itself) and a cross build does not have: it panics without one.
        // The addon resolves Node-API from the process that loads it instead
        // (napi's `dyn-symbols`, enabled for Windows in Cargo.toml), so it
        // links against nothing of Node's. The cfgs napi-build declares for
        // every target are declared here too.
        println!("cargo::rustc-check-cfg=cfg(napi_wasi_threads)");
        println!("cargo::rustc-check-cfg=cfg(napi_wasi_no_heap_sync)");
        println!("cargo::rerun-if-env-changed=NAPI_TYPE_DEF_TMP_FOLDER");
        return;
    }
    napi_build::setup();
}
