'use strict'
// corral for Node.js: a thin shell over the corral library (native.js, the
// napi-rs addon). This file checks options (bad input throws before anything
// runs), shapes the library's report into a result or a child_process-style
// error, and wires AbortSignals and streams. No lifecycle logic lives here:
// deadlines, grace, wait delay, tree kill and cleanup are the library's.

const fs = require('fs')
const path = require('path')
const { EventEmitter } = require('events')
const net = require('net')
const { Readable } = require('stream')
const util = require('util')
const native = require('./native.js')

// ---------------------------------------------------------------------------
// Input checks: TypeError / RangeError naming the option, as Node's own.

function typeError(msg) {
  const e = new TypeError(msg)
  e.code = 'ERR_INVALID_ARG_TYPE'
  return e
}

function rangeError(msg) {
  const e = new RangeError(msg)
  e.code = 'ERR_OUT_OF_RANGE'
  return e
}

function valueError(msg) {
  const e = new TypeError(msg)
  e.code = 'ERR_INVALID_ARG_VALUE'
  return e
}

function checkString(v, name) {
  if (typeof v !== 'string') throw typeError(`The "${name}" argument must be of type string. Received ${show(v)}`)
  if (v.includes('\0')) throw valueError(`The "${name}" argument must be a string without null bytes. Received ${show(v)}`)
  return v
}

function show(v) {
  if (v === null) return 'null'
  if (typeof v === 'function') return `function ${v.name || '<anonymous>'}`
  if (typeof v === 'object') return `an instance of ${v.constructor ? v.constructor.name : 'Object'}`
  return `type ${typeof v} (${util.inspect(v)})`
}

function checkMs(v, name, { allowInfinity = false } = {}) {
  if (v === undefined || v === null) return undefined
  if (typeof v !== 'number') throw typeError(`The "options.${name}" property must be of type number. Received ${show(v)}`)
  if (Number.isNaN(v) || v < 0 || (!allowInfinity && !Number.isFinite(v))) {
    throw rangeError(`The value of "options.${name}" is out of range. It must be a non-negative number of milliseconds. Received ${v}`)
  }
  return v
}

function checkBytes(v, name) {
  if (v === undefined || v === null) return undefined
  if (typeof v !== 'number') throw typeError(`The "options.${name}" property must be of type number. Received ${show(v)}`)
  if (Number.isNaN(v) || v < 0 || (Number.isFinite(v) && !Number.isInteger(v))) {
    throw rangeError(`The value of "options.${name}" is out of range. It must be a non-negative integer or Infinity. Received ${v}`)
  }
  return v
}

const SIGNALS = require('os').constants.signals

function checkSignal(v, name) {
  if (v === undefined || v === null) return undefined
  if (typeof v === 'number') {
    if (!Number.isInteger(v) || !Object.values(SIGNALS).includes(v)) throw rangeError(`The value of "${name}" is out of range. Unknown signal: ${v}`)
    return String(v)
  }
  if (typeof v !== 'string') throw typeError(`The "${name}" argument must be of type string or number. Received ${show(v)}`)
  const up = v.toUpperCase()
  const full = up.startsWith('SIG') ? up : `SIG${up}`
  if (!(full in SIGNALS)) {
    const e = new TypeError(`Unknown signal: ${v}`)
    e.code = 'ERR_UNKNOWN_SIGNAL'
    throw e
  }
  return full
}

function checkAbortSignal(v, name) {
  if (v === undefined) return undefined
  if (v === null || typeof v !== 'object' || !('aborted' in v) || typeof v.addEventListener !== 'function') {
    throw typeError(`The "${name}" property must be an instance of AbortSignal. Received ${show(v)}`)
  }
  return v
}

const CONTAINMENTS = ['auto', 'cgroup', 'pid-namespace', 'subreaper', 'process-group', 'job-object']
const LEFTOVERS = ['keep-on-success', 'kill', 'keep']

function checkChoice(v, name, choices) {
  if (v === undefined || v === null) return undefined
  if (typeof v !== 'string') throw typeError(`The "options.${name}" property must be of type string. Received ${show(v)}`)
  const norm = v.replace(/_/g, '-')
  if (!choices.includes(norm)) throw valueError(`The "options.${name}" property must be one of ${choices.map((c) => `'${c}'`).join(', ')}. Received '${v}'`)
  return norm
}

