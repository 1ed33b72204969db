// Every OpenCode event Spool sends, checked against the `@opencode-ai/sdk` types (issue
// 37: "a published schema that Spool's own events break is a failing test"). One scripted
// session goes through text, thinking, a prompt with a file, a tool call with output
// (bash, approved), a rejected approval, a question, todos, a queued prompt deleted, a
// cancelled run and a title; every event of `/event` and of `/global/event` is collected and validated
// against JSON Schemas generated from the SDK's own `.d.ts` types
// (`conformance/spool-events.d.ts`), strictly: no field the SDK does not declare.
//
// SPOOL_BIN names the binary (default: target/debug/spool at the repository root).

import { test, before } from "node:test"
import assert from "node:assert/strict"
import path from "node:path"
import { fileURLToPath } from "node:url"
import { createOpencodeClient } from "@opencode-ai/sdk/v2"
import { createGenerator } from "ts-json-schema-generator"
import Ajv from "ajv"
import { WAIT_MS, workspace } from "../support/spool.mjs"

const here = path.dirname(fileURLToPath(import.meta.url))

const work = workspace("spool-opencode-conformance-")
let baseUrl
/** Spool's own API, for what OpenCode's has no route for (deleting a queued prompt). */
let native

before(async () => {
  ;({ baseUrl, api: native } = await work.serve())
})

/** A validator per named type of `conformance/spool-events.d.ts`. */
function validators(...types) {
  const generator = createGenerator({
    path: path.join(here, "conformance/spool-events.d.ts"),
    type: "*",
    skipTypeCheck: true,
    additionalProperties: false,
    expose: "export",
    topRef: false,
  })
  const ajv = new Ajv({ allErrors: true, strict: false })
  return Object.fromEntries(types.map((type) => [type, ajv.compile(generator.createSchema(type))]))
}

/** Collects an SDK event stream in the background; `waitFor` waits for one event. */
function collect(subscription, controller, unwrap = (e) => e) {
  const events = []
  let wake = () => {}
  let failure
  const reading = (async () => {
    try {
      for await (const event of subscription.stream) {
        events.push(event)
        wake()
      }
    } catch (error) {
      if (!controller.signal.aborted) failure = error
    }
    wake()
  })()
  return {
    events,
    async waitFor(pred, what) {
      const deadline = Date.now() + WAIT_MS
      for (let i = 0; ; ) {
        for (; i < events.length; i++) if (pred(unwrap(events[i]))) return unwrap(events[i])
        if (failure) throw failure
        const left = deadline - Date.now()
        if (left <= 0) throw new Error(`no ${what} within ${WAIT_MS} ms; saw: ${events.map((e) => unwrap(e).type)}`)
        await new Promise((resolve) => {
          const timer = setTimeout(resolve, Math.min(left, 250))
          wake = () => {
            clearTimeout(timer)
            resolve()
          }
        })
      }
    },
    async close() {
      controller.abort()
      await reading
    },
  }
}

