'use strict'
// Session: a persistent shell with real process trees.
const test = require('node:test')
const assert = require('node:assert/strict')
const fs = require('fs')
const os = require('os')
const path = require('path')
const { Session } = require('..')
const { withTree } = require('./tree.js')

test('state carries over; output is exact; stdin is at end of file', async () => {
  const dir = fs.realpathSync(fs.mkdtempSync(path.join(os.tmpdir(), 'corral-session-')))
  fs.mkdirSync(path.join(dir, 'sub'))
  const s = new Session({ cwd: path.join(dir, 'sub'), env: { GREETING: 'hi' } })
  try {
    let r = await s.run("cd ..; export A=1; B='x y'; f() { echo \"f $1\"; }; set -o pipefail; umask 027")
    assert.equal(r.outcome, 'exited')
    assert.equal(r.sessionId, s.id)
    for (let i = 0; i < 100; i++) await s.run('n=$((n+1))')
    r = await s.run('echo "$PWD|$A|$B|$n|$GREETING|$PAGER"; f y; [[ -o pipefail ]] && echo pf; umask; read x; echo rc=$?')
    assert.equal(r.stdout, `${dir}|1|x y|100|hi|cat\nf y\npf\n0027\nrc=1\n`)
    r = await s.run("printf 'a\\0b\\377$ '", { encoding: null })
    assert.deepEqual(r.stdout, Buffer.from([0x61, 0, 0x62, 0xff, 0x24, 0x20]))
  } finally {
    await s.close()
    fs.rmSync(dir, { recursive: true, force: true })
  }
})

test('a timed-out command is killed alone; the background server lives until close', async (t) => {
  const tree = withTree(t)
  const s = new Session({ env: tree.env() })
  let r = await s.run('"$H" server >/dev/null 2>&1 & "$W" server')
  const server = await tree.waitPid('server')
  assert.deepEqual(r.jobs.map((j) => j.pid), [server])
  const t0 = Date.now()
  r = await s.run('setsid "$H" escaper & "$W" escaper; sleep 30', { timeout: 1000 })
  assert.equal(r.outcome, 'timed_out')
  assert.ok(Date.now() - t0 < 10_000)
  assert.ok(await tree.allDead(['escaper']), 'the escaper survived the timeout')
  assert.ok(tree.alive('server'), 'the server died with another command')
  assert.equal((await s.run('echo ok')).stdout, 'ok\n')
  assert.deepEqual(s.jobs().map((j) => j.pid), [server])
  await s.close()
  assert.ok(await tree.allDead(['server']), 'the server outlived close()')
  await assert.rejects(s.run('true'), { code: 'ERR_CORRAL_SESSION_CLOSED' })
})

test('exit ends the session and kills its jobs', async (t) => {
  const tree = withTree(t)
  const s = new Session({ env: tree.env() })
  await s.run('"$H" job >/dev/null 2>&1 & "$W" job')
  await tree.waitPid('job')
  const r = await s.run('exit 3')
  assert.equal(r.exitCode, 3)
  assert.ok(r.sessionEnded)
  assert.ok(await tree.allDead(['job']))
  await assert.rejects(s.run('true'), { code: 'ERR_CORRAL_SESSION_CLOSED' })
})