function checkFunction(v, name) {
  if (v === undefined || v === null) return undefined
  if (typeof v !== 'function') throw typeError(`The "options.${name}" property must be of type function. Received ${show(v)}`)
  return v
}

function checkEnv(env) {
  if (env === undefined || env === null) return undefined
  if (typeof env !== 'object') throw typeError(`The "options.env" property must be of type object. Received ${show(env)}`)
  const flat = []
  for (const key of Object.keys(env)) {
    const value = env[key]
    if (value === undefined) continue
    // As child_process: values are converted to strings.
    const k = checkString(key, `options.env key`)
    const s = checkString(String(value), `options.env['${key}']`)
    if (k.includes('=') || k === '') throw valueError(`The "options.env" key ${util.inspect(k)} is not a valid variable name`)
    flat.push(k, s)
  }
  return flat
}

function checkCwd(cwd) {
  if (cwd === undefined || cwd === null) return undefined
  if (cwd instanceof URL) cwd = require('url').fileURLToPath(cwd)
  return checkString(cwd, 'options.cwd')
}

function checkInput(v) {
  if (v === undefined || v === null) return undefined
  if (typeof v === 'string') return Buffer.from(v)
  if (Buffer.isBuffer(v)) return v
  if (v instanceof Uint8Array) return Buffer.from(v.buffer, v.byteOffset, v.byteLength)
  throw typeError(`The "options.input" property must be of type string or an instance of Buffer or Uint8Array. Received ${show(v)}`)
}

function checkEncoding(v) {
  if (v === undefined) return 'utf8'
  if (v === null || v === 'buffer') return 'buffer'
  if (typeof v !== 'string' || !Buffer.isEncoding(v)) throw valueError(`The "options.encoding" property must be 'buffer' or a Buffer encoding. Received ${util.inspect(v)}`)
  return v
}

function checkOptions(opts, known, what) {
  if (opts === undefined || opts === null) return {}
  if (typeof opts !== 'object' || Array.isArray(opts)) throw typeError(`The "options" argument must be of type object. Received ${show(opts)}`)
  for (const k of Object.keys(opts)) {
    if (!known.has(k)) throw typeError(`Unknown option "${k}" for ${what}() (known: ${[...known].join(', ')})`)
  }
  return opts
}

function checkArgv(argv, name = 'argv') {
  if (!Array.isArray(argv)) throw typeError(`The "${name}" argument must be an array of strings. Received ${show(argv)}`)
  if (argv.length === 0) throw valueError(`The "${name}" argument must name a program (it is empty)`)
  argv.forEach((a, i) => checkString(a, `${name}[${i}]`))
  if (argv[0] === '') throw valueError(`The "${name}[0]" argument must not be empty`)
  return argv
}

const COMMON = ['timeout', 'idleTimeout', 'maxOutput', 'killSignal', 'killAfter', 'waitDelay', 'cwd', 'env', 'signal', 'containment', 'leftovers', 'requireCrashSafety', 'memoryMax', 'pidsMax', 'sandbox']

const NETWORKS = ['none', 'loopback', 'host']
const SANDBOX_KEYS = new Set(['allowWrite', 'denyRead', 'network', 'allow_write', 'deny_read'])

// `sandbox`: true (the default policy), false/undefined (none), or
// { allowWrite, denyRead, network } (snake_case keys accepted too); paths
// resolved against the current directory and required to exist.
function checkSandbox(v) {
  if (v === undefined || v === null || v === false) return undefined
  if (v === true) return { sandbox: true }
  if (typeof v !== 'object' || Array.isArray(v)) throw typeError(`The "options.sandbox" property must be a boolean or an object. Received ${show(v)}`)
  for (const k of Object.keys(v)) {
    if (!SANDBOX_KEYS.has(k)) throw typeError(`Unknown key "${k}" in options.sandbox (known: allowWrite, denyRead, network)`)
  }
  const paths = (camel, snake) => {
    if (v[camel] !== undefined && v[snake] !== undefined) throw typeError(`options.sandbox: give ${camel} or ${snake}, not both`)
    const list = v[camel] ?? v[snake]
    if (list === undefined || list === null) return undefined
    if (!Array.isArray(list)) throw typeError(`The "options.sandbox.${camel}" property must be an array of paths. Received ${show(list)}`)
    return list.map((p, i) => {
      if (p instanceof URL) p = require('url').fileURLToPath(p)
      const s = checkString(p, `options.sandbox.${camel}[${i}]`)
      if (s === '') throw valueError(`The "options.sandbox.${camel}[${i}]" path must not be empty`)
      const abs = path.resolve(s)
      if (!fs.existsSync(abs)) throw valueError(`The "options.sandbox.${camel}[${i}]" path ${util.inspect(abs)} does not exist (a sandbox policy names existing paths)`)
      return abs
    })
  }
  const n = { sandbox: true }
  const allow = paths('allowWrite', 'allow_write')
  const deny = paths('denyRead', 'deny_read')
  if (allow) n.sandboxAllowWrite = allow
  if (deny) n.sandboxDenyRead = deny
  if (v.network !== undefined && v.network !== null) {
    if (!NETWORKS.includes(v.network)) throw valueError(`The "options.sandbox.network" property must be one of 'none', 'loopback', 'host'. Received ${util.inspect(v.network)}`)
    n.sandboxNetwork = v.network
  }
  return n
}

