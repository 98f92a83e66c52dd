#!/usr/bin/env bash
# scripts/dist-test.sh -- install what scripts/dist.sh put in dist/ the way a
# user does, with no Rust toolchain: each install is a fresh environment
# under `env -i PATH=/usr/bin:/bin` (no cargo, rustc, maturin or zig),
# offline (`pip install --no-index`, `npm install --offline` with an empty
# cache, the CLI tarball unpacked), and runs a real tree in it: a timeout
# that kills a backgrounded child, with the exact report (outcome timed_out,
# killed 1, kept 0, no survivors) and the child gone (looked up in /proc by a
# token no other process carries).
#
#   bash scripts/dist-test.sh               # every artifact in dist/
#   bash scripts/dist-test.sh --scenarios   # and the CLI's scenario tests against the static executable
#
# What cannot run on this x86_64 glibc machine (musl Python and Node, arm64
# Python and Node, Windows' Python and Node) is checked for its
# architecture, its tags and what it links. The aarch64 static CLI runs under
# qemu-user-static when /usr/bin/qemu-aarch64-static exists. Linux wheels:
# `auditwheel show` must name the wheel's own platform tag.
#
# --scenarios: the corral-cli integration tests (built by cargo, which is
# why this part is outside `env -i`) run with the static musl executable in
# place of target/debug/corral: a bind mount in a private mount namespace
# (unshare -m, root), so the shared target directory is never written.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
DIST=${DIST:-$ROOT/dist}  # or another directory of artifacts
TOOLS=$ROOT/target/dist-tools
export PIP_DISABLE_PIP_VERSION_CHECK=1
T0=$SECONDS
step() { printf '\n=== [dist-test %3ds] %s ===\n' "$((SECONDS - T0))" "$*"; }
die() { printf '[dist-test] ERROR: %s\n' "$*" >&2; exit 1; }
ok() { printf '[dist-test] ok: %s\n' "$*"; passed=$((passed + 1)); }
passed=0
SCENARIOS=0
[ "${1:-}" = --scenarios ] && SCENARIOS=1

VERSION=$(sed -n '/^\[workspace.package\]/,/^\[/s/^version = "\(.*\)"/\1/p' Cargo.toml)
[ -d "$DIST" ] || die "no dist/ (bash scripts/dist.sh first)"
work=$(mktemp -d /tmp/corral-dist-test.XXXXXX)
trap 'rm -rf "$work"' EXIT
chmod 755 "$work"
# The user's environment: no toolchain on PATH, nothing inherited.
clean() { env -i PATH=/usr/bin:/bin HOME="$work/home" LANG=C.UTF-8 "$@"; }
mkdir -p "$work/home"
ARCH=$(uname -m)

# A token in the backgrounded child's command line (sleep 300.NNNNN): the
# child is gone when no process in /proc carries it.
token() { printf '300.%05d%05d' "$RANDOM" "$$"; }
gone() { ! grep -qsF -- "sleep $1" /proc/[0-9]*/cmdline 2>/dev/null; }

