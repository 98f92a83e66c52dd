'use strict'
// Cleanup failures: every failed step is reported, in order. Two steps fail
// for real in one run: the run requires crash safety and its keeper (this
// process's child `corral-keeper`) is killed, then the command and its child
// are frozen (cgroup v1 freezer: a frozen process does not act on SIGKILL)
// so they survive the SIGKILL after the deadline. Root only; its own file,
// so its own process and keeper.
const test = require('node:test')
const assert = require('node:assert/strict')
const fs = require('fs')
const path = require('path')
const { spawn } = require('..')
const { withTree, sleep } = require('./tree.js')

const FREEZER = '/sys/fs/cgroup/freezer'

/** This process's live keeper: a child named corral-keeper (by pid, the
 * unreaped child of this process, so the pid cannot be reused). */
async function ownKeeper() {
  const end = Date.now() + 10_000
  for (;;) {
    let kids = ''
    for (const t of fs.readdirSync(`/proc/${process.pid}/task`)) {
      try {
        kids += fs.readFileSync(`/proc/${process.pid}/task/${t}/children`, 'utf8') + ' '
      } catch {}
    }
    for (const p of kids.split(/\s+/).filter(Boolean)) {
      try {
        const stat = fs.readFileSync(`/proc/${p}/stat`, 'utf8')
        const state = stat.slice(stat.lastIndexOf(')') + 2, stat.lastIndexOf(')') + 3)
        if (stat.includes('(corral-keeper)') && state !== 'Z') return Number(p)
      } catch {}
    }
    if (Date.now() > end) return null
    await sleep(5)
  }
}

const canFreeze = process.getuid && process.getuid() === 0 && fs.existsSync(path.join(FREEZER, 'cgroup.procs'))

test('two failed cleanup steps are both reported, in order', { skip: !canFreeze && 'needs root and the cgroup v1 freezer' }, async (t) => {
  const tree = withTree(t)
  const frozen = path.join(FREEZER, `corral-nodetest-${process.pid}`)
  fs.mkdirSync(frozen)
  t.after(async () => {
    // Thawed, the processes with a SIGKILL pending die; then the empty
    // cgroup can go.
    try {
      fs.writeFileSync(path.join(frozen, 'freezer.state'), 'THAWED')
    } catch {}
    const end = Date.now() + 5000
    for (;;) {
      try {
        fs.rmdirSync(frozen)
        break
      } catch {
        if (Date.now() > end) break
        await sleep(10)
      }
    }
  })
  const p = spawn(['sh', '-c', 'echo $$ > "$CORRAL_TEST_DIR/root.pid"; "$H" child & wait'], {
    env: tree.env(),
    containment: 'process_group',
    requireCrashSafety: true,
    timeout: 2000,
    stdin: 'ignore',
    stdout: 'ignore',
    stderr: 'ignore',
  })
  const keeper = await ownKeeper()
  assert.ok(keeper, 'no keeper while a run is registered')
  process.kill(keeper, 'SIGKILL')
  const root = await tree.waitPid('root')
  const child = await tree.waitPid('child')
  for (const pid of [root, child]) fs.writeFileSync(path.join(frozen, 'cgroup.procs'), String(pid))
  fs.writeFileSync(path.join(frozen, 'freezer.state'), 'FROZEN')
  const end = Date.now() + 5000
  while (fs.readFileSync(path.join(frozen, 'freezer.state'), 'utf8').trim() !== 'FROZEN') {
    assert.ok(Date.now() < end, 'the freezer cgroup did not freeze')
    await sleep(5)
  }
  const t0 = Date.now()
  const r = await p.wait()
  assert.ok(Date.now() - t0 < 40_000, `took ${Date.now() - t0} ms`)
  assert.equal(r.outcome, 'cleanup_failed', JSON.stringify(r.report))
  assert.deepEqual(
    r.cleanupErrors.map((e) => e.step),
    ['confirm_death', 'crash_safety'],
  )
  assert.deepEqual(r.report.cleanup_errors, r.cleanupErrors)
  assert.deepEqual([...r.report.survivors].sort((a, b) => a - b), [root, child].sort((a, b) => a - b))
  for (const e of r.cleanupErrors) {
    assert.equal(typeof e.error, 'string')
    assert.ok(r.error.includes(e.error), `${r.error} lacks ${e.error}`)
  }
  assert.ok(r.error.indexOf('survived SIGKILL') < r.error.indexOf('crash safety'), r.error)
})