// The options the native side takes, from checked user options.
function nativeOptions(o, defaults) {
  const killSignal = checkSignal(o.killSignal, 'options.killSignal') ?? defaults.killSignal
  let killAfter = checkMs(o.killAfter, 'killAfter')
  if (killAfter === undefined && killSignal !== undefined && killSignal !== 'SIGKILL') killAfter = defaults.killAfter
  const n = {
    cwd: checkCwd(o.cwd),
    env: checkEnv(o.env),
    timeoutMs: checkMs(o.timeout, 'timeout'),
    killSignal,
    killAfterMs: killAfter,
    waitDelayMs: checkMs(o.waitDelay, 'waitDelay'),
    idleTimeoutMs: checkMs(o.idleTimeout, 'idleTimeout'),
    outputLimit: checkBytes(o.maxOutput, 'maxOutput'),
    containment: checkChoice(o.containment, 'containment', CONTAINMENTS),
    leftovers: checkChoice(o.leftovers, 'leftovers', LEFTOVERS),
    requireCrashSafety: o.requireCrashSafety === undefined ? undefined : !!o.requireCrashSafety,
    memoryMax: checkBytes(o.memoryMax, 'memoryMax'),
    pidsMax: checkBytes(o.pidsMax, 'pidsMax'),
    ...checkSandbox(o.sandbox),
  }
  for (const k of Object.keys(n)) if (n[k] === undefined) delete n[k]
  return n
}

// ---------------------------------------------------------------------------
// The result: every convenience field derived from the library's report, here
// and nowhere else.

function decode(buf, encoding) {
  return encoding === 'buffer' ? buf : buf.toString(encoding)
}

function resultOf(report, stdout, stderr, encoding) {
  return {
    outcome: report.outcome,
    timeoutKind: report.timeout_kind ?? null,
    exitCode: report.exit_code ?? null,
    signal: report.signal_name ?? null,
    stdout: decode(stdout, encoding),
    stderr: decode(stderr, encoding),
    killed: report.killed,
    kept: report.kept,
    durationMs: report.duration_ms,
    containment: report.containment ?? null,
    crashSafe: report.crash_safe ?? null,
    pid: report.pid ?? null,
    error: report.error ?? null,
    cleanupErrors: report.cleanup_errors ?? [],
    report,
  }
}

const EMPTY = Buffer.alloc(0)

// A report of a run that could not start, from the native side's JSON.
function failureOf(json) {
  const report = JSON.parse(json)
  const errno = report.errno
  const invalid = report.invalid_input
  delete report.errno
  delete report.invalid_input
  return { report, errno, invalid }
}

// ---------------------------------------------------------------------------
// Live runs. A run's JavaScript side is a Job (the native handle: collected,
// it cancels the run) held by the run's promise. Nothing else holds the
// promise strongly until somebody uses it (then/await/catch/finally): a run
// whose promise is dropped unobserved is collected and its tree killed.
// Observed runs are held here until they end.

const HELD = new Set()
// Every started run of this environment (main thread or worker), weakly.
const LIVE = new Set()
let exitHook = false

function installExitHook() {
  if (exitHook) return
  exitHook = true
  // process.exit() with live runs: kill them all (SIGKILL, no grace) and
  // wait (bounded) for their trees to be gone. A Ctrl-C or a crash skips
  // this: then the library's crash-safety keeper kills the trees.
  process.on('exit', () => {
    const jobs = [...LIVE].map((w) => w.deref()).filter((j) => j && !j.done)
    for (const j of jobs) j.killNow()
    const end = Date.now() + EXIT_WAIT_MS
    for (const j of jobs) j.waitDone(Math.max(0, end - Date.now()))
  })
}