test("every /event and /global/event event of a scripted session matches the SDK's types", async () => {
  const { SpoolEvent, SpoolGlobalEvent } = validators("SpoolEvent", "SpoolGlobalEvent")
  const directory = await work.project("conformance")
  const client = createOpencodeClient({ baseUrl, directory, throwOnError: true })
  const { data: session } = await client.session.create({ title: "conformance" })
  const sessionID = session.id
  const mine = (e) =>
    (e.properties?.sessionID ?? e.properties?.part?.sessionID ?? e.properties?.info?.sessionID) === sessionID
  const idle = (e) => e.type === "session.idle" && mine(e)

  const controller = new AbortController()
  const feed = collect(await client.event.subscribe({}, { signal: controller.signal }), controller)
  const globalController = new AbortController()
  const global = collect(
    await client.global.event({ signal: globalController.signal }),
    globalController,
    (e) => e.payload,
  )
  try {
    await feed.waitFor((e) => e.type === "server.connected", "server.connected")
    await global.waitFor((e) => e.type === "server.connected", "server.connected on /global/event")
    let settled = 0
    /** Prompts (`files` before the text) and waits for the session to settle (its next `session.idle`). */
    const run = async (text, during = async () => {}, files = []) => {
      await client.session.promptAsync({ sessionID, parts: [...files, { type: "text", text }] })
      await during()
      const want = ++settled
      await feed.waitFor(() => feed.events.filter(idle).length >= want, `session.idle #${want} after ${text}`)
    }

    // Text and thinking.
    await run("think: weighing the options carefully | the answer is here")
    // A prompt with a file: its user message's `file` part.
    const notes = { type: "file", mime: "text/plain", filename: "notes.txt", url: `data:text/plain;base64,${Buffer.from("a note\n").toString("base64")}` }
    await run("echo: read it", async () => {}, [notes])
    // A tool call with output, approved; then one rejected.
    const permission = async (reply) => {
      const asked = await feed.waitFor(
        (e) => e.type === "permission.asked" && mine(e) && !feed.events.some((r) => r.type === "permission.replied" && r.properties.requestID === e.properties.id),
        "permission.asked",
      )
      await client.permission.reply({ requestID: asked.properties.id, reply })
    }
    await run('tool: bash {"command":"echo live output"}', () => permission("once"))
    await run('tool: write {"path":"refused.txt","content":"no"}', () => permission("reject"))
    // A question, answered.
    const args = { question: "Which colour?", options: [{ label: "red" }, { label: "blue", description: "sky" }] }
    await run(`tool: question ${JSON.stringify(args)}`, async () => {
      const asked = await feed.waitFor((e) => e.type === "question.asked" && mine(e), "question.asked")
      await client.question.reply({ requestID: asked.properties.id, answers: [["blue"]] })
    })
    // Todos.
    const todos = [{ content: "Read the code", status: "completed", priority: "high" }, { content: "Write it", status: "in_progress" }]
    await run(`tool: todo_write ${JSON.stringify({ todos })}`)
    // A long run: a prompt queued behind it and deleted, then the run cancelled.
    await run("stream: 2000", async () => {
      await feed.waitFor((e) => e.type === "message.part.delta" && mine(e), "a delta of the long run")
      const queued = await native("POST", `/api/sessions/${sessionID}/prompt`, { text: "echo: never", queue: true })
      assert.equal(queued.queued, true)
      await native("DELETE", `/api/messages/${queued.messageId}`)
      await client.session.abort({ sessionID })
    })
    // A title.
    await client.session.update({ sessionID, title: "conformance, renamed" })
    await feed.waitFor((e) => e.type === "session.updated" && e.properties.info.title === "conformance, renamed", "session.updated")
    await global.waitFor((e) => e.type === "session.updated" && e.properties.info.title === "conformance, renamed", "global session.updated")
  } finally {
    await feed.close()
    await global.close()
  }

  const seen = new Set(feed.events.map((e) => (e.type === "message.part.updated" ? `part:${e.properties.part.type}` : e.type)))
  for (const kind of ["message.part.delta", "part:reasoning", "part:text", "part:file", "part:tool", "part:step-start", "part:step-finish", "permission.asked", "permission.replied", "question.asked", "question.replied", "todo.updated", "session.updated", "session.status", "message.updated"]) {
    assert.ok(seen.has(kind), `the session sent ${kind}: ${[...seen]}`)
  }
  const finishes = feed.events.filter((e) => e.type === "message.part.updated" && e.properties.part.type === "step-finish")
  assert.ok(finishes.every((e) => typeof e.properties.part.tokens.total === "number"), "step-finish carries tokens.total")
  assert.ok(global.events.every((e) => typeof e.directory === "string"), "global events name their directory")
  assert.ok(global.events.some((e) => e.directory === directory && e.payload.type === "message.part.delta"), "the session's deltas reach /global/event under its directory")

  const failures = []
  const check = (validate, event, where) => {
    if (!validate(event)) {
      // A union's errors name every branch; the branch of the event's own type says why.
      const errors = validate.errors.filter((e) => !e.message?.includes("must be equal to constant"))
      failures.push(`${where} ${JSON.stringify(event).slice(0, 400)}\n  ${JSON.stringify(errors.slice(0, 6))}`)
    }
  }
  feed.events.forEach((e) => check(SpoolEvent, e, "/event"))
  global.events.forEach((e) => check(SpoolGlobalEvent, e, "/global/event"))
  assert.deepEqual(failures, [], `${failures.length} events break the SDK's types:\n${failures.slice(0, 20).join("\n")}`)
})
