'use strict'
// execFile / exec: child_process's contract (cases re-implemented from
// Node's own test/parallel/test-child-process-exec*.js and -execfile*.js),
// plus what corral adds: the whole tree killed, held output bounded.
const test = require('node:test')
const assert = require('node:assert/strict')
const util = require('util')
const { getEventListeners } = require('events')
const { execFile, exec } = require('..')
const { withTree } = require('./tree.js')

const call = (fn, ...a) => new Promise((res) => fn(...a, (err, stdout, stderr) => res({ err, stdout, stderr })))

test('execFile: success gives (null, stdout, stderr) as strings', async () => {
  const { err, stdout, stderr } = await call(execFile, 'echo', ['foo', 'bar'])
  assert.equal(err, null)
  assert.equal(stdout, 'foo bar\n')
  assert.equal(stderr, '')
  const sh = await call(execFile, 'echo', ['foo', 'bar'], { shell: true })
  assert.equal(sh.stdout, 'foo bar\n')
})

test('execFile: a nonzero exit: error.code is the code, message names the command', async () => {
  const { err, stderr } = await call(execFile, 'sh', ['-c', 'echo oops >&2; exit 42'])
  assert.equal(err.code, 42)
  assert.equal(err.killed, false)
  assert.equal(err.signal, null)
  assert.equal(err.cmd, 'sh -c echo oops >&2; exit 42')
  assert.equal(err.message, 'Command failed: sh -c echo oops >&2; exit 42\noops\n')
  assert.equal(stderr, 'oops\n')
  assert.equal(err.report.outcome, 'exited')
})

test('execFile: a missing program is an ENOENT error', async () => {
  const { err, stdout } = await call(execFile, 'corral-no-such-program', ['x'])
  assert.equal(err.code, 'ENOENT')
  assert.equal(err.errno, -2)
  assert.equal(err.syscall, 'spawn corral-no-such-program')
  assert.equal(err.path, 'corral-no-such-program')
  assert.deepEqual(err.spawnargs, ['x'])
  assert.equal(err.cmd, 'corral-no-such-program x')
  assert.equal(err.report.outcome, 'spawn_failed')
  assert.equal(stdout, '')
})

test('exec: timeout kills the whole tree with killSignal (SIGTERM)', async (t) => {
  const tree = withTree(t)
  const t0 = Date.now()
  const { err } = await call(exec, 'setsid "$H" escaper & "$W" escaper; exec "$H" root', { timeout: 1000, env: tree.env() })
  assert.ok(Date.now() - t0 < 5000)
  assert.equal(err.killed, true)
  assert.equal(err.signal, 'SIGTERM')
  assert.equal(err.code, null)
  assert.equal(err.report.outcome, 'timed_out')
  assert.ok(tree.pid('escaper') && tree.pid('root'))
  assert.ok(await tree.allDead(['escaper', 'root'], 1000))
})

test('exec: a holder of stdout cannot keep the callback from firing; it is an error', async (t) => {
  const tree = withTree(t)
  const t0 = Date.now()
  const { err, stdout } = await call(exec, '"$H" holder & "$W" holder; echo hi', { waitDelay: 300, env: tree.env() })
  assert.ok(Date.now() - t0 < 5000)
  assert.equal(stdout, 'hi\n')
  assert.equal(err.report.outcome, 'output_held')
  assert.equal(err.killed, true)
  assert.ok(tree.pid('holder'))
  assert.ok(await tree.allDead(['holder'], 1000))
})