function track(job) {
  const ref = new WeakRef(job)
  LIVE.add(ref)
  return () => LIVE.delete(ref)
}

const EXIT_WAIT_MS = 10_000
const kState = Symbol('corral.state')
const kResolve = Symbol('corral.resolve')

function abortWiring(signal, job) {
  const onAbort = () => job.cancel()
  signal.addEventListener('abort', onAbort, { once: true })
  return () => signal.removeEventListener('abort', onAbort)
}

class RunPromise extends Promise {
  static get [Symbol.species]() {
    return Promise
  }

  then(onFulfilled, onRejected) {
    const st = this[kState]
    if (st && !st.settled && !st.strong) {
      st.strong = this
      HELD.add(st)
    }
    return super.then(onFulfilled, onRejected)
  }
}

// The completion callback the native side holds (strongly, until the run
// ends). Made here, apart from launch(), so that its closure reaches nothing
// but `st` and the shapers: never the promise (V8 closures of one function
// share one context).
function completion(st, shape, failed) {
  return (json, stdout, stderr) => {
    const p = st.strong || st.weak.deref()
    st.settled = true
    HELD.delete(st)
    st.strong = null
    if (st.cleanup) st.cleanup()
    if (!p) return
    const report = JSON.parse(json)
    // A deferred start that failed: its report carries `errno`.
    if ('errno' in report) p[kResolve](failed(failureOf(json)))
    else p[kResolve](shape(report, stdout, stderr))
  }
}

// A streaming callback: an exception thrown by it is rethrown on its own.
function chunkCallback(f) {
  if (!f) return undefined
  return (chunk) => {
    try {
      f(chunk)
    } catch (e) {
      process.nextTick(() => {
        throw e
      })
    }
  }
}

function newRunPromise() {
  let resolve
  const promise = new RunPromise((res) => {
    resolve = res
  })
  promise[kResolve] = resolve
  return promise
}

// Starts one run; `shape(report, stdout, stderr)` makes the value the
// promise resolves with. Returns { promise, job } (job null: not started).
function launch(argv, nopts, { shape, onStdout, onStderr, signal, failed }) {
  const promise = newRunPromise()
  // Nothing the native side holds (the completion) may reach the promise
  // strongly: only through `weak` until somebody observes it.
  const st = { weak: new WeakRef(promise), strong: null, settled: false, cleanup: null }
  promise[kState] = st
  if (signal && signal.aborted) {
    st.settled = true
    promise[kResolve](failed({ aborted: true }))
    return { promise, job: null }
  }
  const job = native.start(argv, nopts, completion(st, shape, failed), chunkCallback(onStdout), chunkCallback(onStderr))
  if (job.failure !== null) {
    st.settled = true
    promise[kResolve](failed(failureOf(job.failure)))
    return { promise, job: null }
  }
  installExitHook()
  promise.job = job
  const untrack = track(job)
  const unwire = signal ? abortWiring(signal, job) : null
  st.cleanup = () => {
    untrack()
    if (unwire) unwire()
  }
  return { promise, job }
}

// ---------------------------------------------------------------------------
// run(argv, options) -> Promise<Result>

const RUN_OPTIONS = new Set([...COMMON, 'input', 'encoding', 'maxBuffer', 'onStdout', 'onStderr'])
// `killSignal` without `killAfter`: 10 s of grace, as `corral run -s`.
const RUN_GRACE_MS = 10_000

// run()'s options as the native side takes them (all but the streams and
// callbacks): the one place its names map to the library's spec.
function runNativeOptions(o) {
  const nopts = nativeOptions(o, { killAfter: RUN_GRACE_MS })
  nopts.captureLimit = checkBytes(o.maxBuffer, 'maxBuffer') ?? 1024 * 1024
  return nopts
}

// A test seam: the library's run spec (a plain object, as
// docs/run-spec-schema.json describes it) that run(argv, options) asks for.
function _runSpec(argv, options) {
  checkArgv(argv)
  const o = checkOptions(options, RUN_OPTIONS, 'run')
  return JSON.parse(native.specJson(argv, runNativeOptions(o)))
}

