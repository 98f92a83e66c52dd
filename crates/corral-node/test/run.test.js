'use strict'
// run(): real process trees, each helper's fate asserted.
const test = require('node:test')
const assert = require('node:assert/strict')
const fs = require('fs')
const path = require('path')
const { run, spawn, raiseNofileLimit } = require('..')
const { withTree, sleep } = require('./tree.js')

test('exit code, output and the report from the library', async () => {
  const r = await run(['sh', '-c', 'echo out; echo err >&2; exit 3'])
  assert.equal(r.outcome, 'exited')
  assert.equal(r.exitCode, 3)
  assert.equal(r.signal, null)
  assert.equal(r.stdout, 'out\n')
  assert.equal(r.stderr, 'err\n')
  assert.equal(r.report.exit_code, 3)
  assert.equal(r.report.stdout_bytes, 4)
  assert.equal(r.durationMs, r.report.duration_ms)
  assert.equal(r.containment, r.report.containment)
  assert.equal(typeof r.crashSafe, 'boolean')
  assert.ok(r.pid > 0)
})

test('timeout kills the whole tree, a setsid escaper included', async (t) => {
  const tree = withTree(t)
  const t0 = Date.now()
  const r = await run(['sh', '-c', 'setsid "$H" escaper & "$W" escaper; exec "$H" root'], { timeout: 1000, env: tree.env() })
  const took = Date.now() - t0
  assert.equal(r.outcome, 'timed_out')
  assert.equal(r.signal, 'SIGKILL')
  assert.equal(r.exitCode, null)
  assert.ok(took >= 1000 && took < 6000, `took ${took} ms`)
  assert.ok(tree.pid('escaper') && tree.pid('root'))
  assert.ok(await tree.allDead(['escaper', 'root'], 1000), 'the escaper or the root survived')
  assert.ok(await tree.noneAlive(1000))
})

test('a grandchild holding stdout cannot keep run from returning', async (t) => {
  const tree = withTree(t)
  const t0 = Date.now()
  const r = await run(['sh', '-c', '"$H" holder & "$W" holder; echo done'], { waitDelay: 300, env: tree.env() })
  const took = Date.now() - t0
  assert.equal(r.outcome, 'output_held')
  assert.equal(r.exitCode, 0) // the root's own code, as report.exit_code
  assert.equal(r.stdout, 'done\n')
  assert.equal(r.killed, 1)
  assert.ok(took < 5000, `took ${took} ms`)
  assert.ok(tree.pid('holder'))
  assert.ok(await tree.allDead(['holder'], 1000), 'the holder survived')
})

test('a TERM-ignorer gets SIGKILL after killAfter', async (t) => {
  const tree = withTree(t)
  const t0 = Date.now()
  const r = await run(['sh', '-c', 'trap "" TERM; "$H" ignorer & "$W" ignorer; exec "$H" root'], {
    timeout: 1000, killSignal: 'SIGTERM', killAfter: 700, env: tree.env(),
  })
  const took = Date.now() - t0
  assert.equal(r.outcome, 'timed_out')
  assert.deepEqual(r.report.signals_sent.slice(0, 2), [15, 9])
  assert.ok(took >= 1700 && took < 7000, `took ${took} ms`)
  assert.ok(tree.pid('ignorer') && tree.pid('root'))
  assert.ok(await tree.allDead(['ignorer', 'root'], 1000))
})

test('killSignal without killAfter: a 10 s grace (the TERM-obeying tree ends at once)', async (t) => {
  const tree = withTree(t)
  const r = await run(['sh', '-c', 'exec "$H" root'], { timeout: 200, killSignal: 'TERM', env: tree.env() })
  assert.equal(r.outcome, 'timed_out')
  assert.equal(r.signal, 'SIGTERM')
  assert.ok(r.durationMs < 5000)
  assert.ok(await tree.allDead(['root'], 1000))
})

