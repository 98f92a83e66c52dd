import { run, spawn, execFile, exec, type Result } from '../..'
import { promisify } from 'node:util'
async function main() {
  const r = await run(['ls'], { timeout: 1000, killSignal: 'SIGTERM', onStdout: (c) => c.length, containment: 'cgroup' })
  const code: number | null = r.exitCode
  const s: string = r.stdout
  const b = await run(['ls'], { encoding: 'buffer' })
  const buf: Buffer = b.stdout
  const p = spawn(['cat'], { stdin: 'pipe' })
  p.stdin?.write('x')
  const w: Result = await p.wait()
  execFile('ls', ['-l'], { timeout: 1 }, (err, out) => { if (err) console.log(err.code, err.report?.outcome) })
  const ch = exec('echo', (err) => {})
  ch.on('close', (code: number | null) => code)
  ch.stdout.on('data', (d: string) => d)
  const { stdout } = await promisify(execFile)('ls', ['-l'])
  const l = await run(['yes'], { idleTimeout: 500, maxOutput: 1000 })
  const kind: 'deadline' | 'idle' | null = l.timeoutKind
  const capped: boolean = l.outcome === 'output_limit' && l.report.timeout_kind === null
  const boxed = await run(['true'], { sandbox: { allowWrite: ['/tmp'], denyRead: ['/etc'], network: 'loopback' } })
  const refused: boolean = boxed.outcome === 'sandbox_failed'
  await run(['true'], { sandbox: true })
  console.log(kind, capped, refused)
  console.log(code, s, buf, w, stdout, r.report.timings_ms?.spawn)
}
main()
