'use strict'
// The `sandbox` option: checked in JavaScript (names, existing paths),
// mapped onto the library's run spec, and a run refused where the sandbox
// cannot be enforced (outcome sandbox_failed; execFile's error code
// ERR_CORRAL_SANDBOX), its command never run.
const test = require('node:test')
const assert = require('node:assert/strict')
const fs = require('node:fs')
const os = require('node:os')
const path = require('node:path')
const { run, spawn, execFile, exec, _runSpec } = require('..')

test('the policy reaches the spec; paths absolute', () => {
  assert.equal(_runSpec(['true'], {}).sandbox, undefined)
  assert.deepEqual(_runSpec(['true'], { sandbox: true }).sandbox, { network: 'none' })
  assert.equal(_runSpec(['true'], { sandbox: false }).sandbox, undefined)
  const s = _runSpec(['true'], { sandbox: { allowWrite: ['.'], denyRead: [os.tmpdir()], network: 'host' } }).sandbox
  assert.deepEqual(s, { allow_write: [process.cwd()], deny_read: [path.resolve(os.tmpdir())], network: 'host' })
  const snake = _runSpec(['true'], { sandbox: { allow_write: ['.'], network: 'loopback' } }).sandbox
  assert.deepEqual(snake, { allow_write: [process.cwd()], network: 'loopback' })
})

test('a bad policy is refused before anything runs', () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'corral-sbx-'))
  try {
    const marker = path.join(dir, 'ran')
    const missing = path.join(dir, 'missing')
    const bad = [
      [{ network: 'bogus' }, /'none', 'loopback', 'host'/],
      [{ allowWrite: [missing] }, /does not exist/],
      [{ denyRead: [missing] }, /does not exist/],
      [{ allowWrite: '/tmp' }, /must be an array/],
      [{ allowWrite: [''] }, /must not be empty/],
      [{ allow: [] }, /Unknown key "allow"/],
      ['yes', /must be a boolean or an object/],
    ]
    for (const [sandbox, msg] of bad) {
      assert.throws(() => run(['sh', '-c', `touch ${marker}`], { sandbox }), msg)
      assert.throws(() => spawn(['sh', '-c', `touch ${marker}`], { sandbox }), msg)
      assert.throws(() => execFile('sh', ['-c', `touch ${marker}`], { sandbox }, () => {}), msg)
    }
    assert.ok(!fs.existsSync(marker), 'a bad policy ran the command')
  } finally {
    fs.rmSync(dir, { recursive: true, force: true })
  }
})

test('a sandbox that cannot be enforced: sandbox_failed, nothing run', async () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'corral-sbx-'))
  try {
    const marker = path.join(dir, 'ran')
    const cmd = `touch ${marker}`
    const r = await run(['sh', '-c', cmd], { sandbox: true })
    assert.equal(r.outcome, 'sandbox_failed')
    assert.match(r.report.error, /sandbox/)
    const w = await spawn(['sh', '-c', cmd], { sandbox: { network: 'loopback' } }).wait()
    assert.equal(w.outcome, 'sandbox_failed')
    const e = await new Promise((resolve) => execFile('sh', ['-c', cmd], { sandbox: true }, resolve))
    assert.equal(e.code, 'ERR_CORRAL_SANDBOX')
    assert.equal(e.report.outcome, 'sandbox_failed')
    const x = await new Promise((resolve) => exec(cmd, { sandbox: true }, resolve))
    assert.equal(x.code, 'ERR_CORRAL_SANDBOX')
    assert.ok(!fs.existsSync(marker), 'the sandboxed command ran')
  } finally {
    fs.rmSync(dir, { recursive: true, force: true })
  }
})
