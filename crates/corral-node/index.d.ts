// Public API of the npm package `corral`. The native layer's declarations
// (native.d.ts) are generated from the Rust side by `napi build`.
import type { Readable, Writable } from 'node:stream'

export type Outcome =
  | 'exited' | 'signaled' | 'timed_out' | 'cancelled' | 'output_held'
  | 'spawn_failed' | 'containment_failed' | 'cleanup_failed'

export type Containment = 'auto' | 'cgroup' | 'pid-namespace' | 'subreaper' | 'process-group' | 'job-object'

/** The full report: the library's serialisation (docs/report-schema.json). */
export interface Report {
  outcome: Outcome
  exit_code: number | null
  signal: number | null
  signal_name: string | null
  containment: 'process_group' | 'cgroup' | 'subreaper' | 'pid_namespace' | 'job_object' | null
  containment_note: string | null
  crash_safe: boolean | null
  crash_safety_note: string | null
  killed: number
  kept: number
  duration_ms: number
  stdout_bytes: number | null
  stderr_bytes: number | null
  error: string | null
  pid: number | null
  signals_sent: number[]
  survivors: number[]
  timings_ms: { spawn: number; root_exit: number | null; output_closed: number | null; cleanup_done: number } | null
  usage: { cpu_user_ms: number | null; cpu_system_ms: number | null; memory_peak: number | null; pids_peak: number | null } | null
  limits_hit: string[]
}

export interface CommonOptions {
  timeout?: number
  killSignal?: NodeJS.Signals | number
  killAfter?: number
  waitDelay?: number
  cwd?: string | URL
  env?: NodeJS.ProcessEnv
  signal?: AbortSignal
  containment?: Containment
  leftovers?: 'keep-on-success' | 'kill' | 'keep'
  requireCrashSafety?: boolean
  memoryMax?: number
  pidsMax?: number
}

export interface RunOptions extends CommonOptions {
  input?: string | Buffer | Uint8Array
  encoding?: BufferEncoding | 'buffer' | null
  maxBuffer?: number
  onStdout?: (chunk: Buffer) => void
  onStderr?: (chunk: Buffer) => void
}

export interface Result<T = string | Buffer> {
  outcome: Outcome
  exitCode: number | null
  signal: string | null
  stdout: T
  stderr: T
  killed: number
  kept: number
  durationMs: number
  containment: Report['containment']
  crashSafe: boolean | null
  pid: number | null
  error: string | null
  report: Report
}

export function run(argv: string[], options?: RunOptions & { encoding?: BufferEncoding }): Promise<Result<string>>
export function run(argv: string[], options: RunOptions & { encoding: 'buffer' | null }): Promise<Result<Buffer>>

export type StdioMode = 'pipe' | 'ignore' | 'inherit'

export interface SpawnOptions extends CommonOptions {
  stdin?: StdioMode
  stdout?: StdioMode
  stderr?: StdioMode
  encoding?: BufferEncoding | 'buffer' | null
  maxBuffer?: number
}

export class Process {
  readonly pid: number
  readonly stdin: Writable | null
  readonly stdout: Readable | null
  readonly stderr: Readable | null
  kill(signal?: NodeJS.Signals | number): boolean
  wait(): Promise<Result>
}

export function spawn(argv: string[], options?: SpawnOptions): Process

export interface ExecOptions extends CommonOptions {
  encoding?: BufferEncoding | 'buffer' | null
  maxBuffer?: number
  shell?: boolean | string
  input?: string | Buffer | Uint8Array
  windowsHide?: boolean
  windowsVerbatimArguments?: boolean
}

export interface ExecError extends Error {
  code?: number | string | null
  killed?: boolean
  signal?: string | null
  cmd?: string
  report?: Report
  stdout?: string | Buffer
  stderr?: string | Buffer
}

export interface ExecChild {
  readonly pid: number | undefined
  killed: boolean
  kill(signal?: NodeJS.Signals | number): boolean
}

export type ExecCallback = (error: ExecError | null, stdout: string | Buffer, stderr: string | Buffer) => void

export function execFile(file: string, callback?: ExecCallback): ExecChild
export function execFile(file: string, args: readonly string[] | null | undefined, callback?: ExecCallback): ExecChild
export function execFile(file: string, options: ExecOptions | null | undefined, callback?: ExecCallback): ExecChild
export function execFile(file: string, args: readonly string[] | null | undefined, options: ExecOptions | null | undefined, callback?: ExecCallback): ExecChild
export namespace execFile {
  function __promisify__(file: string, args?: readonly string[] | null, options?: ExecOptions | null): Promise<{ stdout: string | Buffer; stderr: string | Buffer }> & { child: ExecChild }
}

export function exec(command: string, callback?: ExecCallback): ExecChild
export function exec(command: string, options: ExecOptions | null | undefined, callback?: ExecCallback): ExecChild
export namespace exec {
  function __promisify__(command: string, options?: ExecOptions | null): Promise<{ stdout: string | Buffer; stderr: string | Buffer }> & { child: ExecChild }
}

export const enableSubreaper: typeof import('./native').enableSubreaper
export const raiseNofileLimit: typeof import('./native').raiseNofileLimit