test('maxBuffer: exceeding it kills the tree, ERR_CHILD_PROCESS_STDIO_MAXBUFFER, output truncated', async (t) => {
  const e1 = await call(exec, 'echo hello world', { maxBuffer: 5 })
  assert.ok(e1.err instanceof RangeError)
  assert.equal(e1.err.message, 'stdout maxBuffer length exceeded')
  assert.equal(e1.err.code, 'ERR_CHILD_PROCESS_STDIO_MAXBUFFER')
  assert.equal(e1.stdout, 'hello')
  const uni = '中文测试'
  const e2 = await call(exec, `printf '${uni}\\n' >&2`, { maxBuffer: 3 })
  assert.equal(e2.err.code, 'ERR_CHILD_PROCESS_STDIO_MAXBUFFER')
  assert.equal(e2.err.message, 'stderr maxBuffer length exceeded')
  assert.equal(e2.stderr, '中文测')
  const e3 = await call(exec, `printf '${uni}\\n' >&2`, { maxBuffer: 5, encoding: 'buffer' })
  assert.deepEqual(e3.stderr, Buffer.from(uni).subarray(0, 5))
  const ok = await call(exec, `head -c ${1024 * 1024 - 1} /dev/zero`, {})
  assert.equal(ok.err, null)
  assert.equal(ok.stdout.length, 1024 * 1024 - 1)
  const inf = await call(exec, 'echo hello world', { maxBuffer: Infinity })
  assert.equal(inf.err, null)
  // A writer that never stops, and its tree: killed once past maxBuffer.
  const tree = withTree(t)
  const t0 = Date.now()
  const e4 = await call(exec, '"$H" bystander & "$W" bystander; exec "$H" yes yes', { maxBuffer: 100_000, env: tree.env() })
  assert.ok(Date.now() - t0 < 10_000)
  assert.equal(e4.err.code, 'ERR_CHILD_PROCESS_STDIO_MAXBUFFER')
  assert.equal(e4.stdout.length, 100_000)
  assert.ok(tree.pid('bystander') && tree.pid('yes'))
  assert.ok(await tree.allDead(['bystander', 'yes'], 1000))
})

test('300 MB through execFile with a small maxBuffer: killed early, memory bounded', async () => {
  const before = process.memoryUsage().rss
  const { err, stdout } = await call(execFile, 'head', ['-c', '300000000', '/dev/zero'], { maxBuffer: 1 << 20, encoding: 'buffer' })
  assert.equal(err.code, 'ERR_CHILD_PROCESS_STDIO_MAXBUFFER')
  assert.equal(stdout.length, 1 << 20)
  assert.ok(process.memoryUsage().rss - before < 64 << 20)
})

test('AbortSignal: AbortError, the tree killed; already aborted: nothing spawned; listener removed', async (t) => {
  const tree = withTree(t)
  const ac = new AbortController()
  const p = call(exec, 'setsid "$H" escaper & exec "$H" root', { signal: ac.signal, env: tree.env() })
  await tree.waitPid('escaper')
  await tree.waitPid('root')
  ac.abort()
  const { err } = await p
  assert.equal(err.name, 'AbortError')
  assert.equal(err.code, 'ABORT_ERR')
  assert.equal(err.signal, undefined)
  assert.ok(await tree.allDead(['escaper', 'root'], 1000))
  const pre = await call(exec, 'exec "$H" never', { signal: AbortSignal.abort(), env: tree.env() })
  assert.equal(pre.err.name, 'AbortError')
  assert.equal(tree.pid('never'), null)
  const ac2 = new AbortController()
  const done = await call(execFile, 'true', [], { signal: ac2.signal })
  assert.equal(done.err, null)
  assert.equal(getEventListeners(ac2.signal, 'abort').length, 0)
})

test('util.promisify: { stdout, stderr }, or the error with stdout/stderr attached', async () => {
  const pExecFile = util.promisify(execFile)
  const pExec = util.promisify(exec)
  assert.deepEqual(await pExecFile('echo', ['x']), { stdout: 'x\n', stderr: '' })
  assert.deepEqual(await pExec('echo y; echo z >&2'), { stdout: 'y\n', stderr: 'z\n' })
  await assert.rejects(pExec('echo out; exit 7'), (e) => e.code === 7 && e.stdout === 'out\n' && e.stderr === '')
  const p = pExecFile('true')
  assert.ok(p.child && p.child.pid > 0)
  await p
})