function run(argv, options) {
  checkArgv(argv)
  const o = checkOptions(options, RUN_OPTIONS, 'run')
  const nopts = runNativeOptions(o)
  const input = checkInput(o.input)
  if (input !== undefined) nopts.input = input
  const encoding = checkEncoding(o.encoding)
  // The spawn happens on the runtime thread: the event loop never waits.
  nopts.deferred = true
  const onStdout = checkFunction(o.onStdout, 'onStdout')
  const onStderr = checkFunction(o.onStderr, 'onStderr')
  const signal = checkAbortSignal(o.signal, 'options.signal')
  const { promise } = launch(argv, nopts, {
    shape: (report, out, err) => resultOf(report, out, err, encoding),
    onStdout,
    onStderr,
    signal,
    failed: ({ aborted, report }) =>
      resultOf(report || { outcome: 'cancelled', error: aborted ? 'aborted before start' : null, killed: 0, kept: 0, duration_ms: 0, signals_sent: [], cleanup_errors: [], survivors: [], limits_hit: [] }, EMPTY, EMPTY, encoding),
  })
  return promise
}

// ---------------------------------------------------------------------------
// spawn(argv, options) -> Process

const STDIO_MODES = ['pipe', 'ignore', 'inherit']
const SPAWN_OPTIONS = new Set([...COMMON, 'stdin', 'stdout', 'stderr', 'encoding', 'maxBuffer'])

class Process {
  constructor(pid, job, promise, streams) {
    this.pid = pid
    this.stdin = streams.stdin
    this.stdout = streams.stdout
    this.stderr = streams.stderr
    this._job = job
    this._promise = promise
  }

  /** Terminates the whole tree: `signal` first (default SIGKILL), SIGKILL after the grace. Outcome "cancelled". */
  kill(signal) {
    const s = checkSignal(signal === undefined ? 'SIGKILL' : signal, 'signal')
    if (this._job) this._job.cancel(s)
    return this._job !== null
  }

  /** The result, once the run has ended. */
  wait() {
    return this._promise.then((r) => r)
  }
}

// A pipe end the native side handed over, as a stream. An open stream keeps
// its run (and so its tree) alive. (Apart from spawn(), so that no closure
// of spawn() reaches the promise: a Process dropped with no stream open is
// collected, and its tree killed.)
function pipeStream(fd, readable, run) {
  if (fd === null) return null
  const s = new net.Socket({ fd, readable, writable: !readable })
  s._corralRun = run
  return s
}

function spawn(argv, options) {
  checkArgv(argv)
  const o = checkOptions(options, SPAWN_OPTIONS, 'spawn')
  const nopts = nativeOptions(o, { killAfter: RUN_GRACE_MS })
  const mode = (name) => checkChoice(o[name], name, STDIO_MODES) ?? 'pipe'
  const [inMode, outMode, errMode] = [mode('stdin'), mode('stdout'), mode('stderr')]
  if (inMode === 'pipe') nopts.stdinPipe = true
  if (inMode === 'inherit') nopts.stdinMode = 'inherit'
  if (outMode === 'pipe') nopts.stdoutPipe = true
  else nopts.stdoutMode = outMode
  if (errMode === 'pipe') nopts.stderrPipe = true
  else nopts.stderrMode = errMode
  const encoding = checkEncoding(o.encoding)
  nopts.captureLimit = checkBytes(o.maxBuffer, 'maxBuffer') ?? 1024 * 1024
  const signal = checkAbortSignal(o.signal, 'options.signal')
  let failure = null
  const { promise, job } = launch(argv, nopts, {
    shape: (report, out, err) => resultOf(report, out, err, encoding),
    signal,
    failed: (f) => {
      failure = f
      return resultOf(f.report || { outcome: 'cancelled', error: 'aborted before start', killed: 0, kept: 0, duration_ms: 0 }, EMPTY, EMPTY, encoding)
    },
  })
  if (job === null) {
    if (failure && failure.invalid) throw valueError(failure.report.error)
    return new Process(0, null, promise, { stdin: null, stdout: null, stderr: null })
  }
  const streams = {
    stdin: pipeStream(job.takeStdin(), false, promise),
    stdout: pipeStream(job.takeStdout(), true, promise),
    stderr: pipeStream(job.takeStderr(), true, promise),
  }
  if (streams.stdin) streams.stdin.on('error', () => {}) // EPIPE once the child is gone, as child_process
  return new Process(job.pid, job, promise, streams)
}

// ---------------------------------------------------------------------------
// execFile / exec: child_process's contract, with the whole tree contained.

