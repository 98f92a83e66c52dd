'use strict'
// The native addon's loader (napi-rs's usual layout, written by hand so that
// an unsupported platform gets a message naming the package it would need).
//
// A development build (`npm run build`) leaves corral.PLATFORM.node beside
// this file; an installed `corral` finds its addon in the platform package
// `corral-PLATFORM`, one of the package's optionalDependencies, of which npm
// installs only the one whose os/cpu/libc match.

const { existsSync, readFileSync } = require('fs')
const { join } = require('path')

// The platform packages built and published (scripts/dist.sh).
const SUPPORTED = ['linux-x64-gnu', 'linux-arm64-gnu', 'linux-x64-musl', 'win32-x64-gnu']

function isMusl() {
  // glibc's ldd is a script naming GNU libc; musl's is a link to its loader.
  try {
    return readFileSync('/usr/bin/ldd', 'latin1').includes('musl')
  } catch {}
  try {
    const report = process.report.getReport()
    const header = (typeof report === 'string' ? JSON.parse(report) : report).header
    return !header.glibcVersionRuntime
  } catch {}
  return false
}

function platformKey() {
  const { platform, arch } = process
  if (platform === 'linux') return `${platform}-${arch}-${isMusl() ? 'musl' : 'gnu'}`
  if (platform === 'win32') return `${platform}-${arch}-gnu`
  return `${platform}-${arch}`
}

function version() {
  try {
    return require('./package.json').version
  } catch {
    return ''
  }
}

function load() {
  const key = platformKey()
  const local = join(__dirname, `corral.${key}.node`)
  if (existsSync(local)) return require(local)
  const pkg = `corral-${key}`
  const v = version()
  if (!SUPPORTED.includes(key)) {
    throw new Error(
      `corral: no prebuilt native addon for this platform (${key}): there is no package ${pkg}. ` +
        `Prebuilt: ${SUPPORTED.map((k) => `corral-${k}`).join(', ')}. ` +
        'Build the addon from source instead (crates/corral-node: npm ci && npm run build, with Rust installed).',
    )
  }
  try {
    return require(pkg)
  } catch (e) {
    if (e && e.code === 'MODULE_NOT_FOUND' && String(e.message).includes(pkg)) {
      throw new Error(
        `corral: the native addon for this platform (${key}) is in the package ${pkg}, which is not installed ` +
          '(npm installs it as an optional dependency of corral; it is skipped with --no-optional or ' +
          `--omit=optional, or when the lockfile was made on another platform). Install it: npm install ${pkg}${v ? `@${v}` : ''}`,
      )
    }
    throw new Error(`corral: the package ${pkg} is installed but its addon did not load: ${e && e.message}`, { cause: e })
  }
}

module.exports = load()
