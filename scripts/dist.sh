#!/usr/bin/env bash
# scripts/dist.sh -- build every artifact a release uploads into dist/:
#
#   Python  corral-V-cp39-abi3-manylinux_2_17_{x86_64,aarch64}.whl (glibc >= 2.17),
#           corral-V-cp39-abi3-musllinux_1_2_{x86_64,aarch64}.whl, corral-V-cp39-abi3-win_amd64.whl,
#           corral-V-cp39-abi3-macosx_*_{x86_64,arm64}.whl (linked by zig, not run here),
#           corral-V.tar.gz (the sdist: builds with pip where Rust is present)
#   Node    corral-V.tgz (JS and types; optionalDependencies name the platform packages) and
#           corral-{linux-x64-gnu,linux-arm64-gnu,linux-x64-musl,win32-x64-gnu}-V.tgz (the .node)
#   CLI     corral-V-{x86_64,aarch64}-unknown-linux-musl.tar.gz (static executable, README,
#           licences, completions, man page), corral-V-x86_64-pc-windows-gnu.zip
#   SHA256SUMS over all of dist/
#
#   bash scripts/dist.sh              # everything
#   bash scripts/dist.sh KEY...       # some (CI: py-manylinux-x86_64 npm-linux-x64-gnu cli-x86_64-musl)
#
# KEYs: py-manylinux-x86_64 py-manylinux-aarch64 py-musllinux-x86_64 py-musllinux-aarch64
#       py-win-amd64 py-macos-x86_64 py-macos-arm64 py-sdist npm-linux-x64-gnu npm-linux-arm64-gnu npm-linux-x64-musl
#       npm-win32-x64-gnu cli-x86_64-musl cli-aarch64-musl cli-windows
# (the main npm package is made whenever a platform package is).
#
# Needs the Rust toolchain (rustup), python3 (venv), node and npm, and for the
# Windows artifacts mingw-w64 (Debian: gcc-mingw-w64-x86-64). Linux artifacts
# link with zig (PyPI `ziglang`, through `maturin --zig` and `cargo-zigbuild`,
# both from PyPI), which targets old glibc and musl without a sysroot: the
# tools go to a virtual environment in target/dist-tools. Builds go to the
# worktree's target/ (target/TRIPLE/release), one target at a time.
# Test what it made: bash scripts/dist-test.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
export CARGO_TERM_COLOR=never PIP_DISABLE_PIP_VERSION_CHECK=1
# Release artifacts carry no debug info (the workspace's release profile
# keeps it for profiling) and no symbol table.
export CARGO_PROFILE_RELEASE_DEBUG=0 CARGO_PROFILE_RELEASE_STRIP=symbols
T0=$SECONDS
step() { printf '\n=== [dist %3ds] %s ===\n' "$((SECONDS - T0))" "$*"; }
die() { printf '[dist] ERROR: %s\n' "$*" >&2; exit 1; }

ALL=(py-manylinux-x86_64 py-manylinux-aarch64 py-musllinux-x86_64 py-musllinux-aarch64
    py-win-amd64 py-macos-x86_64 py-macos-arm64 py-sdist npm-linux-x64-gnu npm-linux-arm64-gnu npm-linux-x64-musl
    npm-win32-x64-gnu cli-x86_64-musl cli-aarch64-musl cli-windows)