test('options: cwd, env, encoding, shell as a string, input', async () => {
  assert.equal((await call(exec, 'pwd', { cwd: '/tmp' })).stdout, '/tmp\n')
  assert.equal((await call(exec, 'echo "$A"', { env: { A: 'b', PATH: process.env.PATH } })).stdout, 'b\n')
  assert.deepEqual((await call(execFile, 'echo', ['q'], { encoding: 'buffer' })).stdout, Buffer.from('q\n'))
  assert.equal((await call(execFile, 'echo', ['q'], { encoding: 'hex' })).stdout, '710a')
  assert.equal((await call(exec, 'echo $0', { shell: '/bin/bash' })).stdout, '/bin/bash\n')
  assert.equal((await call(execFile, 'cat', [], { input: 'in' })).stdout, 'in')
})

test('child.kill() kills the tree; error.killed is true', async (t) => {
  const tree = withTree(t)
  let child
  const p = new Promise((res) => {
    child = execFile('sh', ['-c', 'setsid "$H" escaper & exec "$H" root'], { env: tree.env() }, (err) => res(err))
  })
  assert.ok(child.pid > 0)
  await tree.waitPid('escaper')
  await tree.waitPid('root')
  assert.equal(child.kill(), true)
  const err = await p
  assert.equal(err.killed, true)
  assert.equal(err.signal, 'SIGTERM')
  assert.ok(await tree.allDead(['escaper', 'root'], 1000))
})

test('exec: a missing cwd is ENOENT of the shell, as child_process', async () => {
  const { err } = await call(exec, 'pwd', { cwd: '/nonexistent-corral-dir' })
  assert.equal(err.code, 'ENOENT')
  assert.equal(err.syscall, 'spawn /bin/sh')
  assert.equal(err.path, '/bin/sh')
  assert.deepEqual(err.spawnargs, ['-c', 'pwd'])
  assert.equal(err.cmd, 'pwd')
})

test('the returned child: spawn, exit, close events; stdout/stderr data (strings with an encoding)', async () => {
  const events = []
  const data = { out: [], err: [] }
  await new Promise((resolve) => {
    const child = exec('echo out; echo err >&2; exit 3', (err) => events.push(['callback', err.code]))
    child.on('spawn', () => events.push(['spawn']))
    child.on('exit', (code, sig) => events.push(['exit', code, sig]))
    child.on('close', (code, sig) => {
      events.push(['close', code, sig])
      resolve()
    })
    child.stdout.on('data', (d) => data.out.push(d))
    child.stderr.on('data', (d) => data.err.push(d))
  })
  assert.deepEqual(events, [['spawn'], ['exit', 3, null], ['callback', 3], ['close', 3, null]])
  assert.deepEqual(data.out, ['out\n'])
  assert.deepEqual(data.err, ['err\n'])
  const missing = exec('corral-no-such-command-xyz')
  const got = await new Promise((res) => missing.stderr.on('data', res))
  assert.equal(typeof got, 'string')
})

test('exec: killSignal SIGKILL at the timeout; the abort reason is the cause; promisified abort rejects', async (t) => {
  const tree = withTree(t)
  const { err } = await call(exec, '"$H" root', { timeout: 300, killSignal: 'SIGKILL', env: tree.env() })
  assert.equal(err.signal, 'SIGKILL')
  assert.equal(err.killed, true)
  const ac = new AbortController()
  const p = util.promisify(exec)('"$H" aborted', { signal: ac.signal, env: tree.env() })
  await tree.waitPid('aborted')
  ac.abort('enough')
  await assert.rejects(p, (e) => e.name === 'AbortError' && e.cause === 'enough')
  assert.ok(await tree.allDead(['root', 'aborted'], 1000))
})

test('an exception thrown by the callback is an uncaught exception, as with child_process', () => {
  const out = require('child_process').spawnSync(process.execPath, ['-e', `
    process.on('uncaughtException', (e) => { console.log('uncaught', e.message); process.exit(0) })
    process.on('unhandledRejection', () => { console.log('rejection'); process.exit(1) })
    require(${JSON.stringify(require('path').join(__dirname, '..'))}).execFile('true', () => { throw new Error('boom') })
  `], { encoding: 'utf8', timeout: 20_000 })
  assert.equal(out.stdout.trim(), 'uncaught boom')
})
