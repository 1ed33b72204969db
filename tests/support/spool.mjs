// The one way Spool's Node SDK suites (tests/ai-sdk, tests/ag-ui, tests/opencode-sdk)
// run the real `spool` binary: a temporary workspace per test file, `spool serve` on a
// free port with its data dir in it, project directories beside it, and a clean stop.
// Plain Node (its own `node:` modules only), imported by relative path (`../support/spool.mjs`),
// so each suite's own `npm ci && node --test` finds it in a clean clone.
//
// Start-up waits on readiness, never on a sleep: the first line spool prints names the
// address it bound, and `/api/health` must then answer. Whatever spool wrote to stderr is
// kept, so a start that fails says why.
//
// SPOOL_BIN names the binary (default: target/debug/spool at the repository root).

import { after } from "node:test"
import assert from "node:assert/strict"
import { spawn } from "node:child_process"
import { mkdtemp, mkdir, realpath, rm, writeFile } from "node:fs/promises"
import { createInterface } from "node:readline"
import { tmpdir } from "node:os"
import path from "node:path"
import { fileURLToPath } from "node:url"

const here = path.dirname(fileURLToPath(import.meta.url))
export const BIN = process.env.SPOOL_BIN ?? path.resolve(here, "../../target/debug/spool")

/** How long the suites wait for spool to start, and for anything they wait on. */
export const WAIT_MS = 20_000

/**
 * The calling test file's workspace: a temporary directory named after `prefix`, made
 * when first used and removed after the file's last test, every server started in it
 * stopped first. It registers that `after` hook itself, so call it once at the top
 * level of a test file.
 */
export function workspace(prefix) {
  // Made on first use rather than in a `before` of its own: Node 20 does not finish one
  // top-level `before` hook before starting the next, so the file's own could run first.
  let made
  const dir = () => (made ??= mkdtemp(path.join(tmpdir(), prefix)))
  const servers = []
  after(async () => {
    for (const server of servers) await server.stop()
    if (made) await rm(await made, { recursive: true, force: true })
  })
  const work = {
    /** `spool serve` with its data in `<dir>/<name>` and `args` added. */
    async serve(name = "data", args = []) {
      const server = await startSpool(path.join(await dir(), name), args)
      servers.push(server)
      return server
    },
    /** `<dir>/<name>` made with `files` (relative path → text) in it; its real path. */
    async project(name, files = {}) {
      const projectDir = path.join(await dir(), name)
      await mkdir(projectDir, { recursive: true })
      for (const [file, text] of Object.entries(files)) await writeFile(path.join(projectDir, file), text)
      return realpath(projectDir)
    },
    /**
     * `serve(name, args)` with a project of its own registered, `<dir>/<name>-project`
     * holding `files`: the server with its `projectId` and `projectDir`.
     */
    async serveWithProject(name = "data", { args = [], files = {} } = {}) {
      const server = await work.serve(name, args)
      const projectDir = await work.project(`${name}-project`, files)
      return { ...server, projectId: await server.addProject(projectDir), projectDir }
    },
  }
  return work
}

/**
 * Starts `spool serve` on a free port with the scripted model (5 ms delay) and its data
 * in `dataDir`, and waits until it answers. The server: its `baseUrl`, `api` for JSON
 * calls, `addProject(dir)`, `log()` (its stderr so far) and `stop()`.
 */
export async function startSpool(dataDir, args = []) {
  const child = spawn(
    BIN,
    ["serve", "--addr", "127.0.0.1:0", "--data-dir", dataDir, "--scripted-delay-ms", "5", ...args],
    { stdio: ["ignore", "pipe", "pipe"], env: { ...process.env, RUST_LOG: process.env.RUST_LOG ?? "warn" } },
  )
  let stderr = ""
  child.stderr.on("data", (chunk) => (stderr += chunk))
  const stop = async () => {
    if (child.exitCode !== null || child.signalCode !== null) return
    const exited = new Promise((resolve) => child.once("exit", resolve))
    child.kill("SIGTERM")
    await exited
  }
  try {
    const baseUrl = await listening(child, () => stderr)
    const health = await fetch(`${baseUrl}/api/health`)
    assert.ok(health.ok, `spool at ${baseUrl} is up but /api/health says ${health.status}:\n${stderr}`)
    const api = async (method, url, body) => {
      const res = await fetch(baseUrl + url, {
        method,
        headers: body ? { "content-type": "application/json" } : {},
        body: body ? JSON.stringify(body) : undefined,
      })
      assert.ok(res.ok, `${method} ${url}: ${res.status} ${await res.clone().text()}`)
      return res.status === 204 ? null : res.json()
    }
    /** Registers the project at `dir` (a real path); its id. */
    const addProject = async (dir) => (await api("POST", "/api/projects", { path: dir })).id
    return { baseUrl, api, addProject, log: () => stderr, stop }
  } catch (error) {
    await stop()
    throw error
  }
}

/** The base URL from spool's first line, `spool listening on http://…`. */
async function listening(child, log) {
  const firstLine = await new Promise((resolve, reject) => {
    createInterface({ input: child.stdout }).once("line", resolve)
    child.once("exit", (code) => reject(new Error(`spool exited (${code}) before listening:\n${log()}`)))
    child.once("error", (error) => reject(new Error(`spool did not run (${BIN}): ${error.message}`)))
    // unref: once spool is up, this timer must not hold the test process open for the
    // rest of its 20 s (every run of a suite took 20 s for that alone).
    setTimeout(() => reject(new Error(`spool did not start within ${WAIT_MS} ms:\n${log()}`)), WAIT_MS).unref()
  })
  const match = /^spool listening on (http:\/\/\S+)$/.exec(firstLine)
  assert.ok(match, `unexpected first line: ${firstLine}\n${log()}`)
  return match[1]
}
