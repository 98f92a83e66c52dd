// Public API of the npm package `corral`: the functions, over the shapes
// generated from the Rust side.
import type { EventEmitter } from 'node:events'
import type { Readable, Writable } from 'node:stream'

import type { RunOptions, SandboxOptions, SpawnStdio, ExecExtra, RunResult, Report } from './native'

// The option, result and report shapes are generated from the Rust side
// (src/types.rs -> native.d.ts by `napi build`).
export type { RunOptions, SandboxOptions, RunResult, Report }

export type Outcome = RunResult['outcome']
export type Containment = NonNullable<RunOptions['containment']>

export type SpawnOptions = Omit<RunOptions, 'input' | 'onStdout' | 'onStderr'> & SpawnStdio
export type ExecOptions = Omit<RunOptions, 'onStdout' | 'onStderr'> & ExecExtra

/** A result whose stdout/stderr type follows the encoding. */
export type Result<T = string | Buffer> = Omit<RunResult, 'stdout' | 'stderr'> & { stdout: T; stderr: T }

export function run(argv: string[], options?: RunOptions & { encoding?: BufferEncoding }): Promise<Result<string>>
export function run(argv: string[], options: RunOptions & { encoding: 'buffer' | null }): Promise<Result<Buffer>>

export class Process {
  readonly pid: number
  readonly stdin: Writable | null
  readonly stdout: Readable | null
  readonly stderr: Readable | null
  kill(signal?: NodeJS.Signals | number): boolean
  wait(): Promise<Result>
}

export function spawn(argv: string[], options?: SpawnOptions): Process

export interface ExecError extends Error {
  code?: number | string | null
  killed?: boolean
  signal?: string | null
  cmd?: string
  report?: Report
  stdout?: string | Buffer
  stderr?: string | Buffer
}

/** A stand-in for a ChildProcess: events `spawn`, `exit`, `close`, `error`. */
export interface ExecChild extends EventEmitter {
  readonly pid: number | undefined
  killed: boolean
  exitCode: number | null
  signalCode: string | null
  readonly stdin: null
  /** Receives the captured output when the run has ended. */
  readonly stdout: Readable
  readonly stderr: Readable
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

export interface SessionOptions {
  cwd?: string | URL
  /** Variables added to this process's environment for the session. */
  env?: Record<string, string>
  envClear?: boolean
  shell?: string
  containment?: Containment
  requireCrashSafety?: boolean
}

export interface SessionRunOptions {
  /** Milliseconds. */
  timeout?: number
  idleTimeout?: number
  maxOutput?: number
  maxBuffer?: number
  waitDelay?: number
  encoding?: BufferEncoding | 'buffer' | null
}

export interface SessionJob {
  pid: number
  command: string
}

export type SessionResult<T = string | Buffer> = Result<T> & {
  sessionId: string
  jobs: SessionJob[]
  sessionEnded: string | null
}

/** A persistent shell session: state carries over, each command is contained and bounded on its own. */
export class Session {
  constructor(options?: SessionOptions)
  readonly id: string
  readonly ended: string | null
  run(command: string, options?: SessionRunOptions & { encoding?: BufferEncoding }): Promise<SessionResult<string>>
  run(command: string, options: SessionRunOptions & { encoding: 'buffer' | null }): Promise<SessionResult<Buffer>>
  jobs(): SessionJob[]
  killJob(pid: number): boolean
  close(): Promise<void>
}
