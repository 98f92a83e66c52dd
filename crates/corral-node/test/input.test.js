'use strict'
// Bad input throws a TypeError/RangeError naming the option, before anything
// runs; CommonJS and ESM load the same module.
const test = require('node:test')
const assert = require('node:assert/strict')
const { execFileSync } = require('child_process')
const path = require('path')
const { run, spawn, execFile, exec } = require('..')
const { withTree, sleep } = require('./tree.js')

test('bad input to run/spawn throws before anything is spawned', async (t) => {
  const tree = withTree(t)
  const argv = ['sh', '-c', 'exec "$H" ran']
  const env = tree.env()
  const cases = [
    [() => run('ls'), TypeError, /"argv" argument must be an array/],
    [() => run([]), TypeError, /must name a program/],
    [() => run(['ls', 1]), TypeError, /"argv\[1\]"/],
    [() => run(['ls', 'a\0b']), TypeError, /null bytes/],
    [() => run(argv, { env, bogus: 1 }), TypeError, /Unknown option "bogus"/],
    [() => run(argv, { env, timeout: -1 }), RangeError, /"options.timeout"/],
    [() => run(argv, { env, timeout: '10' }), TypeError, /"options.timeout"/],
    [() => run(argv, { env, timeout: NaN }), RangeError, /"options.timeout"/],
    [() => run(argv, { env, killAfter: -5 }), RangeError, /"options.killAfter"/],
    [() => run(argv, { env, waitDelay: Infinity }), RangeError, /"options.waitDelay"/],
    [() => run(argv, { env, maxBuffer: 1.5 }), RangeError, /"options.maxBuffer"/],
    [() => run(argv, { env, killSignal: 'SIGFOO' }), TypeError, /Unknown signal: SIGFOO/],
    [() => run(argv, { env, containment: 'jail' }), TypeError, /"options.containment"/],
    [() => run(argv, { env, leftovers: 'some' }), TypeError, /"options.leftovers"/],
    [() => run(argv, { env, input: 42 }), TypeError, /"options.input"/],
    [() => run(argv, { env, encoding: 'klingon' }), TypeError, /"options.encoding"/],
    [() => run(argv, { env, signal: 'hello' }), TypeError, /"options.signal"/],
    [() => run(argv, { env, onStdout: 'x' }), TypeError, /"options.onStdout"/],
    [() => run(argv, { env, cwd: 7 }), TypeError, /"options.cwd"/],
    [() => run(argv, { env: 'x' }), TypeError, /"options.env"/],
    [() => run(argv, 'opts'), TypeError, /"options" argument/],
    [() => spawn(argv, { env, stdin: 'tty' }), TypeError, /"options.stdin"/],
    [() => execFile(5), TypeError, /"file" argument/],
    [() => execFile('sh', ['-c', 'exec "$H" ran'], { env, signal: 'hello' }, () => {}), TypeError, /"options.signal"/],
    [() => execFile('sh', ['-c', 'exec "$H" ran'], { env }, 'cb'), TypeError, /"callback"/],
    [() => exec('exec "$H" ran', { env, timeout: -1 }), RangeError, /"options.timeout"/],
    [() => exec('exec "$H" ran', { env, killSignal: 'NOPE' }), TypeError, /Unknown signal/],
  ]
  for (const [f, type, msg] of cases) {
    assert.throws(f, (e) => e instanceof type && msg.test(e.message), `${f}`)
  }
  const sig = (() => {
    try {
      execFile('true', [], { signal: 'hello' })
    } catch (e) {
      return e
    }
  })()
  assert.equal(sig.code, 'ERR_INVALID_ARG_TYPE')
  await sleep(300)
  assert.equal(tree.pid('ran'), null, 'something ran')
})

test('CommonJS and ESM give the same functions; types are shipped', () => {
  const dir = path.join(__dirname, '..')
  const out = execFileSync(process.execPath, ['--input-type=module', '-e', `
    import corral, { run, execFile } from ${JSON.stringify(path.join(dir, 'index.mjs'))}
    import { createRequire } from 'node:module'
    const cjs = createRequire(import.meta.url)(${JSON.stringify(path.join(dir, 'index.js'))})
    const r = await run(['echo', 'esm'])
    console.log(r.stdout.trim(), run === cjs.run, execFile === cjs.execFile, corral === cjs)
  `]).toString()
  assert.equal(out.trim(), 'esm true true true')
  assert.ok(require('fs').existsSync(path.join(dir, 'native.d.ts')))
})

test('every option of the generated RunOptions/ExecExtra/SpawnStdio is accepted; the declarations type-check', (t) => {
  const dir = path.join(__dirname, '..')
  const dts = require('fs').readFileSync(path.join(dir, 'native.d.ts'), 'utf8')
  const fields = (name) => {
    const body = dts.match(new RegExp(`export interface ${name} \\{([\\s\\S]*?)\\n\\}`))[1]
    return [...body.matchAll(/^ {2}(\w+)\??:/gm)].map((m) => m[1])
  }
  const runOpts = fields('RunOptions')
  assert.ok(runOpts.includes('timeout') && runOpts.includes('onStdout') && runOpts.includes('killAfter'))
  const unknown = (e) => /Unknown option/.test(e.message)
  for (const k of runOpts) {
    const o = { [k]: undefined }
    try {
      run(['true'], o)
    } catch (e) {
      assert.ok(!unknown(e), `run() rejects ${k}`)
    }
    if (!['onStdout', 'onStderr', 'input'].includes(k)) {
      try {
        spawn(['true'], { ...o, stdin: 'ignore', stdout: 'ignore', stderr: 'ignore' }).kill()
      } catch (e) {
        assert.ok(!unknown(e), `spawn() rejects ${k}`)
      }
    }
  }
  for (const k of fields('ExecExtra')) execFile('true', [], { [k]: undefined })
  for (const k of fields('SpawnStdio')) spawn(['true'], { [k]: 'ignore' }).kill()
  const tsc = path.join(dir, 'node_modules', '.bin', 'tsc')
  if (!require('fs').existsSync(tsc)) return t.skip('typescript is not installed (npm ci)')
  execFileSync(tsc, ['--noEmit', '--strict', '--types', 'node', '--module', 'commonjs', '--moduleResolution', 'node',
    '--target', 'es2022', path.join(__dirname, 'types', 'use.ts')], { cwd: dir })
})