test('an AbortSignal cancels the run: tree killed, outcome cancelled', async (t) => {
  const tree = withTree(t)
  const ac = new AbortController()
  const p = run(['sh', '-c', 'setsid "$H" escaper & exec "$H" root'], { signal: ac.signal, env: tree.env() })
  await tree.waitPid('escaper')
  await tree.waitPid('root')
  ac.abort()
  const r = await p
  assert.equal(r.outcome, 'cancelled')
  assert.ok(await tree.allDead(['escaper', 'root'], 1000))
  // Already aborted: nothing runs.
  const r2 = await run(['sh', '-c', 'exec "$H" never'], { signal: AbortSignal.abort(), env: tree.env() })
  assert.equal(r2.outcome, 'cancelled')
  await sleep(200)
  assert.equal(tree.pid('never'), null)
})

test('maxBuffer bounds the capture per stream (head and tail kept)', async () => {
  const r = await run(['sh', '-c', 'head -c 100000 /dev/zero | tr "\\0" a; printf END'], { maxBuffer: 1000 })
  assert.equal(r.outcome, 'exited')
  assert.equal(r.stdout.length, 1000)
  assert.ok(r.stdout.endsWith('END'))
  assert.equal(r.report.stdout_bytes, 100003)
})

test('onStdout/onStderr: chunks in order, together exactly the stream; stdout still captured', async () => {
  const out = []
  const err = []
  const r = await run(['sh', '-c', 'head -c 3000000 /dev/urandom | tee /dev/stderr'], {
    encoding: 'buffer', maxBuffer: 4_000_000,
    onStdout: (c) => out.push(c), onStderr: (c) => err.push(c),
  })
  assert.equal(r.outcome, 'exited')
  assert.ok(out.every((c) => Buffer.isBuffer(c)))
  const o = Buffer.concat(out)
  assert.equal(o.length, 3_000_000)
  assert.ok(o.equals(r.stdout))
  assert.ok(Buffer.concat(err).equals(r.stderr))
  assert.ok(o.equals(r.stderr))
})

test('stdin input: string, Buffer, Uint8Array; absent is the null device', async () => {
  assert.equal((await run(['cat'], { input: 'data\n' })).stdout, 'data\n')
  assert.equal((await run(['cat'], { input: Buffer.from('buf') })).stdout, 'buf')
  assert.equal((await run(['cat'], { input: new Uint8Array([104, 105]) })).stdout, 'hi')
  assert.equal((await run(['cat'])).stdout, '')
})

test('cwd and env (env replaces)', async () => {
  const r = await run(['sh', '-c', 'pwd; echo "$FOO-$HOME"'], { cwd: '/tmp', env: { FOO: 'bar', PATH: process.env.PATH } })
  assert.equal(r.stdout, '/tmp\nbar-\n')
})

test('a spawn failure resolves with spawn_failed', async () => {
  const r = await run(['/nonexistent/program'])
  assert.equal(r.outcome, 'spawn_failed')
  assert.equal(r.exitCode, null)
  assert.match(r.report.error, /No such file/)
})

test('spawn: pid at once, stdin and stdout streams, wait()', async () => {
  const p = spawn(['sh', '-c', 'cat; echo bye >&2'])
  assert.ok(p.pid > 0)
  const chunks = []
  p.stdout.on('data', (c) => chunks.push(c))
  const errs = []
  p.stderr.on('data', (c) => errs.push(c))
  p.stdin.write('hello ')
  p.stdin.end('world')
  const r = await p.wait()
  await new Promise((res) => (p.stdout.readableEnded ? res() : p.stdout.on('end', res)))
  assert.equal(r.outcome, 'exited')
  assert.equal(r.exitCode, 0)
  assert.equal(r.pid, p.pid)
  assert.equal(Buffer.concat(chunks).toString(), 'hello world')
  assert.equal(r.report.stdout_bytes, 11)
})

test('spawn: kill() kills the tree (outcome cancelled)', async (t) => {
  const tree = withTree(t)
  const p = spawn(['sh', '-c', 'setsid "$H" escaper & exec "$H" root'], { env: tree.env(), stdin: 'ignore' })
  await tree.waitPid('escaper')
  await tree.waitPid('root')
  assert.equal(p.pid, tree.pid('root'))
  p.kill()
  const r = await p.wait()
  assert.equal(r.outcome, 'cancelled')
  assert.equal(r.signal, 'SIGKILL')
  assert.ok(await tree.allDead(['escaper', 'root'], 1000))
})