const EXEC_OPTIONS = new Set([
  ...COMMON, 'encoding', 'maxBuffer', 'shell', 'input',
  // Node options accepted and ignored (no effect here).
  'windowsHide', 'windowsVerbatimArguments',
])
// After `killSignal` (SIGTERM), SIGKILL follows after this grace.
const EXEC_GRACE_MS = 2_000

function commandFailed(cmd, stderr, props) {
  const e = new Error(`Command failed: ${cmd}\n${typeof stderr === 'string' ? stderr : stderr.toString()}`)
  Object.assign(e, props)
  return e
}

function abortError(signal) {
  const e = new Error('The operation was aborted', signal && signal.reason !== undefined ? { cause: signal.reason } : undefined)
  e.name = 'AbortError'
  e.code = 'ABORT_ERR'
  return e
}

// The error for a finished run (null: success), as child_process builds it.
function execError(report, cmd, stdout, stderr, maxBuffer, signal) {
  let e = null
  const exceeded = ['stdout', 'stderr'].find((s) => report[`${s}_bytes`] > maxBuffer)
  if (exceeded) {
    e = new RangeError(`${exceeded} maxBuffer length exceeded`)
    e.code = 'ERR_CHILD_PROCESS_STDIO_MAXBUFFER'
  } else if (report.outcome === 'cancelled' && signal && signal.aborted) {
    e = abortError(signal)
  } else if (report.outcome === 'exited' && report.exit_code === 0) {
    return null
  } else {
    const killed = ['timed_out', 'cancelled', 'output_held', 'output_limit'].includes(report.outcome) || report.killed > 0
    e = commandFailed(cmd, stderr, {
      code: report.exit_code ?? null,
      killed,
      signal: report.signal_name ?? null,
    })
    if (report.outcome !== 'exited' && report.error) e.message += `(corral: ${report.error})\n`
  }
  e.cmd = cmd
  e.report = report
  return e
}

function spawnError(failure, file, args, cmd) {
  const { report, errno } = failure
  const name = errno ? util.getSystemErrorName(-errno) : report.outcome === 'sandbox_failed' ? 'ERR_CORRAL_SANDBOX' : 'ERR_CORRAL_SPAWN'
  const e = new Error(errno ? `spawn ${file} ${name}` : `spawn ${file}: ${report.error}`)
  Object.assign(e, { errno: errno ? -errno : undefined, code: name, syscall: `spawn ${file}`, path: file, spawnargs: args, cmd, report })
  return e
}

// What execFile/exec return: a small stand-in for a ChildProcess. `pid` at
// once; `stdout`/`stderr` are Readables that receive the captured output
// when the run has ended (not while it runs); 'spawn', 'exit', 'close' and
// (with a listener) 'error' are emitted as a ChildProcess emits them.
class ExecChild extends EventEmitter {
  constructor(job, encoding) {
    super()
    this.pid = job ? job.pid : undefined
    this._job = job
    this.killed = false
    this.exitCode = null
    this.signalCode = null
    this.stdin = null
    this.stdout = new Readable({ read() {} })
    this.stderr = new Readable({ read() {} })
    if (encoding !== 'buffer') {
      this.stdout.setEncoding(encoding)
      this.stderr.setEncoding(encoding)
    }
    if (job) process.nextTick(() => this.emit('spawn'))
  }

  /** Terminates the whole tree (default SIGTERM, SIGKILL after the grace). */
  kill(signal) {
    const s = checkSignal(signal === undefined ? 'SIGTERM' : signal, 'signal')
    if (!this._job || this._job.done) return false
    this._job.cancel(s)
    this.killed = true
    return true
  }

  _finish(report, out, err, callback, e, stdout, stderr) {
    if (report.pid) {
      this.exitCode = report.exit_code ?? null
      this.signalCode = report.signal_name ?? null
      this.emit('exit', this.exitCode, this.signalCode)
    } else if (e && this.listenerCount('error') > 0) {
      this.emit('error', e)
    }
    if (out.length) this.stdout.push(out)
    this.stdout.push(null)
    if (err.length) this.stderr.push(err)
    this.stderr.push(null)
    if (callback) callback(e, stdout, stderr)
    if (report.pid) this.emit('close', this.exitCode, this.signalCode)
  }
}

