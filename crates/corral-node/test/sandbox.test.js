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
  // Without namespaces (forced), a private loopback cannot be had.
  process.env.CORRAL_SANDBOX_NO_NAMESPACES = '1'
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'corral-sbx-'))
  try {
    const marker = path.join(dir, 'ran')
    const cmd = `touch ${marker}`
    const sandbox = { network: 'loopback' }
    const r = await run(['sh', '-c', cmd], { sandbox })
    assert.equal(r.outcome, 'sandbox_failed')
    assert.match(r.report.error, /namespace/)
    const w = await spawn(['sh', '-c', cmd], { sandbox }).wait()
    assert.equal(w.outcome, 'sandbox_failed')
    const e = await new Promise((resolve) => execFile('sh', ['-c', cmd], { sandbox }, resolve))
    assert.equal(e.code, 'ERR_CORRAL_SANDBOX')
    assert.equal(e.report.outcome, 'sandbox_failed')
    const x = await new Promise((resolve) => exec(cmd, { sandbox }, resolve))
    assert.equal(x.code, 'ERR_CORRAL_SANDBOX')
    assert.ok(!fs.existsSync(marker), 'the sandboxed command ran')
  } finally {
    delete process.env.CORRAL_SANDBOX_NO_NAMESPACES
    fs.rmSync(dir, { recursive: true, force: true })
  }
})

// A directory outside the working directory and outside /tmp (private in a
// sandbox), and a working directory.
function dirs() {
  const outside = fs.mkdtempSync('/var/tmp/corral-sbx-')
  fs.chmodSync(outside, 0o777)
  const work = fs.mkdtempSync(path.join(os.tmpdir(), 'corral-sbx-work-'))
  return { outside, work, done: () => [outside, work].forEach((d) => fs.rmSync(d, { recursive: true, force: true })) }
}

test('a write outside the working directory fails; the host file is intact', async () => {
  const { outside, work, done } = dirs()
  try {
    const victim = path.join(outside, 'victim')
    fs.writeFileSync(victim, 'host\n')
    const script = `echo bad > ${victim} && exit 9; rm -f ${victim} && exit 8; echo new > ${outside}/new && exit 7; exit 0`
    const r = await run(['sh', '-c', script], { cwd: work, sandbox: true })
    assert.equal(r.outcome, 'exited', r.stderr)
    assert.equal(r.exitCode, 0, r.stderr)
    assert.equal(r.report.sandbox.network, 'none')
    const { stdout } = await new Promise((resolve, reject) =>
      exec(script, { cwd: work, sandbox: true }, (err, stdout) => (err ? reject(err) : resolve({ stdout }))))
    assert.equal(stdout, '')
    assert.equal(fs.readFileSync(victim, 'utf8'), 'host\n')
    assert.ok(!fs.existsSync(path.join(outside, 'new')))
  } finally {
    done()
  }
})

test('ordinary work runs inside: the working directory, /tmp, allowWrite, a pipe', async () => {
  const { outside, work, done } = dirs()
  try {
    fs.writeFileSync(path.join(outside, 'secret'), 's3cret\n')
    const allowed = path.join(outside, 'allowed')
    fs.mkdirSync(allowed, { mode: 0o777 })
    const script = `echo in > inside && echo t > /tmp/t && cat /tmp/t && echo ok > ${allowed}/f && ls | cat && if cat ${outside}/secret; then exit 8; fi`
    const sandbox = { allowWrite: [allowed], denyRead: [path.join(outside, 'secret')] }
    const r = await run(['sh', '-c', script], { cwd: work, sandbox })
    assert.equal(r.exitCode, 0, r.stderr)
    assert.equal(r.stdout, 't\ninside\n')
    assert.equal(fs.readFileSync(path.join(work, 'inside'), 'utf8'), 'in\n')
    assert.equal(fs.readFileSync(path.join(allowed, 'f'), 'utf8'), 'ok\n')
    assert.ok(r.report.sandbox.allow_write.includes(allowed), JSON.stringify(r.report.sandbox))
    const p = spawn(['sh', '-c', 'read x; echo "got $x" > got; cat got'], { cwd: work, sandbox: true })
    p.stdin.end('hello\n')
    let out = ''
    p.stdout.on('data', (d) => { out += d })
    const w = await p.wait()
    assert.equal(w.exitCode, 0)
    assert.equal(out, 'got hello\n')
  } finally {
    done()
  }
})

test('refused connections are listed in the report, counted exactly', async () => {
  const { work, done } = dirs()
  try {
    const program = 'import socket\nfor _ in range(2):\n    try:\n        socket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(b"x", ("127.0.0.1", 9))\n    except OSError as e:\n        print(e.errno)\n'
    const r = await run(['/usr/bin/python3', '-c', program], { cwd: work, sandbox: true })
    assert.equal(r.exitCode, 0, r.stderr)
    assert.equal(r.stdout, '1\n1\n')
    const sb = r.report.sandbox
    assert.deepEqual(sb.denials, [{ kind: 'network', operation: 'socket', target: 'AF_INET SOCK_DGRAM', count: 2 }])
    assert.equal(sb.denials_unlisted, 0)
    assert.deepEqual(Object.fromEntries(sb.denials_observed.map((o) => [o.kind, o.observed])), { files: false, network: true, processes: false })
  } finally {
    done()
  }
})