KEYS=("$@")
[ ${#KEYS[@]} -gt 0 ] || KEYS=("${ALL[@]}")
for k in "${KEYS[@]}"; do
    [[ " ${ALL[*]} " == *" $k "* ]] || die "unknown key $k (known: ${ALL[*]})"
done

VERSION=$(sed -n '/^\[workspace.package\]/,/^\[/s/^version = "\(.*\)"/\1/p' Cargo.toml)
[ -n "$VERSION" ] || die "no workspace version in Cargo.toml"
DIST=$ROOT/dist
STAGE=$ROOT/target/dist-stage
TOOLS=$ROOT/target/dist-tools
mkdir -p "$DIST"
rm -rf "$STAGE" && mkdir -p "$STAGE"

step "tools: maturin, ziglang, cargo-zigbuild (PyPI) in $TOOLS"
if [ ! -x "$TOOLS/bin/cargo-zigbuild" ] || [ ! -x "$TOOLS/bin/maturin" ]; then
    "${PYTHON:-python3}" -m venv "$TOOLS" || die "python3 -m venv failed"
    "$TOOLS/bin/pip" install -q 'maturin>=1.9,<2' ziglang cargo-zigbuild || die "pip install of the tools failed"
fi
export PATH=$TOOLS/bin:$PATH
maturin --version
echo "zig $(python -m ziglang version)"
cargo-zigbuild --version

targets_added=" "
need_target() {
    [[ "$targets_added" == *" $1 "* ]] && return 0
    rustup target add "$1" >/dev/null 2>&1 || die "rustup target add $1 failed"
    targets_added+="$1 "
}
windows_env() {
    command -v x86_64-w64-mingw32-gcc >/dev/null || die "x86_64-w64-mingw32-gcc not found (Debian: gcc-mingw-w64-x86-64)"
    export CARGO_TARGET_X86_64_PC_WINDOWS_GNU_LINKER=x86_64-w64-mingw32-gcc
}

# --- Python -----------------------------------------------------------------
py_wheel() { # TRIPLE COMPATIBILITY (maturin --compatibility) [zig]
    local triple=$1 compat=$2 zig=${3:-zig}
    need_target "$triple"
    step "wheel: $triple ($compat)"
    local args=(build --release --locked -m crates/corral-py/Cargo.toml --target "$triple" -o "$DIST")
    [ "$compat" = "-" ] || args+=(--compatibility "$compat")
    [ "$zig" = zig ] && args+=(--zig)
    maturin "${args[@]}" || die "maturin build failed for $triple"
}

# --- Node -------------------------------------------------------------------
# napi-rs's layout: the platform package corral-PLATFORM holds
# corral.PLATFORM.node; the main package's native.js picks it.
npm_platform() { # KEY TRIPLE(for cargo, may carry zig's .glibc suffix) OS CPU LIBC
    local key=$1 triple=$2 os=$3 cpu=$4 libc=$5 bare=${2%%.*}
    need_target "$bare"
    step "npm: corral-$key ($triple)"
    local lib=libcorral_node.so
    if [ "$os" = win32 ]; then
        windows_env
        # napi's own build script (napi-build) insists on a libnode.dll to
        # link against on windows-gnu. The addon imports nothing from it:
        # with napi's `dyn-symbols` (Cargo.toml) Node-API is looked up in
        # node.exe at load time. So an empty placeholder satisfies the check
        # and an empty archive the `-lnode`: no DLL import is recorded.
        local stub=$STAGE/libnode
        mkdir -p "$stub" && : >"$stub/libnode.dll"
        x86_64-w64-mingw32-ar rcs "$stub/libnode.a" || die "ar failed"
        LIBNODE_PATH=$stub cargo build --release --locked -p corral-node --target "$triple" \
            || die "cargo build failed for $triple"
        x86_64-w64-mingw32-objdump -p "target/$bare/release/corral_node.dll" | grep -qi 'DLL Name: libnode' \
            && die "corral_node.dll imports libnode.dll"
        lib=corral_node.dll
    elif [ "$libc" = musl ]; then
        # A shared object on musl: Rust's musl targets link the C runtime
        # statically unless told not to (and then cannot make a cdylib).
        local var
        var=CARGO_TARGET_$(echo "$bare" | tr 'a-z-' 'A-Z_')_RUSTFLAGS
        env "$var=-C target-feature=-crt-static" \
            cargo-zigbuild zigbuild --release --locked -p corral-node --target "$triple" || die "cargo zigbuild failed for $triple"
    else
        cargo-zigbuild zigbuild --release --locked -p corral-node --target "$triple" || die "cargo zigbuild failed for $triple"
    fi
    local dir=$STAGE/npm/$key
    mkdir -p "$dir"
    cp "target/$bare/release/$lib" "$dir/corral.$key.node"
    cp LICENSE-MIT LICENSE-APACHE "$dir/"
    local libc_json=""
    [ -n "$libc" ] && libc_json="\"libc\": [\"$libc\"],"
    cat >"$dir/package.json" <<EOF
{
  "name": "corral-$key",
  "version": "$VERSION",
  "description": "The $key native addon of the npm package corral (installed by it as an optional dependency).",
  "license": "MIT OR Apache-2.0",
  "repository": { "type": "git", "url": "https://github.com/corral-rs/corral", "directory": "crates/corral-node" },
  "main": "corral.$key.node",
  "files": ["corral.$key.node", "LICENSE-MIT", "LICENSE-APACHE"],
  "os": ["$os"],
  "cpu": ["$cpu"],
  $libc_json
  "engines": { "node": ">=18" }
}
EOF
    (cd "$DIST" && npm pack --silent "$dir" >/dev/null) || die "npm pack failed for corral-$key"
    echo "dist/corral-$key-$VERSION.tgz"
}

npm_main() {
    step "npm: corral (JS, types, native.js; no binary)"
    local dir=$STAGE/npm/main src=crates/corral-node
    mkdir -p "$dir"
    cp "$src"/index.js "$src"/index.mjs "$src"/index.d.ts "$src"/native.js "$src"/README.md LICENSE-MIT LICENSE-APACHE "$dir/"
    # native.d.ts: the declarations napi-rs generates from src/types.rs
    # while building the addon (any target; the build above left them).
    [ -f "$STAGE/native.d.ts" ] || die "no native.d.ts (no addon was built)"
    cp "$STAGE/native.d.ts" "$dir/"
    node - "$src/package.json" "$dir/package.json" "$VERSION" <<'EOF'
const fs = require('fs')
const [src, out, version] = process.argv.slice(2)
const p = JSON.parse(fs.readFileSync(src, 'utf8'))
p.version = version
p.files = ['index.js', 'index.mjs', 'index.d.ts', 'native.js', 'native.d.ts', 'README.md', 'LICENSE-MIT', 'LICENSE-APACHE']
p.optionalDependencies = {}
for (const key of ['linux-x64-gnu', 'linux-arm64-gnu', 'linux-x64-musl', 'win32-x64-gnu']) {
  p.optionalDependencies[`corral-${key}`] = version
}
delete p.devDependencies
delete p.scripts
delete p.napi
fs.writeFileSync(out, JSON.stringify(p, null, 2) + '\n')
EOF
    (cd "$DIST" && npm pack --silent "$dir" >/dev/null) || die "npm pack failed for corral"
    echo "dist/corral-$VERSION.tgz"
}

# native.d.ts: napi-rs writes the declarations of #[napi] items while the
# addon compiles (napi-derive's type-def feature, into TYPE_DEF_TMP_PATH);
# the napi CLI turns them into native.d.ts. Run the CLI once, for the host,
# only when an npm package is asked for and the declarations are not there.
npm_types() {
    [ -f "$STAGE/native.d.ts" ] && return 0
    local src=crates/corral-node
    # `npm run build` (.ci/node.sh) leaves them in the crate: used when no
    # Rust source of the addon is newer.
    if [ -f "$src/native.d.ts" ] && [ -z "$(find "$src/src" -name '*.rs' -newer "$src/native.d.ts")" ]; then
        cp "$src/native.d.ts" "$STAGE/native.d.ts"
        return 0
    fi
    step "npm: native.d.ts (napi build --release, the host build .ci/node.sh makes)"
    # The profile .ci/node.sh builds with (so CI's is reused), not dist's.
    (cd "$src" && { [ -x node_modules/.bin/napi ] || npm ci --no-audit --no-fund; } &&
        env -u CARGO_PROFILE_RELEASE_DEBUG -u CARGO_PROFILE_RELEASE_STRIP \
            npx napi build --platform --release --no-js --dts native.d.ts) || die "napi build failed"
    cp "$src/native.d.ts" "$STAGE/native.d.ts"
}

# --- CLI --------------------------------------------------------------------
cli_unix() { # TRIPLE
    local triple=$1
    need_target "$triple"
    step "cli: $triple (static)"
    cargo-zigbuild zigbuild --release --locked -p corral-cli --bin corral --target "$triple" \
        || die "cargo zigbuild failed for $triple"
    local exe=target/$triple/release/corral name=corral-$VERSION-$triple
    file "$exe" | grep -q 'statically linked\|static-pie linked' || die "$exe is not static: $(file "$exe")"
    local dir=$STAGE/$name
    mkdir -p "$dir/completions" "$dir/man"
    cp "$exe" "$dir/corral"
    cp README.md LICENSE-MIT LICENSE-APACHE "$dir/"
    # The completions and the man page come from the clap definition, the
    # same on every target: generated by the x86_64 executable (run here).
    local gen=target/x86_64-unknown-linux-musl/release/corral
    [ -x "$gen" ] || gen=$exe
    "$gen" completions bash >"$dir/completions/corral.bash"
    "$gen" completions zsh >"$dir/completions/_corral"
    "$gen" completions fish >"$dir/completions/corral.fish"
    "$gen" completions elvish >"$dir/completions/corral.elv"
    "$gen" completions powershell >"$dir/completions/_corral.ps1"
    "$gen" man >"$dir/man/corral.1"
    tar -C "$STAGE" --owner=0 --group=0 -czf "$DIST/$name.tar.gz" "$name" || die "tar failed"
    echo "dist/$name.tar.gz"
}

cli_windows() {
    local triple=x86_64-pc-windows-gnu name=corral-$VERSION-x86_64-pc-windows-gnu
    need_target "$triple"
    windows_env
    step "cli: $triple"
    cargo build --release --locked -p corral-cli --bin corral --target "$triple" || die "cargo build failed for $triple"
    local dir=$STAGE/$name
    mkdir -p "$dir"
    cp "target/$triple/release/corral.exe" README.md LICENSE-MIT LICENSE-APACHE "$dir/"
    rm -f "$DIST/$name.zip"
    (cd "$STAGE" && python -m zipfile -c "$DIST/$name.zip" "$name") || die "zip failed"
    echo "dist/$name.zip"
}

# --- the builds, one target at a time ---------------------------------------
has() { [[ " ${KEYS[*]} " == *" $1 "* ]]; }
# The x86_64 musl CLI first: it generates every tarball's completions.
has cli-x86_64-musl && cli_unix x86_64-unknown-linux-musl
has cli-aarch64-musl && cli_unix aarch64-unknown-linux-musl
has cli-windows && cli_windows
has py-manylinux-x86_64 && py_wheel x86_64-unknown-linux-gnu manylinux2014
has py-manylinux-aarch64 && py_wheel aarch64-unknown-linux-gnu manylinux2014
has py-musllinux-x86_64 && py_wheel x86_64-unknown-linux-musl musllinux_1_2
has py-musllinux-aarch64 && py_wheel aarch64-unknown-linux-musl musllinux_1_2
if has py-win-amd64; then windows_env; py_wheel x86_64-pc-windows-gnu - nozig; fi
# macOS: zig links the extension against its own libSystem stubs (no SDK).
has py-macos-x86_64 && py_wheel x86_64-apple-darwin -
has py-macos-arm64 && py_wheel aarch64-apple-darwin -
if has py-sdist; then
    step "sdist"
    maturin sdist -m crates/corral-py/Cargo.toml -o "$DIST" || die "maturin sdist failed"
fi
npm_any=0
for k in "${KEYS[@]}"; do [[ $k == npm-* ]] && npm_any=1; done
if [ "$npm_any" = 1 ]; then
    npm_types
    has npm-linux-x64-gnu && npm_platform linux-x64-gnu x86_64-unknown-linux-gnu.2.17 linux x64 glibc
    has npm-linux-arm64-gnu && npm_platform linux-arm64-gnu aarch64-unknown-linux-gnu.2.17 linux arm64 glibc
    has npm-linux-x64-musl && npm_platform linux-x64-musl x86_64-unknown-linux-musl linux x64 musl
    has npm-win32-x64-gnu && npm_platform win32-x64-gnu x86_64-pc-windows-gnu win32 x64 ""
    npm_main
fi

step "SHA256SUMS"
(
    cd "$DIST" && shopt -s nullglob
    files=(*.whl *.tar.gz *.tgz *.zip)
    [ ${#files[@]} -gt 0 ] || die "nothing in dist/"
    rm -f SHA256SUMS
    sha256sum -- "${files[@]}" >SHA256SUMS.new && mv SHA256SUMS.new SHA256SUMS
) || die "sha256sum failed"
cat "$DIST/SHA256SUMS"
rm -rf "$STAGE"
step "done: $(find "$DIST" -maxdepth 1 -type f | wc -l) files in dist/"
ls -l "$DIST"