function execFileImpl(file, args, o, callback, shellCommand) {
  const nopts = nativeOptions(o, { killSignal: 'SIGTERM', killAfter: EXEC_GRACE_MS })
  const encoding = checkEncoding(o.encoding)
  const maxBuffer = checkBytes(o.maxBuffer, 'maxBuffer') ?? 1024 * 1024
  const input = checkInput(o.input)
  if (input !== undefined) nopts.input = input
  const signal = checkAbortSignal(o.signal, 'options.signal')
  let argv = [file, ...args]
  const shell = o.shell
  if (shell !== undefined && shell !== null && shell !== false && typeof shell !== 'string' && shell !== true) {
    throw typeError(`The "options.shell" property must be of type boolean or string. Received ${show(shell)}`)
  }
  if (shellCommand !== undefined || (shell !== undefined && shell !== false && shell !== null)) {
    const sh = typeof shell === 'string' ? checkString(shell, 'options.shell') : '/bin/sh'
    argv = [sh, '-c', shellCommand ?? argv.join(' ')]
  }
  const cmd = shellCommand ?? [file, ...args].join(' ')
  // Captured: enough for maxBuffer characters (at most 4 bytes each) in
  // the head; the run is cancelled once a stream passes maxBuffer bytes.
  nopts.captureLimit = Number.isFinite(maxBuffer) ? 2 * (4 * maxBuffer + 4) : Infinity
  if (Number.isFinite(maxBuffer)) nopts.cancelAfterBytes = maxBuffer
  const cut = (buf) => {
    if (!Number.isFinite(maxBuffer) || buf.length <= maxBuffer) return decode(buf, encoding)
    if (encoding === 'buffer') return buf.subarray(0, maxBuffer)
    return buf.toString(encoding).slice(0, maxBuffer)
  }
  const empty = decode(EMPTY, encoding)
  const { promise, job } = launch(argv, nopts, {
    shape: (report, out, err) => {
      const stdout = cut(out)
      const stderr = cut(err)
      return [report, out, err, execError(report, cmd, stdout, stderr, maxBuffer, signal), stdout, stderr]
    },
    signal,
    failed: (f) => {
      if (f.aborted) return [{}, EMPTY, EMPTY, abortError(signal), empty, empty]
      const e = f.invalid
        ? Object.assign(valueError(f.report.error), { cmd, report: f.report })
        : spawnError(f, argv[0], argv.slice(1), cmd)
      return [f.report, EMPTY, EMPTY, e, empty, empty]
    },
  })
  const child = new ExecChild(job, encoding)
  // The callback's run is held until it ends, whoever holds the child.
  promise.then(([report, out, err, e, stdout, stderr]) => {
    if (e && child.killed && e.killed === false) e.killed = true
    try {
      child._finish(report, out, err, callback, e, stdout, stderr)
    } catch (thrown) {
      // A throwing callback or listener is an uncaught exception, as with
      // child_process, not a rejected promise.
      process.nextTick(() => {
        throw thrown
      })
    }
  })
  return child
}

function normalizeExecFileArgs(file, args, options, callback) {
  checkString(file, 'file')
  if (typeof args === 'function') {
    callback = args
    args = []
    options = undefined
  } else if (args === undefined || args === null) {
    args = []
  } else if (!Array.isArray(args)) {
    if (typeof args === 'object') {
      callback = options
      options = args
      args = []
    } else throw typeError(`The "args" argument must be an instance of Array. Received ${show(args)}`)
  }
  if (typeof options === 'function') {
    callback = options
    options = undefined
  }
  if (callback !== undefined && callback !== null && typeof callback !== 'function') {
    throw typeError(`The "callback" argument must be of type function. Received ${show(callback)}`)
  }
  args.forEach((a, i) => checkString(String(a), `args[${i}]`))
  return { file, args: args.map(String), options, callback }
}

function execFile(file, args, options, callback) {
  const n = normalizeExecFileArgs(file, args, options, callback)
  const o = checkOptions(n.options, EXEC_OPTIONS, 'execFile')
  return execFileImpl(n.file, n.args, o, n.callback)
}

function exec(command, options, callback) {
  checkString(command, 'command')
  if (typeof options === 'function') {
    callback = options
    options = undefined
  }
  if (callback !== undefined && callback !== null && typeof callback !== 'function') {
    throw typeError(`The "callback" argument must be of type function. Received ${show(callback)}`)
  }
  const o = checkOptions(options, EXEC_OPTIONS, 'exec')
  return execFileImpl(command, [], o, callback, command)
}

