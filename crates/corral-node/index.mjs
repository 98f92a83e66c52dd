// ESM entry: the same module as index.js (one instance, one runtime).
import { createRequire } from 'node:module'

const corral = createRequire(import.meta.url)('./index.js')

export const { run, spawn, execFile, exec, Process, enableSubreaper, raiseNofileLimit } = corral
export default corral
