'use strict'
// A run's tree never outlives what started it: a run whose promise is
// dropped and collected, process.exit() with live runs, Ctrl-C of Node.
// Each case runs in a child Node process; the tree's fate is asserted here.
const test = require('node:test')
const assert = require('node:assert/strict')
const path = require('path')
const { spawn: spawnNode } = require('child_process')
const { withTree, sleep } = require('./tree.js')

const INDEX = path.join(__dirname, '..', 'index.js')

function node(tree, script) {
  const child = spawnNode(process.execPath, ['--expose-gc', '-e', script], {
    // The marker under another name: the Node process (and the keeper it
    // forks) must not count as a member of the tree.
    env: { ...process.env, CORRAL_INDEX: INDEX, ...tree.env(), CORRAL_TEST_MARK: undefined, CT_MARK: tree.mark },
    stdio: ['ignore', 'inherit', 'inherit'],
  })
  const exited = new Promise((res) => child.on('exit', (code, signal) => res({ code, signal })))
  return { child, exited }
}

function alive(pid) {
  try {
    process.kill(pid, 0)
    return true
  } catch {
    return false
  }
}

const TREE = `['sh', '-c', 'setsid "$H" escaper & exec "$H" root'], { env: { PATH: process.env.PATH, H: process.env.H, CORRAL_TEST_DIR: process.env.CORRAL_TEST_DIR, CORRAL_TEST_MARK: process.env.CT_MARK } }`

test('a run whose promise is dropped and garbage-collected: its tree is killed', async (t) => {
  const tree = withTree(t)
  const { child, exited } = node(tree, `
    const { run } = require(process.env.CORRAL_INDEX)
    function start() { run(${TREE}) }  // the promise is dropped at once
    start()
    const fs = require('fs')
    const ready = () => ['escaper', 'root'].every((n) => fs.existsSync(process.env.CORRAL_TEST_DIR + '/' + n + '.pid'))
    const iv = setInterval(() => {
      if (!ready()) return
      clearInterval(iv)
      gc()
      setTimeout(() => gc(), 100)
      setTimeout(() => process.exit(0), 8000) // alive well after the check
    }, 10)
  `)
  await tree.waitPid('escaper')
  await tree.waitPid('root')
  assert.ok(await tree.allDead(['escaper', 'root'], 5000), 'the tree outlived its collected run')
  assert.ok(await tree.noneAlive(1000), `survivors: ${tree.survivors()}`)
  assert.ok(alive(child.pid), 'the Node process exited: this would be the exit case, not the GC one')
  child.kill('SIGKILL')
  await exited
})

test('a spawn() handle dropped with no stream open is collected: its tree is killed', async (t) => {
  const tree = withTree(t)
  const { child, exited } = node(tree, `
    const { spawn } = require(process.env.CORRAL_INDEX)
    function start() { spawn(${TREE.replace('} }', "}, stdin: 'ignore', stdout: 'ignore', stderr: 'ignore' }")}) }
    start()
    const fs = require('fs')
    const ready = () => ['escaper', 'root'].every((n) => fs.existsSync(process.env.CORRAL_TEST_DIR + '/' + n + '.pid'))
    const iv = setInterval(() => {
      if (!ready()) return
      clearInterval(iv)
      gc()
      setTimeout(() => gc(), 100)
      setTimeout(() => process.exit(0), 8000)
    }, 10)
  `)
  await tree.waitPid('escaper')
  await tree.waitPid('root')
  assert.ok(await tree.allDead(['escaper', 'root'], 5000), 'the tree outlived its collected handle')
  assert.ok(await tree.noneAlive(1000), `survivors: ${tree.survivors()}`)
  assert.ok(alive(child.pid))
  child.kill('SIGKILL')
  await exited
})

test('an awaited run is not collected (the tree lives until the run ends)', async (t) => {
  const tree = withTree(t)
  const { child, exited } = node(tree, `
    const { run } = require(process.env.CORRAL_INDEX)
    async function main() {
      const r = await run(['sh', '-c', 'exec "$H" root sleep 2'], { env: { PATH: process.env.PATH, H: process.env.H, CORRAL_TEST_DIR: process.env.CORRAL_TEST_DIR, CORRAL_TEST_MARK: process.env.CT_MARK } })
      process.exit(r.outcome === 'exited' && r.exitCode === 0 ? 0 : 3)
    }
    main()
    setInterval(() => gc(), 50).unref()
  `)
  await tree.waitPid('root')
  const { code } = await exited
  assert.equal(code, 0)
})

