'use strict'
// idleTimeout and maxOutput (issue #26, parts 1 and 2, in the Node
// package): real process trees, each helper's fate asserted; the outcome,
// `timeoutKind` and the byte counts are the library's report fields.
const test = require('node:test')
const assert = require('node:assert/strict')
const { promisify } = require('node:util')
const { run, spawn, execFile, exec } = require('..')
const { withTree } = require('./tree.js')

test('a silent tree is killed by the idle timeout', async (t) => {
  const tree = withTree(t)
  const t0 = Date.now()
  const r = await run(['sh', '-c', '"$H" kid & "$W" kid; exec "$H" root'], { idleTimeout: 400, timeout: 20_000, env: tree.env() })
  const took = Date.now() - t0
  assert.equal(r.outcome, 'timed_out')
  assert.equal(r.timeoutKind, 'idle')
  assert.equal(r.report.timeout_kind, 'idle')
  assert.ok(took >= 400 && took < 6000, `took ${took} ms`)
  assert.ok(tree.pid('kid') && tree.pid('root'))
  assert.ok(await tree.allDead(['kid', 'root'], 2000), 'a member survived')
  assert.ok(await tree.noneAlive(1000))
})

test('a chatty program outlives the idle timeout; the deadline says deadline', async (t) => {
  const t0 = Date.now()
  const r = await run(['sh', '-c', 'i=0; while [ $i -lt 12 ]; do echo tick; sleep 0.1; i=$((i+1)); done'], { idleTimeout: 600 })
  assert.equal(r.outcome, 'exited')
  assert.equal(r.exitCode, 0)
  assert.equal(r.timeoutKind, null)
  assert.ok(Date.now() - t0 >= 1200)
  assert.equal(r.stdout.split('\n').filter((l) => l === 'tick').length, 12)
  // Output on stderr restarts it too; the deadline comes first here.
  const tree = withTree(t)
  const d = await run(['sh', '-c', '"$H" chatter sh -c "while :; do echo x >&2; sleep 0.1; done"'], { idleTimeout: 600, timeout: 1200, env: tree.env() })
  assert.equal(d.outcome, 'timed_out')
  assert.equal(d.timeoutKind, 'deadline')
  assert.ok(await tree.allDead(['chatter'], 2000), 'the chatter survived')
})

test('a flood is killed at maxOutput with the exact byte count kept', async (t) => {
  const tree = withTree(t)
  const t0 = Date.now()
  const r = await run(['sh', '-c', 'exec "$H" flood yes'], { maxOutput: 10_000, timeout: 20_000, env: tree.env(), encoding: 'buffer' })
  const took = Date.now() - t0
  assert.equal(r.outcome, 'output_limit')
  assert.equal(r.timeoutKind, null)
  assert.equal(r.stdout.length, 10_000)
  assert.ok(r.stdout.every((b, i) => b === (i % 2 === 0 ? 0x79 : 0x0a)))
  assert.ok(r.report.stdout_bytes >= 10_000, `${r.report.stdout_bytes}`)
  assert.equal(r.stderr.length, 0)
  assert.ok(took < 6000, `took ${took} ms`)
  assert.ok(await tree.allDead(['flood'], 2000), 'the flood survived')
  // stdout and stderr count together: 6 + 6 bytes under a cap of 8.
  const both = await run(['sh', '-c', 'printf 12345\\n; printf abcde\\n >&2; exec "$H" late'], { maxOutput: 8, timeout: 20_000, env: tree.env() })
  assert.equal(both.outcome, 'output_limit')
  assert.equal(both.stdout.length + both.stderr.length, 8)
  assert.ok(await tree.noneAlive(2000))
})

test('maxOutput and idleTimeout through spawn, execFile and exec', async (t) => {
  const tree = withTree(t)
  const p = spawn(['sh', '-c', 'exec "$H" quiet'], { idleTimeout: 300, stdout: 'pipe', env: tree.env() })
  const w = await p.wait()
  assert.equal(w.outcome, 'timed_out')
  assert.equal(w.timeoutKind, 'idle')
  assert.ok(await tree.allDead(['quiet'], 2000))
  // execFile: a cap hit is an error whose report says output_limit.
  await assert.rejects(promisify(execFile)('sh', ['-c', 'exec "$H" yes1 yes'], { maxOutput: 1000, env: tree.env() }), (e) => {
    assert.equal(e.report.outcome, 'output_limit')
    assert.equal(e.killed, true)
    assert.equal(e.stdout.length, 1000)
    return true
  })
  await assert.rejects(promisify(exec)('exec "$H" quiet2', { idleTimeout: 300, env: tree.env() }), (e) => {
    assert.equal(e.report.outcome, 'timed_out')
    assert.equal(e.report.timeout_kind, 'idle')
    return true
  })
  assert.ok(await tree.allDead(['yes1', 'quiet2'], 2000))
  assert.ok(await tree.noneAlive(1000))
})

test('bad idleTimeout and maxOutput values are refused', async () => {
  assert.throws(() => run(['true'], { idleTimeout: -1 }), RangeError)
  assert.throws(() => run(['true'], { idleTimeout: 'x' }), TypeError)
  assert.throws(() => run(['true'], { maxOutput: 1.5 }), RangeError)
  assert.throws(() => run(['true'], { maxOutput: -3 }), RangeError)
})
