#!/usr/bin/env bash
# .ci/wine-setup.sh -- make this Debian machine able to build corral for
# x86_64-pc-windows-gnu and run the resulting .exe files under Wine.
#
# Idempotent: every step checks first and does nothing when already done.
# Runs as root (apt-get); needs only the Debian archive and rustup's
# dist server.  No display is needed or used.
#
#   bash .ci/wine-setup.sh            # set up (or check) everything
#
# Environment it honours:
#   WINEPREFIX   Wine prefix to create/use (default: $HOME/.wine)
#
# Afterwards, to build and test for Windows:
#   export WINEDEBUG=-all
#   export CARGO_TARGET_X86_64_PC_WINDOWS_GNU_LINKER=x86_64-w64-mingw32-gcc
#   export CARGO_TARGET_X86_64_PC_WINDOWS_GNU_RUNNER=wine
#   cargo test --target x86_64-pc-windows-gnu
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
SHIM_SRC="$ROOT/tools/bcryptprimitives-shim"
TARGET=x86_64-pc-windows-gnu
MINGW_CC=x86_64-w64-mingw32-gcc
# wine64 is Wine 8.0 on Debian 12; `wine` is the arch-independent launcher
# that puts /usr/bin/wine on PATH; gcc-mingw-w64-x86-64 is the cross linker.
PACKAGES=(wine wine64 gcc-mingw-w64-x86-64)

export WINEPREFIX="${WINEPREFIX:-$HOME/.wine}"
export WINEDEBUG=-all           # Wine's own fixme/err chatter off
export WINEARCH=win64
unset DISPLAY WAYLAND_DISPLAY   # console only; never try to open a window

T0=$SECONDS
log()  { printf '[wine-setup %3ds] %s\n' "$((SECONDS - T0))" "$*"; }
die()  { printf '[wine-setup] ERROR: %s\n' "$*" >&2; exit 1; }
need() { command -v "$1" >/dev/null 2>&1 || die "$1 not found on PATH ($2)"; }

WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT

# --- 1. Debian packages -----------------------------------------------------
missing=()
for p in "${PACKAGES[@]}"; do
    if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep 'install ok installed' >/dev/null; then
        missing+=("$p")
    fi
done
if [ "${#missing[@]}" -eq 0 ]; then
    log "packages already installed: ${PACKAGES[*]}"
else
    [ "$(id -u)" -eq 0 ] || die "need root to apt-get install: ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    # Refresh the package lists only when apt does not know the package yet.
    if ! apt-cache policy "${missing[@]}" 2>/dev/null | grep 'Candidate: [0-9]' >/dev/null; then
        log "apt-get update"
        apt-get update -q || die "apt-get update failed"
    fi
    log "apt-get install --no-install-recommends ${missing[*]}"
    apt-get install -y -q --no-install-recommends "${missing[@]}" \
        || die "apt-get install ${missing[*]} failed"
fi
need wine "Debian package 'wine'"
need wineboot "Debian package 'wine'"
need wineserver "Debian package 'wine'"
need "$MINGW_CC" "Debian package 'gcc-mingw-w64-x86-64'"
need x86_64-w64-mingw32-objdump "Debian package 'binutils-mingw-w64-x86-64'"
log "wine: $(wine --version 2>/dev/null || echo '?'); $MINGW_CC: $($MINGW_CC -dumpversion)"

# --- 2. Rust target ---------------------------------------------------------
need rustup "install rustup first"
if rustup target list --installed | grep -x "$TARGET" >/dev/null; then
    log "rust target $TARGET already installed"
else
    log "rustup target add $TARGET"
    rustup target add "$TARGET" || die "rustup target add $TARGET failed"
fi

# --- 3. bcryptprimitives.dll shim -------------------------------------------
# Rust's std imports ProcessPrng from bcryptprimitives.dll, which Wine 8 lacks.
[ -f "$SHIM_SRC/bcryptprimitives.c" ] || die "missing $SHIM_SRC/bcryptprimitives.c"
log "building bcryptprimitives.dll from $SHIM_SRC"
# No timestamp and a fixed image base, so rebuilds are byte-identical and the
# copy in the prefix is only replaced when the source changed.
"$MINGW_CC" -shared -O2 -s -Wall -Wextra -Werror \
    -Wl,--no-insert-timestamp -Wl,--disable-auto-image-base \
    -o "$WORK/bcryptprimitives.dll" \
    "$SHIM_SRC/bcryptprimitives.c" "$SHIM_SRC/bcryptprimitives.def" \
    -lbcrypt || die "building the shim failed"
x86_64-w64-mingw32-objdump -p "$WORK/bcryptprimitives.dll" | grep -w ProcessPrng >/dev/null \
    || die "built shim does not export ProcessPrng"

# --- 4. Wine prefix ---------------------------------------------------------
if [ -f "$WINEPREFIX/system.reg" ] && [ -d "$WINEPREFIX/drive_c/windows/system32" ]; then
    log "wine prefix already initialised: $WINEPREFIX"
else
    log "initialising wine prefix $WINEPREFIX (wineboot -i, no Mono/Gecko)"
    # mscoree/mshtml disabled: otherwise wineboot offers to download Mono and
    # Gecko, which we neither can nor need to do.
    WINEDLLOVERRIDES="mscoree,mshtml=" wineboot -i >"$WORK/wineboot.log" 2>&1 \
        || { cat "$WORK/wineboot.log" >&2; die "wineboot -i failed"; }
    wineserver -w   # wait until the prefix is fully written
    [ -d "$WINEPREFIX/drive_c/windows/system32" ] \
        || die "wineboot did not create $WINEPREFIX/drive_c/windows/system32"
fi

SYS32="$WINEPREFIX/drive_c/windows/system32"
if cmp -s "$WORK/bcryptprimitives.dll" "$SYS32/bcryptprimitives.dll"; then
    log "shim already installed: $SYS32/bcryptprimitives.dll"
else
    log "installing shim into $SYS32"
    install -m 0644 "$WORK/bcryptprimitives.dll" "$SYS32/bcryptprimitives.dll"
fi

# --- 5. Smoke test: a Rust std program runs under wine ------------------------
log "smoke test: Rust $TARGET program under wine"
cat >"$WORK/smoke.rs" <<'EOF'
use std::collections::HashMap;
fn main() {
    // HashMap::new() seeds its hasher through ProcessPrng.
    let mut m = HashMap::new();
    m.insert("wine", 8);
    println!("corral-wine-smoke ok {}", m["wine"]);
}
EOF
rustc --edition 2021 --target "$TARGET" -C linker="$MINGW_CC" \
    -o "$WORK/smoke.exe" "$WORK/smoke.rs" || die "cross-compiling the smoke test failed"
out="$(timeout 120 wine "$WORK/smoke.exe" 2>&1 | tr -d '\r')" || true
if [ "$out" != "corral-wine-smoke ok 8" ]; then
    printf '%s\n' "$out" >&2
    die "smoke test failed: a Rust program for $TARGET does not run under wine"
fi
log "smoke test passed: $out"

log "done in $((SECONDS - T0))s. To build/test for Windows:"
cat <<EOF
    export WINEPREFIX=$WINEPREFIX WINEDEBUG=-all
    export CARGO_TARGET_X86_64_PC_WINDOWS_GNU_LINKER=$MINGW_CC
    export CARGO_TARGET_X86_64_PC_WINDOWS_GNU_RUNNER=wine
    cargo test --target $TARGET
EOF
