'use strict'
// Process-tree helpers for the tests (Linux). As the Rust testkit and the
// Python conftest: `"$H" NAME [COMMAND...]` writes its pid to NAME.pid and
// becomes COMMAND (default `sleep 30`), so every helper exits by itself
// within 30 s. Each scratch has a unique marker in the helpers' environment;
// a pid counts as "our helper" only while /proc/PID/environ carries it (no
// PID-reuse mistakes), and cleanup kills leftovers by pid (every process
// carrying the marker, found in /proc), never by name.

const fs = require('fs')
const os = require('os')
const path = require('path')
const crypto = require('crypto')

const HELPER = `#!/bin/sh
# corral test helper: record my pid, then become COMMAND (default: sleep 30).
name="$1"; shift
echo $$ > "$CORRAL_TEST_DIR/$name.tmp" && mv "$CORRAL_TEST_DIR/$name.tmp" "$CORRAL_TEST_DIR/$name.pid"
if [ $# -eq 0 ]; then exec sleep 30; fi
exec "$@"
`

const WAITER = `#!/bin/sh
# corral test helper: wait (at most 10 s) until the named helpers recorded their pids.
for name in "$@"; do
  i=0
  while [ ! -e "$CORRAL_TEST_DIR/$name.pid" ] && [ $i -lt 1000 ]; do sleep 0.01; i=$((i + 1)); done
done
`

const sleep = (ms) => new Promise((r) => setTimeout(r, ms))

class Tree {
  constructor() {
    this.mark = `corral-nodetest-${process.pid}-${crypto.randomBytes(8).toString('hex')}`
    this.dir = fs.mkdtempSync(path.join(os.tmpdir(), `${this.mark}-`))
    this.H = path.join(this.dir, 'H')
    fs.writeFileSync(this.H, HELPER, { mode: 0o755 })
    this.W = path.join(this.dir, 'W')
    fs.writeFileSync(this.W, WAITER, { mode: 0o755 })
  }

  /** The environment for a command under test (replaces, as child_process). */
  env(extra = {}) {
    return { PATH: process.env.PATH, H: this.H, W: this.W, CORRAL_TEST_DIR: this.dir, CORRAL_TEST_MARK: this.mark, ...extra }
  }

  pid(name) {
    try {
      return Number(fs.readFileSync(path.join(this.dir, `${name}.pid`), 'utf8').trim())
    } catch {
      return null
    }
  }

  async waitPid(name, ms = 10_000) {
    const end = Date.now() + ms
    for (;;) {
      const p = this.pid(name)
      if (p) return p
      if (Date.now() > end) throw new Error(`helper ${name} never started`)
      await sleep(10)
    }
  }

  /** Whether helper `name` is alive (a zombie counts as dead). */
  alive(name) {
    const pid = this.pid(name)
    if (!pid) return false
    return this.isOurs(pid)
  }

  isOurs(pid) {
    try {
      const stat = fs.readFileSync(`/proc/${pid}/stat`, 'utf8')
      const state = stat.slice(stat.lastIndexOf(')') + 2, stat.lastIndexOf(')') + 3)
      if (state === 'Z' || state === 'X') return false
      return fs.readFileSync(`/proc/${pid}/environ`, 'utf8').includes(`CORRAL_TEST_MARK=${this.mark}`)
    } catch {
      return false
    }
  }

  /** Waits until every named helper is dead; false if one outlives `ms`. */
  async allDead(names, ms = 5_000) {
    const end = Date.now() + ms
    while (names.some((n) => this.alive(n))) {
      if (Date.now() > end) return false
      await sleep(20)
    }
    return true
  }

  /** Host pids of every live process carrying this scratch's marker (found
   * by scanning /proc: also helpers in a PID namespace, whose pid files hold
   * their namespace's pid). */
  survivors() {
    const out = []
    for (const d of fs.readdirSync('/proc')) {
      if (!/^\d+$/.test(d)) continue
      if (this.isOurs(Number(d))) out.push(Number(d))
    }
    return out
  }

  /** Waits until no process carries the marker; false if one outlives `ms`. */
  async noneAlive(ms = 5_000) {
    const end = Date.now() + ms
    while (this.survivors().length > 0) {
      if (Date.now() > end) return false
      await sleep(20)
    }
    return true
  }

  names() {
    return fs.readdirSync(this.dir).filter((f) => f.endsWith('.pid')).map((f) => f.slice(0, -4))
  }

  /** Kills every helper still alive, by pid (checked to be ours). */
  cleanup() {
    for (const pid of this.survivors()) {
      try {
        process.kill(pid, 'SIGKILL')
      } catch {}
    }
    fs.rmSync(this.dir, { recursive: true, force: true })
  }
}

/** A fresh Tree per test, cleaned up after it whatever happens. */
function withTree(t) {
  const tree = new Tree()
  t.after(() => tree.cleanup())
  return tree
}

module.exports = { Tree, withTree, sleep }
