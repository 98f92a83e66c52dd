'use strict'
// The Node column of docs/run-spec-surfaces.json: every option of run()
// the table claims reaches the library's run spec (`_runSpec` returns the
// spec run() would run); every field it does not offer says why. The rows
// themselves are held to the spec's fields by the Rust test
// crates/corral-cli/src/surfaces.rs.
const test = require('node:test')
const assert = require('node:assert/strict')
const fs = require('node:fs')
const path = require('node:path')
const { _runSpec } = require('..')

const TABLE = path.join(__dirname, '..', '..', '..', 'docs', 'run-spec-surfaces.json')
const fields = JSON.parse(fs.readFileSync(TABLE, 'utf8')).fields

for (const [field, row] of Object.entries(fields)) {
  const cell = row.node
  test(`${field}: ${cell.not_offered ? 'not offered' : 'reaches the spec'}`, () => {
    if (cell.not_offered !== undefined) {
      assert.ok(cell.not_offered.length > 10, field)
      return
    }
    const plain = _runSpec(['true'], {})
    const got = cell.argv ? _runSpec(cell.argv, {}) : _runSpec(['true'], { [cell.option]: cell.value })
    assert.notDeepEqual(got[field], plain[field], `${field}: ${JSON.stringify(cell)} -> ${JSON.stringify(got)}`)
  })
}

test('every option of run() that is an option of the run is in the table', () => {
  const claimed = new Set(Object.values(fields).map((r) => r.node.option).filter(Boolean))
  // run()'s options that are no option of the run: its streams, callbacks,
  // decoding and cancellation.
  const own = ['input', 'encoding', 'onStdout', 'onStderr', 'signal']
  const options = ['timeout', 'idleTimeout', 'maxOutput', 'killSignal', 'killAfter', 'waitDelay', 'cwd', 'env', 'containment', 'leftovers', 'requireCrashSafety', 'memoryMax', 'pidsMax', 'maxBuffer', 'sandbox']
  assert.deepEqual([...claimed].sort(), options.sort())
  assert.throws(() => _runSpec(['true'], { bogus: 1 }), /Unknown option "bogus"/)
  for (const k of own) assert.ok(!claimed.has(k), k)
})

test('milliseconds and names as the library takes them', () => {
  const s = _runSpec(['true'], { timeout: 1500, killSignal: 'SIGINT', containment: 'pid-namespace' })
  assert.equal(s.timeout_ms, 1500)
  assert.equal(s.signal, 'SIGINT')
  assert.equal(s.containment, 'pid-namespace')
  // killSignal without killAfter: 10 s of grace, as corral run -s.
  assert.equal(s.grace_ms, 10000)
})