test('300 MB of output with a small maxBuffer: memory stays bounded', async () => {
  const before = process.memoryUsage().rss
  let peak = before
  const iv = setInterval(() => (peak = Math.max(peak, process.memoryUsage().rss)), 20)
  const r = await run(['head', '-c', '300000000', '/dev/zero'], { maxBuffer: 64 * 1024, encoding: 'buffer' })
  clearInterval(iv)
  peak = Math.max(peak, process.memoryUsage().rss)
  assert.equal(r.outcome, 'exited')
  assert.equal(r.report.stdout_bytes, 300_000_000)
  assert.equal(r.stdout.length, 64 * 1024)
  assert.ok(peak - before < 64 * 1024 * 1024, `RSS grew by ${((peak - before) / 1048576).toFixed(1)} MiB`)
})

function threads() {
  return fs.readdirSync('/proc/self/task').length
}

test('1,000 concurrent runs on a constant number of threads; the event loop never blocks', async (t) => {
  // Each live run holds a few descriptors (pidfd, pipes, its cgroup).
  const limit = raiseNofileLimit()
  if (limit !== null && limit < 8192) return t.skip(`needs RLIMIT_NOFILE >= 8192 (hard limit ${limit})`)
  await run(['true']) // the shared runtime thread exists from here on
  const before = threads()
  let peakThreads = before
  const runs = []
  for (let i = 0; i < 1000; i++) {
    runs.push(run(['sh', '-c', `sleep 1; echo ${i}`], { timeout: 60_000 }))
    if (i % 100 === 0) peakThreads = Math.max(peakThreads, threads())
  }
  // While the runs are supervised (spawned, waited for, reaped, their
  // output read), the event loop keeps turning: timers fire on time.
  let maxGap = 0
  let last = Date.now()
  const iv = setInterval(() => {
    const now = Date.now()
    maxGap = Math.max(maxGap, now - last)
    last = now
  }, 10)
  const sampler = setInterval(() => (peakThreads = Math.max(peakThreads, threads())), 50)
  const rs = await Promise.all(runs)
  clearInterval(sampler)
  clearInterval(iv)
  rs.forEach((r, i) => {
    assert.equal(r.outcome, 'exited', `run ${i}: ${r.outcome} ${r.report.error}`)
    assert.equal(r.stdout, `${i}\n`)
  })
  assert.equal(peakThreads, before, `threads went from ${before} to ${peakThreads}`)
  assert.equal(threads(), before)
  assert.ok(maxGap < 1000, `the event loop stalled for ${maxGap} ms`)
})

test('containment choices: cgroup and pid-namespace hold a setsid escaper; the names are the report\'s', async (t) => {
  for (const [choice, name] of [['cgroup', 'cgroup'], ['pid-namespace', 'pid_namespace']]) {
    const tree = withTree(t)
    const r = await run(['sh', '-c', 'setsid "$H" escaper & "$W" escaper; exec "$H" root'], {
      timeout: 1000, containment: choice, env: tree.env(),
    })
    if (r.outcome === 'containment_failed') {
      t.diagnostic(`${choice} not available here: ${r.report.error}`)
      continue
    }
    assert.equal(r.outcome, 'timed_out', `${choice}: ${r.report.error}`)
    assert.equal(r.containment, name)
    assert.ok(tree.pid('escaper'))
    // By marker, not pid file: in a PID namespace the files hold inner pids.
    assert.ok(await tree.noneAlive(1000), `${choice}: ${tree.survivors()} survived`)
  }
  const pg = await run(['true'], { containment: 'process-group' })
  assert.equal(pg.containment, 'process_group')
  const sr = await run(['true'], { containment: 'subreaper' })
  assert.equal(sr.outcome, 'containment_failed') // never made a subreaper unless asked
})