function promisified(fn) {
  return (...a) => {
    let child
    const p = new Promise((resolve, reject) => {
      child = fn(...a, (err, stdout, stderr) => {
        if (err) {
          err.stdout = stdout
          err.stderr = stderr
          reject(err)
        } else resolve({ stdout, stderr })
      })
    })
    p.child = child
    return p
  }
}

Object.defineProperty(execFile, util.promisify.custom, { enumerable: false, value: promisified(execFile) })
Object.defineProperty(exec, util.promisify.custom, { enumerable: false, value: promisified(exec) })

// ---------------------------------------------------------------------------
// Session: a persistent shell (the library's corral::Session). Each run is a
// fresh shell in its own contained tree with the session's state (working
// directory, variables, functions, aliases, options, umask) carried over;
// runs are one at a time (a concurrent run waits).

const SESSIONS = new Set()
let sessionExitHook = false

class Session {
  constructor(options = {}) {
    const o = options || {}
    for (const k of Object.keys(o)) {
      if (!['cwd', 'env', 'envClear', 'shell', 'containment', 'requireCrashSafety'].includes(k)) {
        throw new TypeError(`new Session(): unknown option ${JSON.stringify(k)}`)
      }
    }
    const cwd = o.cwd instanceof URL ? require('url').fileURLToPath(o.cwd) : o.cwd
    this._native = new native.NativeSession({
      cwd,
      env: o.env == null ? undefined : JSON.stringify(Object.fromEntries(Object.entries(o.env).map(([k, v]) => [k, String(v)]))),
      envClear: o.envClear === true,
      shell: o.shell,
      containment: o.containment,
      requireCrashSafety: o.requireCrashSafety === true,
    })
    SESSIONS.add(this)
    if (!sessionExitHook) {
      sessionExitHook = true
      // Whatever a session started dies with this process (its death by a
      // signal is the keeper's).
      process.on('exit', () => {
        for (const s of SESSIONS) s._native.closeSync()
      })
    }
  }

  /** The session's id (`result.sessionId`). */
  get id() {
    return this._native.id
  }

  /** How the session ended, in words (null while it is open). */
  get ended() {
    return this._native.ended
  }

  /**
   * Runs one shell command line; resolves to the result `run()` gives,
   * plus `sessionId`, `jobs` ([{pid, command}] left running by it) and
   * `sessionEnded`. A timeout does not reject: `outcome` says it. Rejects
   * with code ERR_CORRAL_SESSION_CLOSED once the session has ended.
   */
  async run(command, options = {}) {
    if (typeof command !== 'string') throw new TypeError('Session.run(): the command must be a string')
    const o = options || {}
    for (const k of Object.keys(o)) {
      if (!['timeout', 'idleTimeout', 'maxOutput', 'maxBuffer', 'waitDelay', 'encoding'].includes(k)) {
        throw new TypeError(`Session.run(): unknown option ${JSON.stringify(k)}`)
      }
    }
    const encoding = o.encoding === undefined ? 'utf8' : o.encoding === null ? 'buffer' : o.encoding
    let done
    try {
      done = await this._native.run(command, {
        timeout: o.timeout,
        idleTimeout: o.idleTimeout,
        maxOutput: o.maxOutput,
        maxBuffer: o.maxBuffer,
        waitDelay: o.waitDelay,
      })
    } catch (e) {
      if (String(e && e.message).includes('ERR_CORRAL_SESSION_CLOSED')) {
        const err = new Error(`the session ${this.id} is closed: ${this.ended}`)
        err.code = 'ERR_CORRAL_SESSION_CLOSED'
        throw err
      }
      throw e
    }
    const report = JSON.parse(done.json)
    const r = resultOf(report, done.stdout, done.stderr, encoding)
    r.sessionId = report.session_id
    r.jobs = report.jobs
    r.sessionEnded = report.session_ended ?? null
    if (r.sessionEnded !== null) SESSIONS.delete(this)
    return r
  }

  /** The live background jobs: [{pid, command}]. */
  jobs() {
    return JSON.parse(this._native.jobs())
  }

  /** Kills the background job `pid` (and what it started). */
  killJob(pid) {
    return this._native.killJob(pid)
  }

  /** Closes the session: its background jobs are killed. */
  async close() {
    SESSIONS.delete(this)
    await this._native.close()
  }
}

module.exports = {
  run,
  spawn,
  Session,
  execFile,
  exec,
  Process,
  enableSubreaper: native.enableSubreaper,
  raiseNofileLimit: native.raiseNofileLimit,
  _runSpec,
}