test('process.exit() with live runs: no tree left behind', async (t) => {
  const tree = withTree(t)
  const { exited } = node(tree, `
    const { run } = require(process.env.CORRAL_INDEX)
    const held = run(${TREE})
    const fs = require('fs')
    const iv = setInterval(() => {
      if (['escaper', 'root'].every((n) => fs.existsSync(process.env.CORRAL_TEST_DIR + '/' + n + '.pid'))) process.exit(0)
    }, 10)
  `)
  const { code } = await exited
  assert.equal(code, 0)
  assert.ok(tree.pid('escaper') && tree.pid('root'))
  assert.ok(await tree.allDead(['escaper', 'root'], 5000), 'the tree outlived process.exit()')
  assert.ok(await tree.noneAlive(1000), `survivors: ${tree.survivors()}`)
})

test('Ctrl-C (SIGINT) of Node with live runs: no tree left behind', async (t) => {
  const tree = withTree(t)
  const { child, exited } = node(tree, `
    const { run } = require(process.env.CORRAL_INDEX)
    globalThis.held = run(${TREE})
    setTimeout(() => {}, 30000)
  `)
  await tree.waitPid('escaper')
  await tree.waitPid('root')
  await sleep(100)
  child.kill('SIGINT')
  const { signal } = await exited
  assert.equal(signal, 'SIGINT')
  assert.ok(await tree.allDead(['escaper', 'root'], 5000), 'the tree outlived Node killed by SIGINT')
  assert.ok(await tree.noneAlive(1000), `survivors: ${tree.survivors()}`)
})

test('a worker thread that exits kills its own runs only', async (t) => {
  const tree = withTree(t)
  const { run } = require('..')
  const { Worker } = require('worker_threads')
  const env = tree.env()
  const mine = run(['sh', '-c', 'exec "$H" main'], { env, timeout: 20_000 })
  await tree.waitPid('main')
  const w = new Worker(`
    const { workerData } = require('worker_threads')
    const { run } = require(workerData.index)
    globalThis.held = run(['sh', '-c', 'exec "$H" worker'], { env: workerData.env })
    const fs = require('fs')
    const iv = setInterval(() => {
      if (fs.existsSync(workerData.env.CORRAL_TEST_DIR + '/worker.pid')) process.exit(0)
    }, 10)
  `, { eval: true, workerData: { index: INDEX, env } })
  await new Promise((res) => w.on('exit', res))
  assert.ok(tree.pid('worker'))
  assert.ok(await tree.allDead(['worker'], 5000), "the worker's run outlived it")
  assert.ok(tree.alive('main'), "the main thread's run was killed by the worker's exit")
  mine.job.cancel()
  assert.equal((await mine).outcome, 'cancelled')
  assert.ok(await tree.allDead(['main'], 1000))
})

test('enableSubreaper(): the subreaper tier holds a setsid escaper (in a child Node process)', async (t) => {
  const tree = withTree(t)
  const { exited } = node(tree, `
    const { run, enableSubreaper } = require(process.env.CORRAL_INDEX)
    enableSubreaper()
    run(['sh', '-c', 'setsid "$H" escaper & "$W" escaper; exec "$H" root'], {
      timeout: 1000, containment: 'subreaper',
      env: { PATH: process.env.PATH, H: process.env.H, W: process.env.W, CORRAL_TEST_DIR: process.env.CORRAL_TEST_DIR, CORRAL_TEST_MARK: process.env.CT_MARK },
    }).then((r) => {
      console.log(JSON.stringify({ outcome: r.outcome, containment: r.containment }))
      setTimeout(() => process.exit(0), 3000) // stay alive: the check is not the exit hook's
    })
  `)
  await tree.waitPid('escaper')
  await tree.waitPid('root')
  // Within the timeout plus slack, before the child's exit at +3 s.
  assert.ok(await tree.noneAlive(2500), `survivors: ${tree.survivors()}`)
  assert.equal((await exited).code, 0)
})