# --- checksums ----------------------------------------------------------------
step "SHA256SUMS"
if [ -f "$DIST/SHA256SUMS" ]; then
    (cd "$DIST" && sha256sum -c --quiet SHA256SUMS) || die "SHA256SUMS does not match dist/"
    for f in "$DIST"/*.whl "$DIST"/*.tar.gz "$DIST"/*.tgz "$DIST"/*.zip; do
        [ -e "$f" ] || continue
        grep -q " $(basename "$f")\$" "$DIST/SHA256SUMS" || die "$(basename "$f") is not in SHA256SUMS"
    done
    ok "SHA256SUMS covers and matches $(wc -l <"$DIST/SHA256SUMS") artifacts"
else
    die "no dist/SHA256SUMS"
fi

# --- Python -----------------------------------------------------------------------
PYCHECK=$work/check.py
cat >"$PYCHECK" <<'EOF'
import os, subprocess, sys, time
import corral
token = sys.argv[1]
assert corral.__file__.startswith(sys.prefix), corral.__file__
t = time.monotonic()
try:
    corral.run(["sh", "-c", f"sleep {token} & wait"], timeout=1)
except subprocess.TimeoutExpired as e:
    r = e.result
else:
    sys.exit("no TimeoutExpired")
took = time.monotonic() - t
got = (r.outcome, r.killed, r.kept, list(r.survivors))
assert got == ("timed_out", 1, 0, []), got
assert took < 30, took
print(f"corral {corral.__version__}: {r.outcome}, killed {r.killed}, kept {r.kept}, "
      f"survivors {list(r.survivors)}, {took:.2f} s")
EOF

auditwheel_ok() { # WHEEL: auditwheel names the wheel's own (first) platform tag
    local whl=$1 tag
    tag=$(basename "$whl" .whl | cut -d- -f5 | tr . '\n' | grep -E 'manylinux_|musllinux_' | head -1)
    [ -n "$tag" ] || die "no PEP 600 platform tag in $(basename "$whl")"
    local out
    if ! out=$("$TOOLS/bin/auditwheel" show "$whl" 2>&1); then
        # auditwheel 6.8 on a glibc host with Debian's musl-tools installed
        # stops with "ELFError: Magic number does not match" in its library
        # lookup for musllinux wheels: said, and the NEEDED check below stands.
        if [[ $tag == musllinux_* ]] && grep -q 'Magic number does not match' <<<"$out"; then
            echo "[dist-test] WARNING: auditwheel show cannot analyse $(basename "$whl") on this host (ELFError in its library lookup)"
            return 0
        fi
        die "auditwheel show failed: $out"
    fi
    echo "$out" | tr -s ' \n' ' ' | grep -q "consistent with the following platform tag: \"$tag\"" \
        || die "auditwheel does not give $(basename "$whl") its tag $tag: $out"
    ok "auditwheel show: $(basename "$whl") is consistent with $tag"
}

so_arch() { # WHEEL-OR-FILE PATTERN: the extension inside matches `file`'s PATTERN
    local f=$1 pat=$2 d
    d=$(mktemp -d "$work/x.XXXX")
    case $f in
        *.whl) (cd "$d" && unzip -q "$f") ;;
        *) cp "$f" "$d/" ;;
    esac
    local lib
    lib=$(find "$d" -name '_corral*.so' -o -name '_corral*.pyd' -o -name '*.node' | head -1)
    [ -n "$lib" ] || die "no extension in $(basename "$f")"
    file -b "$lib" | grep -Eq "$pat" || die "$(basename "$f"): $(file -b "$lib") (wanted $pat)"
    echo "$lib"
}

# A musl object needs only musl's libc: zig records it as `libc.so`, a name
# musl's loader reserves for itself (as libc.musl-ARCH.so.1). auditwheel
# resolves that name on a glibc host to glibc's libc.so linker script (text):
# its ELFError below.
musl_only() {
    local needed
    needed=$(readelf -d "$1" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p')
    [ -n "$needed" ] && ! grep -qvE '^(libc\.so|libc\.musl-[a-z0-9_]+\.so\.1)$' <<<"$needed"
}

if [ ! -x "$TOOLS/bin/auditwheel" ]; then
    step "auditwheel (PyPI) into $TOOLS"
    [ -x "$TOOLS/bin/pip" ] || python3 -m venv "$TOOLS"
    "$TOOLS/bin/pip" install -q auditwheel || die "pip install auditwheel failed"
fi

for whl in "$DIST"/corral-*.whl; do
    [ -e "$whl" ] || continue
    name=$(basename "$whl")
    step "wheel $name"
    [[ $name == corral-$VERSION-cp39-abi3-* ]] || die "$name: not corral-$VERSION-cp39-abi3-*"
    case $name in
        *manylinux*x86_64*) pat='ELF 64-bit.*x86-64' ;;
        *manylinux*aarch64*) pat='ELF 64-bit.*ARM aarch64' ;;
        *musllinux*x86_64*) pat='ELF 64-bit.*x86-64' ;;
        *musllinux*aarch64*) pat='ELF 64-bit.*ARM aarch64' ;;
        *win_amd64*) pat='PE32\+ executable.*x86-64' ;;
        *macosx*x86_64*) pat='Mach-O 64-bit.*x86_64' ;;
        *macosx*arm64*) pat='Mach-O 64-bit.*arm64' ;;
        *) die "$name: unexpected platform" ;;
    esac
    lib=$(so_arch "$whl" "$pat")
    ok "$name: $(file -b "$lib" | cut -d, -f1-2)"
    case $name in
        *linux*) auditwheel_ok "$whl" ;;
    esac
    case $name in
        *musllinux*)
            musl_only "$lib" || die "$name links more than musl's libc: $(readelf -d "$lib" | grep NEEDED)"
            ok "$name links musl libc only" ;;
    esac
    if [[ $name == *manylinux*"$ARCH"* ]]; then
        venv=$work/venv-$RANDOM
        clean /usr/bin/python3 -m venv "$venv" || die "python3 -m venv failed"
        clean "$venv/bin/pip" install -q --no-index "$whl" || die "pip install --no-index $name failed"
        t=$(token)
        (cd "$work" && clean "$venv/bin/python" "$PYCHECK" "$t") || die "the installed wheel failed its tree"
        gone "$t" || die "the backgrounded child (sleep $t) is still running"
        ok "$name installs offline (Python $(clean "$venv/bin/python" -c 'import sys; print(sys.version.split()[0])')) and kills the tree"
    fi
done

sdist=$DIST/corral-$VERSION.tar.gz
if [ -e "$sdist" ]; then
    step "sdist $(basename "$sdist")"
    list=$(tar -tzf "$sdist")
    grep -q "^corral-$VERSION/pyproject.toml$" <<<"$list" || die "sdist has no pyproject.toml"
    grep -q "^corral-$VERSION/crates/corral/Cargo.toml$" <<<"$list" || die "sdist lacks the library crate"
    ok "sdist carries pyproject.toml and the crates it builds from (built with Rust: pip install $(basename "$sdist"))"
fi

# --- Node -------------------------------------------------------------------------
NODECHECK=$work/check.js
cat >"$NODECHECK" <<'EOF'
const assert = require('assert')
const { run } = require('corral')
const token = process.argv[2]
;(async () => {
  assert.ok(require.resolve('corral').startsWith(process.cwd()), require.resolve('corral'))
  const t = Date.now()
  const r = await run(['sh', '-c', `sleep ${token} & wait`], { timeout: 1000 })
  const got = [r.outcome, r.killed, r.kept, r.report.survivors]
  assert.deepStrictEqual(got, ['timed_out', 1, 0, []])
  assert.ok(Date.now() - t < 30000)
  console.log(`corral: ${r.outcome}, killed ${r.killed}, kept ${r.kept}, survivors [], ${((Date.now() - t) / 1000).toFixed(2)} s, containment ${r.report.containment}`)
})().catch((e) => { console.error(e); process.exit(1) })
EOF

main_tgz=$DIST/corral-$VERSION.tgz
npm_install() { # DIR TARBALL...: offline, empty cache, no scripts from the registry
    local dir=$1
    shift
    mkdir -p "$dir" "$dir.cache"
    (cd "$dir" && echo '{"name":"t","version":"1.0.0","private":true}' >package.json &&
        clean npm install --offline --cache "$dir.cache" --no-audit --no-fund --update-notifier=false --loglevel=error "$@")
}
if [ -e "$main_tgz" ]; then
    step "npm corral-$VERSION.tgz"
    list=$(tar -tzf "$main_tgz")
    ! grep -q '\.node$' <<<"$list" || die "the main package carries a binary"
    for f in index.js index.mjs index.d.ts native.js native.d.ts; do
        grep -qx "package/$f" <<<"$list" || die "the main package lacks $f"
    done
    opt=$(tar -xzOf "$main_tgz" package/package.json | clean node -e \
        'let s="";process.stdin.on("data",d=>s+=d).on("end",()=>console.log(Object.keys(JSON.parse(s).optionalDependencies||{}).join(" ")))')
    [ "$opt" = "corral-linux-x64-gnu corral-linux-arm64-gnu corral-linux-x64-musl corral-win32-x64-gnu" ] \
        || die "optionalDependencies: $opt"
    ok "main package: JS, types, no binary; optionalDependencies $opt"
fi
for tgz in "$DIST"/corral-linux-*-"$VERSION".tgz "$DIST"/corral-win32-*-"$VERSION".tgz; do
    [ -e "$tgz" ] || continue
    key=$(basename "$tgz" "-$VERSION.tgz")
    key=${key#corral-}
    step "npm corral-$key"
    case $key in
        linux-x64-*) pat='ELF 64-bit.*x86-64' ;;
        linux-arm64-*) pat='ELF 64-bit.*ARM aarch64' ;;
        win32-x64-*) pat='PE32\+ executable \(DLL\).*x86-64' ;;
        *) die "unexpected package $key" ;;
    esac
    grep -qx "package/corral.$key.node" <<<"$(tar -tzf "$tgz")" || die "corral-$key lacks corral.$key.node"
    d=$(mktemp -d "$work/n.XXXX") && tar -xzf "$tgz" -C "$d"
    lib=$d/package/corral.$key.node
    file -b "$lib" | grep -Eq "$pat" || die "corral.$key.node: $(file -b "$lib")"
    ok "corral-$key: $(file -b "$lib" | cut -d, -f1-2)"
    case $key in
        *-gnu)
            [[ $key == linux-* ]] && {
                max=$(objdump -T "$lib" | grep -o 'GLIBC_[0-9.]*' | sort -uV | tail -1)
                ok "corral-$key needs glibc ${max#GLIBC_} at most"
            } ;;
        *-musl)
            musl_only "$lib" || die "corral-$key links more than musl's libc: $(readelf -d "$lib" | grep NEEDED)"
            ok "corral-$key links musl's libc" ;;
    esac
    if [ "$key" = "linux-x64-gnu" ] && [ "$ARCH" = x86_64 ] && [ -e "$main_tgz" ]; then
        t=$(token)
        npm_install "$work/node-$key" "$main_tgz" "$tgz" || die "npm install --offline failed"
        cp "$NODECHECK" "$work/node-$key/check.js"
        (cd "$work/node-$key" && clean node check.js "$t") || die "the installed package failed its tree"
        gone "$t" || die "the backgrounded child (sleep $t) is still running"
        ok "corral + corral-$key install offline (node $(clean node --version)) and kill the tree"
        # The loader names the package it needs when it is missing.
        npm_install "$work/node-missing" "$main_tgz" || die "npm install --offline of the main package alone failed"
        msg=$(cd "$work/node-missing" && clean node -e 'require("corral")' 2>&1 || true)
        echo "$msg" | grep -q "corral-linux-x64-gnu, which is not installed" \
            || die "without its platform package, require(\"corral\") says: $msg"
        ok "without corral-$key, require(\"corral\") names it: $(echo "$msg" | grep -o 'corral: the native addon[^(]*')"
    fi
done

# --- CLI --------------------------------------------------------------------------
cli_tree() { # RUNNER... : the tree through corral run's report
    local t rep
    t=$(token)
    rep=$work/report-$RANDOM.json
    set +e
    clean "$@" run -t 1s --report "$rep" -- sh -c "sleep $t & wait"
    local rc=$?
    set -e
    [ "$rc" -eq 124 ] || die "corral run exited $rc, not 124"
    clean python3 - "$rep" <<'EOF' || die "the report is not the expected one"
import json, sys
r = json.load(open(sys.argv[1]))
got = (r["outcome"], r["killed"], r["kept"], r["survivors"], r["corral_exit"], r["signal_name"])
assert got == ("timed_out", 1, 0, [], 124, "SIGKILL"), got
print(f"report: {r['outcome']}, killed {r['killed']}, kept {r['kept']}, survivors [], containment {r['containment']}")
EOF
    gone "$t" || die "the backgrounded child (sleep $t) is still running"
}
static_exe=
for tarball in "$DIST"/corral-"$VERSION"-*-unknown-linux-musl.tar.gz; do
    [ -e "$tarball" ] || continue
    name=$(basename "$tarball" .tar.gz)
    triple=${name#corral-"$VERSION"-}
    step "CLI $name.tar.gz"
    d=$work/$name-unpacked && mkdir -p "$d" && tar -xzf "$tarball" -C "$d"
    for f in corral README.md LICENSE-MIT LICENSE-APACHE man/corral.1 completions/corral.bash \
        completions/_corral completions/corral.fish; do
        [ -s "$d/$name/$f" ] || die "$name.tar.gz lacks $f"
    done
    exe=$d/$name/corral
    case $triple in
        x86_64-*) pat='ELF 64-bit.*x86-64.*static' ;;
        aarch64-*) pat='ELF 64-bit.*ARM aarch64.*static' ;;
    esac
    file -b "$exe" | grep -Eq "$pat" || die "$name: $(file -b "$exe")"
    ok "$name: $(file -b "$exe" | cut -d, -f1-2), $(file -b "$exe" | grep -o 'static[-a-z]* linked')"
    if [ "${triple%%-*}" = "$ARCH" ]; then
        cli_tree "$exe"
        ok "$name: corral $(clean "$exe" --version | awk '{print $2}') kills the tree, exact report"
        static_exe=$exe
    elif [ "${triple%%-*}" = aarch64 ] && [ -x /usr/bin/qemu-aarch64-static ]; then
        clean /usr/bin/qemu-aarch64-static "$exe" --version >/dev/null || die "qemu-aarch64-static cannot run $name"
        cli_tree /usr/bin/qemu-aarch64-static "$exe"
        ok "$name under qemu-aarch64-static: kills the tree, exact report"
    else
        echo "[dist-test] $name: not run (no qemu-aarch64-static)"
    fi
done

zip=$DIST/corral-$VERSION-x86_64-pc-windows-gnu.zip
if [ -e "$zip" ]; then
    step "CLI $(basename "$zip")"
    d=$work/win && mkdir -p "$d" && (cd "$d" && unzip -q "$zip")
    exe=$d/corral-$VERSION-x86_64-pc-windows-gnu/corral.exe
    file -b "$exe" | grep -q 'PE32+ executable.*x86-64' || die "corral.exe: $(file -b "$exe")"
    ok "$(basename "$zip"): corral.exe, $(file -b "$exe" | cut -d, -f1)"
fi

# --- the scenario tests against the static executable ---------------------------------
if [ "$SCENARIOS" = 1 ]; then
    step "corral-cli's tests with the static executable in place of target/debug/corral"
    [ -n "$static_exe" ] || die "no static x86_64 executable in dist/"
    [ "$(id -u)" = 0 ] || die "--scenarios needs root (a bind mount in a private mount namespace)"
    # The tree tests of the command line that do not look at how corral
    # itself was built (startup.rs does: it checks the dynamic executable's
    # libraries; generate.rs and readme.rs look at files, not trees). One
    # test is skipped: it expects glibc's text for EMFILE ("Too many open
    # files"); musl's strerror says "No file descriptors available" (the
    # rest of that message, the ulimit advice, is the same).
    SUITES=(cli counts orphans kept leader_exit zero_wait_delay subreaper timeout_gnu)
    SKIP=(--skip out_of_descriptors_tells_a_shell_user_to_raise_ulimit)
    bins=$(cargo test --locked -p corral-cli --no-run --message-format=json 2>/dev/null |
        grep '"profile":{[^}]*"test":true' |
        sed -n 's/.*"executable":"\([^"]*\)".*/\1/p')
    dyn=$ROOT/target/debug/corral
    [ -x "$dyn" ] || die "no $dyn"
    cp "$static_exe" "$work/corral-static"
    for s in "${SUITES[@]}"; do
        exe=$(echo "$bins" | grep "/$s-[0-9a-f]*\$" || true)
        [ -n "$exe" ] || die "no test executable for $s"
        echo "     Running $s against $(basename "$static_exe") (static)"
        # Inside the namespace: the bind mount, a check that it took, the suite.
        set +e
        (cd crates/corral-cli && ulimit -n 1024 && unshare -m --propagation private sh -c '
            mount --bind "$1" "$2" || exit 90
            file -b "$2" | grep -q "static" || { echo "the bind mount did not take" >&2; exit 91; }
            shift 3
            exec "$0" --test-threads=2 -q "$@"' "$exe" "$work/corral-static" "$dyn" "$exe" "${SKIP[@]}") \
            >"$work/$s.log" 2>&1
        rc=$?
        set -e
        grep -E '^test result:' "$work/$s.log" || true
        if [ "$rc" -ne 0 ]; then
            grep -E 'FAILED|panicked' -A3 "$work/$s.log" | head -40
            die "$s failed against the static executable (exit $rc)"
        fi
        ok "$s passes against the static executable"
    done
fi

step "done: $passed checks passed"
