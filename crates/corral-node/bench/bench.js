'use strict'
// corral's run/execFile against child_process.execFile, side by side in one
// process (asserts nothing about speed; fails only if a run goes wrong).
//
//   node bench/bench.js [--quick]
//
// 1. `true`, N times: run() and corral's execFile vs child_process.execFile.
// 2. held output: `sh -c "sleep 3 & echo hi"` — corral returns after the
//    wait delay (the holder killed); child_process waits for the holder
//    (bounded here by its timeout, which kills only the shell).
// 3. 300 MB of output: run() with a 1 MiB maxBuffer vs child_process.execFile
//    with a maxBuffer large enough to take it all (time, peak RSS).
const cp = require('child_process')
const util = require('util')
const corral = require('..')

const quick = process.argv.includes('--quick')
const N = quick ? 50 : 500
const BIG = quick ? 30_000_000 : 300_000_000

const execFileP = util.promisify(cp.execFile)
const corralExecFileP = util.promisify(corral.execFile)

async function timeIt(label, n, f) {
  const t0 = process.hrtime.bigint()
  for (let i = 0; i < n; i++) await f()
  const ms = Number(process.hrtime.bigint() - t0) / 1e6
  console.log(`${label.padEnd(44)} ${(ms / n).toFixed(3).padStart(9)} ms/run`)
  return ms / n
}

function peakRss(f) {
  return async () => {
    let peak = process.memoryUsage().rss
    const iv = setInterval(() => (peak = Math.max(peak, process.memoryUsage().rss)), 5)
    const t0 = process.hrtime.bigint()
    await f()
    const ms = Number(process.hrtime.bigint() - t0) / 1e6
    clearInterval(iv)
    peak = Math.max(peak, process.memoryUsage().rss)
    return { ms, peakMiB: peak / 1048576 }
  }
}

async function main() {
  console.log(`corral Node benchmark (${quick ? 'quick' : 'full'}): node ${process.version}`)
  const a = await timeIt('corral.run(["true"])', N, async () => {
    const r = await corral.run(['true'])
    if (r.outcome !== 'exited') throw new Error(`run: ${r.outcome}`)
  })
  const b = await timeIt('corral.execFile("true")', N, () => corralExecFileP('true'))
  const c = await timeIt('child_process.execFile("true")', N, () => execFileP('true'))
  console.log(`ratio run/child_process ${(a / c).toFixed(2)}, execFile/child_process ${(b / c).toFixed(2)}`)

  const held = 'sleep 3 & echo hi'
  const h1 = await timeIt('held output: corral.run (waitDelay 200 ms)', 1, async () => {
    const r = await corral.run(['sh', '-c', held], { waitDelay: 200 })
    if (r.outcome !== 'output_held') throw new Error(`held: ${r.outcome}`)
  })
  const h2 = await timeIt('held output: child_process.execFile (timeout 2 s)', 1, () =>
    execFileP('sh', ['-c', held], { timeout: 2000 }).catch(() => {}),
  )
  console.log(`held output: corral ${h1.toFixed(0)} ms vs child_process ${h2.toFixed(0)} ms (its holder is left running until it exits)`)

  const big = await peakRss(async () => {
    const r = await corral.run(['head', '-c', String(BIG), '/dev/zero'], { maxBuffer: 1 << 20, encoding: 'buffer' })
    if (r.report.stdout_bytes !== BIG) throw new Error(`big: ${r.report.stdout_bytes}`)
  })()
  const bigCp = await peakRss(async () => {
    const { stdout } = await execFileP('head', ['-c', String(BIG), '/dev/zero'], { maxBuffer: BIG * 2, encoding: 'buffer' })
    if (stdout.length !== BIG) throw new Error('big cp')
  })()
  console.log(`${BIG / 1e6} MB: corral.run ${big.ms.toFixed(0)} ms, peak RSS ${big.peakMiB.toFixed(0)} MiB; ` +
    `child_process.execFile ${bigCp.ms.toFixed(0)} ms, peak RSS ${bigCp.peakMiB.toFixed(0)} MiB`)
}

main().then(
  () => process.exit(0),
  (e) => {
    console.error(e)
    process.exit(1)
  },
)
